/// Why a compressed stream could not be decoded. `offset` is the byte where decoding stopped.
public struct InflateError: Error, Sendable, Equatable, CustomStringConvertible {
    public let reason: String
    public let offset: Int

    public var description: String { "invalid compressed data at byte \(offset): \(reason)" }
}

/// A small decoder for zlib streams (RFC 1950) holding DEFLATE data (RFC 1951): stored, fixed
/// Huffman and dynamic Huffman blocks. Ruby's Sidekiq stores `error_backtrace` as
/// `Base64.encode64(Zlib::Deflate.deflate(json))`, and the system zlib is not available as a
/// Swift module here, so this decodes it without a C dependency.
///
/// It decodes bit by bit (in the manner of zlib's `puff.c`): slow for megabytes, ample for
/// backtraces. Output is capped by `maxOutput` so a hostile payload cannot exhaust memory.
package enum Inflate {
    /// Decodes a zlib stream: 2-byte header, DEFLATE data, Adler-32 of the output (checked).
    public static func zlib(_ input: [UInt8], maxOutput: Int = 16 << 20) throws(InflateError) -> [UInt8] {
        guard input.count >= 6 else { throw InflateError(reason: "too short for a zlib stream", offset: 0) }
        let cmf = Int(input[0]), flg = Int(input[1])
        guard cmf & 0x0F == 8, cmf >> 4 <= 7 else { throw InflateError(reason: "not a zlib DEFLATE header", offset: 0) }
        guard (cmf << 8 | flg) % 31 == 0 else { throw InflateError(reason: "zlib header checksum mismatch", offset: 1) }
        guard flg & 0x20 == 0 else { throw InflateError(reason: "preset dictionaries are not supported", offset: 1) }
        var decoder = Decoder(input: input, start: 2, maxOutput: maxOutput)
        try decoder.run()
        let end = decoder.bytePosition
        guard end + 4 <= input.count else { throw InflateError(reason: "missing Adler-32 checksum", offset: end) }
        let expected = UInt32(input[end]) << 24 | UInt32(input[end + 1]) << 16 | UInt32(input[end + 2]) << 8 | UInt32(input[end + 3])
        guard adler32(decoder.output) == expected else { throw InflateError(reason: "Adler-32 checksum mismatch", offset: end) }
        return decoder.output
    }

    /// Decodes raw DEFLATE data (no zlib header or checksum).
    public static func raw(_ input: [UInt8], maxOutput: Int = 16 << 20) throws(InflateError) -> [UInt8] {
        var decoder = Decoder(input: input, start: 0, maxOutput: maxOutput)
        try decoder.run()
        return decoder.output
    }

    public static func adler32(_ bytes: [UInt8]) -> UInt32 {
        var a: UInt32 = 1, b: UInt32 = 0
        var index = 0
        while index < bytes.count {
            // 5552 is the largest n for which the sums cannot overflow before the modulo.
            let end = min(index + 5552, bytes.count)
            while index < end {
                a &+= UInt32(bytes[index])
                b &+= a
                index += 1
            }
            a %= 65521
            b %= 65521
        }
        return b << 16 | a
    }
}

/// A canonical Huffman code as counts per length and symbols in code order (RFC 1951 §3.2.2).
private struct HuffmanCode {
    var counts = [Int](repeating: 0, count: 16)
    var symbols: [Int]

    /// Builds the code from per-symbol code lengths (0 = unused). Returns nil when the lengths
    /// over-subscribe the code space. `complete` tells whether every code is used.
    init?(lengths: [Int]) {
        symbols = [Int](repeating: 0, count: lengths.count)
        for length in lengths { counts[length] += 1 }
        var left = 1
        for length in 1..<16 {
            left <<= 1
            left -= counts[length]
            if left < 0 { return nil }
        }
        var offsets = [Int](repeating: 0, count: 16)
        for length in 1..<15 { offsets[length + 1] = offsets[length] + counts[length] }
        for (symbol, length) in lengths.enumerated() where length != 0 {
            symbols[offsets[length]] = symbol
            offsets[length] += 1
        }
        unusedCodes = left
    }

    /// Codes left unassigned (0 for a complete code).
    private(set) var unusedCodes = 0
}

/// The decoding state: input bit cursor and output window (the whole output, so back-references
/// can reach anywhere in it).
private struct Decoder {
    let input: [UInt8]
    var position: Int
    var bitBuffer = 0
    var bitCount = 0
    var output: [UInt8] = []
    let maxOutput: Int

    init(input: [UInt8], start: Int, maxOutput: Int) {
        self.input = input
        self.position = start
        self.maxOutput = maxOutput
    }

    /// The first byte after the last bit consumed (the stream ends on a byte boundary).
    var bytePosition: Int { position }

    static let lengthBase = [3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258]
    static let lengthExtra = [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0]
    static let distanceBase = [1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537, 2049, 3073,
                               4097, 6145, 8193, 12289, 16385, 24577]
    static let distanceExtra = [0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13]
    /// The order in which code-length code lengths are stored in a dynamic block header.
    static let codeLengthOrder = [16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15]

    static let fixedCodes: (HuffmanCode, HuffmanCode) = {
        var lengths = [Int](repeating: 8, count: 288)
        for i in 144..<256 { lengths[i] = 9 }
        for i in 256..<280 { lengths[i] = 7 }
        return (HuffmanCode(lengths: lengths)!, HuffmanCode(lengths: [Int](repeating: 5, count: 30))!)
    }()

    func failure(_ reason: String) -> InflateError { InflateError(reason: reason, offset: position) }

    mutating func bits(_ count: Int) throws(InflateError) -> Int {
        var value = bitBuffer
        while bitCount < count {
            guard position < input.count else { throw failure("unexpected end of data") }
            value |= Int(input[position]) << bitCount
            position += 1
            bitCount += 8
        }
        bitBuffer = value >> count
        bitCount -= count
        return value & ((1 << count) - 1)
    }

    mutating func run() throws(InflateError) {
        var last = false
        while !last {
            last = try bits(1) == 1
            switch try bits(2) {
            case 0: try stored()
            case 1: try codes(Self.fixedCodes.0, Self.fixedCodes.1)
            case 2: try dynamic()
            default: throw failure("invalid block type 3")
            }
        }
    }

    mutating func stored() throws(InflateError) {
        bitBuffer = 0
        bitCount = 0
        guard position + 4 <= input.count else { throw failure("unexpected end of data in a stored block header") }
        let length = Int(input[position]) | Int(input[position + 1]) << 8
        let complement = Int(input[position + 2]) | Int(input[position + 3]) << 8
        guard length == ~complement & 0xFFFF else { throw failure("stored block length check failed") }
        position += 4
        guard position + length <= input.count else { throw failure("unexpected end of data in a stored block") }
        try reserve(length)
        output.append(contentsOf: input[position..<(position + length)])
        position += length
    }

    mutating func reserve(_ count: Int) throws(InflateError) {
        if output.count + count > maxOutput { throw failure("output larger than \(maxOutput) bytes") }
    }

    mutating func decode(_ code: HuffmanCode) throws(InflateError) -> Int {
        var value = 0, first = 0, index = 0
        for length in 1..<16 {
            value |= try bits(1)
            let count = code.counts[length]
            if value - count < first { return code.symbols[index + (value - first)] }
            index += count
            first += count
            first <<= 1
            value <<= 1
        }
        throw failure("invalid Huffman code")
    }

    mutating func codes(_ literals: HuffmanCode, _ distances: HuffmanCode) throws(InflateError) {
        while true {
            let symbol = try decode(literals)
            if symbol < 256 {
                try reserve(1)
                output.append(UInt8(symbol))
            } else if symbol == 256 {
                return
            } else {
                let index = symbol - 257
                guard index < 29 else { throw failure("invalid length symbol \(symbol)") }
                let length = Self.lengthBase[index] + (try bits(Self.lengthExtra[index]))
                let distanceSymbol = try decode(distances)
                guard distanceSymbol < 30 else { throw failure("invalid distance symbol \(distanceSymbol)") }
                let distance = Self.distanceBase[distanceSymbol] + (try bits(Self.distanceExtra[distanceSymbol]))
                guard distance <= output.count else { throw failure("distance \(distance) reaches before the start") }
                try reserve(length)
                let start = output.count - distance
                for offset in 0..<length { output.append(output[start + offset]) }
            }
        }
    }

    mutating func dynamic() throws(InflateError) {
        let literalCount = try bits(5) + 257
        let distanceCount = try bits(5) + 1
        let codeLengthCount = try bits(4) + 4
        guard literalCount <= 286, distanceCount <= 30 else { throw failure("too many codes in a dynamic block") }
        var codeLengthLengths = [Int](repeating: 0, count: 19)
        for i in 0..<codeLengthCount { codeLengthLengths[Self.codeLengthOrder[i]] = try bits(3) }
        guard let codeLengthCode = HuffmanCode(lengths: codeLengthLengths), codeLengthCode.unusedCodes == 0 else {
            throw failure("invalid code-length code")
        }
        var lengths: [Int] = []
        lengths.reserveCapacity(literalCount + distanceCount)
        while lengths.count < literalCount + distanceCount {
            let symbol = try decode(codeLengthCode)
            if symbol < 16 {
                lengths.append(symbol)
                continue
            }
            var repeated = 0, times = 0
            switch symbol {
            case 16:
                guard let previous = lengths.last else { throw failure("repeat with no previous length") }
                repeated = previous
                times = 3 + (try bits(2))
            case 17: times = 3 + (try bits(3))
            default: times = 11 + (try bits(7))
            }
            guard lengths.count + times <= literalCount + distanceCount else { throw failure("too many code lengths") }
            lengths += [Int](repeating: repeated, count: times)
        }
        guard lengths[256] != 0 else { throw failure("no end-of-block code") }
        let literalLengths = Array(lengths[0..<literalCount])
        let distanceLengths = Array(lengths[literalCount...])
        guard let literals = HuffmanCode(lengths: literalLengths),
              literals.unusedCodes == 0 || literalCount - literals.counts[0] == 1 else {
            throw failure("invalid literal/length code")
        }
        // A distance code may be incomplete if it has a single code (RFC 1951 §3.2.7).
        guard let distances = HuffmanCode(lengths: distanceLengths),
              distances.unusedCodes == 0 || distanceCount - distances.counts[0] <= 1 else {
            throw failure("invalid distance code")
        }
        try codes(literals, distances)
    }
}
