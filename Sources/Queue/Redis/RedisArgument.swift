import Foundation

/// Something that can be sent as one argument of a Redis command.
public protocol RedisArgument: Sendable {
    func appendRedisBytes(to buffer: inout [UInt8])
    /// Appends the argument as a RESP bulk string (`$<length>\r\n<bytes>\r\n`), the form a command is sent in.
    /// The default goes through `appendRedisBytes`; strings and byte arrays write theirs without a copy in between.
    func appendRESPBulk(to buffer: inout [UInt8])
}

extension RedisArgument {
    public func appendRESPBulk(to buffer: inout [UInt8]) {
        var bytes: [UInt8] = []
        appendRedisBytes(to: &bytes)
        RESP.appendBulk(bytes, to: &buffer)
    }
}

extension String: RedisArgument {
    public func appendRedisBytes(to buffer: inout [UInt8]) { buffer.append(contentsOf: utf8) }
    public func appendRESPBulk(to buffer: inout [UInt8]) { RESP.appendBulk(utf8, to: &buffer) }
}

extension Substring: RedisArgument {
    public func appendRedisBytes(to buffer: inout [UInt8]) { buffer.append(contentsOf: utf8) }
    public func appendRESPBulk(to buffer: inout [UInt8]) { RESP.appendBulk(utf8, to: &buffer) }
}

extension Array: RedisArgument where Element == UInt8 {
    public func appendRedisBytes(to buffer: inout [UInt8]) { buffer.append(contentsOf: self) }
    public func appendRESPBulk(to buffer: inout [UInt8]) { RESP.appendBulk(self, to: &buffer) }
}

/// The request side of the Redis protocol (RESP2): a command is an array of bulk strings. Written here rather than
/// by hiredis' `redisAppendCommandArgv`, whose printf-style formatting (`sdscatfmt`) and argv arrays cost the
/// settler a few percent of a fast drain's CPU (`perf`); hiredis then only queues the bytes
/// (`redisAppendFormattedCommand`).
enum RESP {
    /// `*<count>\r\n` then each argument as a bulk string.
    static func appendCommand(_ arguments: [any RedisArgument], to buffer: inout [UInt8]) {
        buffer.append(UInt8(ascii: "*"))
        appendDecimal(arguments.count, to: &buffer)
        buffer.append(0x0D); buffer.append(0x0A)
        for argument in arguments { argument.appendRESPBulk(to: &buffer) }
    }

    static func appendBulk<Bytes: Collection>(_ bytes: Bytes, to buffer: inout [UInt8]) where Bytes.Element == UInt8 {
        buffer.append(UInt8(ascii: "$"))
        appendDecimal(bytes.count, to: &buffer)
        buffer.append(0x0D); buffer.append(0x0A)
        buffer.append(contentsOf: bytes)
        buffer.append(0x0D); buffer.append(0x0A)
    }

    /// An integer as a bulk string (`$2\r\n42\r\n`), without allocating.
    static func appendIntegerBulk(_ value: Int64, to buffer: inout [UInt8]) {
        guard value >= 0 else {  // rare: negative scores and offsets
            appendBulk(String(value).utf8, to: &buffer)
            return
        }
        var digits = 1
        var rest = value / 10
        while rest > 0 { digits += 1; rest /= 10 }
        buffer.append(UInt8(ascii: "$"))
        appendDecimal(digits, to: &buffer)
        buffer.append(0x0D); buffer.append(0x0A)
        appendDecimal(Int(value), to: &buffer)
        buffer.append(0x0D); buffer.append(0x0A)
    }

    /// A non-negative integer in decimal, without allocating.
    static func appendDecimal(_ value: Int, to buffer: inout [UInt8]) {
        if value < 10 { buffer.append(UInt8(ascii: "0") + UInt8(value)); return }
        var digits: (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8,
                     UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8) =
            (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        var count = 0
        var rest = value
        withUnsafeMutableBytes(of: &digits) { raw in
            while rest > 0 {
                raw[count] = UInt8(ascii: "0") + UInt8(rest % 10)
                rest /= 10
                count += 1
            }
            for index in stride(from: count - 1, through: 0, by: -1) { buffer.append(raw[index]) }
        }
    }
}

extension Int: RedisArgument {
    public func appendRedisBytes(to buffer: inout [UInt8]) { buffer.append(contentsOf: String(self).utf8) }
    /// Without a `String` in between (every settled job sends two small integers).
    public func appendRESPBulk(to buffer: inout [UInt8]) { RESP.appendIntegerBulk(Int64(self), to: &buffer) }
}

extension Int64: RedisArgument {
    public func appendRedisBytes(to buffer: inout [UInt8]) { buffer.append(contentsOf: String(self).utf8) }
    public func appendRESPBulk(to buffer: inout [UInt8]) { RESP.appendIntegerBulk(self, to: &buffer) }
}

extension Double: RedisArgument {
    /// Scores and timestamps are written the way Ruby's `Float#to_s` writes them.
    public func appendRedisBytes(to buffer: inout [UInt8]) {
        buffer.append(contentsOf: JSONValue.rubyFloat(self).utf8)
    }
}
