/// SHA-1 and SHA-256 (FIPS 180-4) of bytes in memory, written here so that Queue and Storage need no crypto
/// library (issue 53, point 6: swift-crypto's BoringSSL was a third of a producer's first build for these two).
///
/// What they name, and why neither is a secret: SHA-1 is how Redis names a Lua script (`EVALSHA`, `RedisScript`);
/// SHA-256 names a unique job's lock (`UniqueLockKey`, where it must give the digests swift-crypto gave, byte for
/// byte: locks held across an upgrade), a shard map (`ShardMap.digest`) and a migration file's checksum (recorded in
/// the migration table, compared on every migrate). Nothing here is for authentication or key material: HMAC,
/// signatures and encryption stay with swift-crypto in the modules that need them (SubjectKeys, Jobs).
///
/// Checked against the published vectors (FIPS 180-4 examples, RFC 3174) in QueueTests/ContentHashTests.
/// Invariant: total (no input traps; lengths are taken modulo 2^64 bits as the standard says). Pure functions; any
/// thread.
package enum ContentHash {
    /// The 32-byte SHA-256 digest of `bytes`.
    package static func sha256(_ bytes: [UInt8]) -> [UInt8] {
        var state = SHA256State()
        withUnsafeTemporaryAllocation(of: UInt32.self, capacity: 64) { schedule in
            eachBlock(of: bytes) { state.compress($0, schedule: schedule) }
        }
        return bigEndian(state.words)
    }

    /// The 20-byte SHA-1 digest of `bytes`.
    package static func sha1(_ bytes: [UInt8]) -> [UInt8] {
        var state = SHA1State()
        withUnsafeTemporaryAllocation(of: UInt32.self, capacity: 80) { schedule in
            eachBlock(of: bytes) { state.compress($0, schedule: schedule) }
        }
        return bigEndian(state.words)
    }

    /// The SHA-256 of `text`'s UTF-8 bytes, as 64 lower-case hex digits.
    package static func sha256Hex(_ text: String) -> String { hex(sha256(Array(text.utf8))) }

    /// The SHA-1 of `text`'s UTF-8 bytes, as 40 lower-case hex digits.
    package static func sha1Hex(_ text: String) -> String { hex(sha1(Array(text.utf8))) }

    /// `bytes` as lower-case hex digits, two per byte.
    package static func hex(_ bytes: some Sequence<UInt8>) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.underestimatedCount * 2)
        for byte in bytes {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Calls `body` with each 64-byte block of `bytes` after the standard padding (a 1 bit, zeros, the length in bits
    /// as a big-endian 64-bit number): the whole blocks in place, then one or two built from the tail.
    private static func eachBlock(of bytes: [UInt8], _ body: (UnsafePointer<UInt8>) -> Void) {
        let whole = bytes.count / 64
        bytes.withUnsafeBufferPointer { buffer in
            guard whole > 0, let base = buffer.baseAddress else { return }
            for index in 0..<whole { body(base + index * 64) }
        }
        let rest = bytes.count - whole * 64
        var tail = [UInt8](repeating: 0, count: rest < 56 ? 64 : 128)
        tail.replaceSubrange(0..<rest, with: bytes[(whole * 64)...])
        tail[rest] = 0x80
        let bits = UInt64(truncatingIfNeeded: bytes.count) &* 8
        for index in 0..<8 { tail[tail.count - 1 - index] = UInt8(truncatingIfNeeded: bits >> (8 * UInt64(index))) }
        tail.withUnsafeBufferPointer { buffer in
            guard let base = buffer.baseAddress else { return }
            for index in 0..<(tail.count / 64) { body(base + index * 64) }
        }
    }

    private static func bigEndian(_ words: [UInt32]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(words.count * 4)
        for word in words {
            out.append(UInt8(truncatingIfNeeded: word >> 24))
            out.append(UInt8(truncatingIfNeeded: word >> 16))
            out.append(UInt8(truncatingIfNeeded: word >> 8))
            out.append(UInt8(truncatingIfNeeded: word))
        }
        return out
    }

    /// The big-endian word at `block[4 * index]`.
    @inline(__always)
    fileprivate static func word(_ block: UnsafePointer<UInt8>, _ index: Int) -> UInt32 {
        UInt32(block[4 * index]) << 24 | UInt32(block[4 * index + 1]) << 16
            | UInt32(block[4 * index + 2]) << 8 | UInt32(block[4 * index + 3])
    }
}

@inline(__always)
private func rotateRight(_ value: UInt32, _ count: UInt32) -> UInt32 { value >> count | value << (32 - count) }

@inline(__always)
private func rotateLeft(_ value: UInt32, _ count: UInt32) -> UInt32 { value << count | value >> (32 - count) }

/// SHA-256's running hash value (FIPS 180-4, 6.2).
private struct SHA256State {
    var words: [UInt32] = [0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19]

    static let constants: [UInt32] = [
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
        0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
        0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
        0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
        0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
        0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
        0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
    ]

    /// Folds one 64-byte block into `words`; `schedule` is scratch space for 64 words.
    mutating func compress(_ block: UnsafePointer<UInt8>, schedule w: UnsafeMutableBufferPointer<UInt32>) {
        for t in 0..<16 { w[t] = ContentHash.word(block, t) }
        for t in 16..<64 {
            let s0 = rotateRight(w[t - 15], 7) ^ rotateRight(w[t - 15], 18) ^ (w[t - 15] >> 3)
            let s1 = rotateRight(w[t - 2], 17) ^ rotateRight(w[t - 2], 19) ^ (w[t - 2] >> 10)
            w[t] = w[t - 16] &+ s0 &+ w[t - 7] &+ s1
        }
        var a = words[0], b = words[1], c = words[2], d = words[3]
        var e = words[4], f = words[5], g = words[6], h = words[7]
        Self.constants.withUnsafeBufferPointer { k in
            for t in 0..<64 {
                let sum1 = rotateRight(e, 6) ^ rotateRight(e, 11) ^ rotateRight(e, 25)
                let choice = (e & f) ^ (~e & g)
                let temp1 = h &+ sum1 &+ choice &+ k[t] &+ w[t]
                let sum0 = rotateRight(a, 2) ^ rotateRight(a, 13) ^ rotateRight(a, 22)
                let majority = (a & b) ^ (a & c) ^ (b & c)
                h = g; g = f; f = e; e = d &+ temp1
                d = c; c = b; b = a; a = temp1 &+ sum0 &+ majority
            }
        }
        words[0] &+= a; words[1] &+= b; words[2] &+= c; words[3] &+= d
        words[4] &+= e; words[5] &+= f; words[6] &+= g; words[7] &+= h
    }
}

/// SHA-1's running hash value (FIPS 180-4, 6.1; RFC 3174).
private struct SHA1State {
    var words: [UInt32] = [0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476, 0xc3d2e1f0]

    /// Folds one 64-byte block into `words`; `schedule` is scratch space for 80 words.
    mutating func compress(_ block: UnsafePointer<UInt8>, schedule w: UnsafeMutableBufferPointer<UInt32>) {
        for t in 0..<16 { w[t] = ContentHash.word(block, t) }
        for t in 16..<80 { w[t] = rotateLeft(w[t - 3] ^ w[t - 8] ^ w[t - 14] ^ w[t - 16], 1) }
        var a = words[0], b = words[1], c = words[2], d = words[3], e = words[4]
        for t in 0..<80 {
            let mixed: UInt32, constant: UInt32
            switch t {
            case 0..<20: mixed = (b & c) | (~b & d); constant = 0x5a827999
            case 20..<40: mixed = b ^ c ^ d; constant = 0x6ed9eba1
            case 40..<60: mixed = (b & c) | (b & d) | (c & d); constant = 0x8f1bbcdc
            default: mixed = b ^ c ^ d; constant = 0xca62c1d6
            }
            let temp = rotateLeft(a, 5) &+ mixed &+ e &+ constant &+ w[t]
            e = d; d = c; c = rotateLeft(b, 30); b = a; a = temp
        }
        words[0] &+= a; words[1] &+= b; words[2] &+= c; words[3] &+= d; words[4] &+= e
    }
}
