import Foundation

/// Random identifiers in Sidekiq's formats.
public enum Identifiers {
    /// A job id: 24 lowercase hex characters (12 random bytes), like `SecureRandom.hex(12)`.
    public static func jid() -> String { hex(byteCount: 12) }

    /// A process identity `HOSTNAME:PID:NONCE` with a 12-hex nonce. The hostname has its colons
    /// removed so that working-list keys parse (`Keys.parseWorking`).
    public static func processIdentity(hostname: String = Identifiers.hostname,
                                       pid: Int32 = ProcessInfo.processInfo.processIdentifier) -> String {
        "\(hostname):\(pid):\(hex(byteCount: 6))"
    }

    /// `$DYNO` if set, else the kernel's host name (`gethostname`, what Sidekiq's `Socket.gethostname`
    /// reports), without colons. Read once: Foundation's `ProcessInfo.hostName` may resolve names through
    /// DNS, which can stall where no resolver answers, and this is read on every heartbeat.
    public static let hostname: String = {
        var buffer = [CChar](repeating: 0, count: 256)
        let system = gethostname(&buffer, buffer.count - 1) == 0
            ? String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self) : ""
        let raw = ProcessInfo.processInfo.environment["DYNO"] ?? system
        let cleaned = raw.replacingOccurrences(of: ":", with: "-")
        return cleaned.isEmpty ? "localhost" : cleaned
    }()

    public static func hex(byteCount: Int) -> String {
        var generator = SystemRandomNumberGenerator()
        let digits: [UInt8] = Array("0123456789abcdef".utf8)
        var out = [UInt8]()
        out.reserveCapacity(byteCount * 2)
        for _ in 0..<byteCount {
            let byte = UInt8.random(in: 0...255, using: &generator)
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// True for 24 lowercase hex characters.
    public static func isValidJID(_ jid: String) -> Bool {
        jid.utf8.count == 24 && jid.utf8.allSatisfy { ($0 >= 48 && $0 <= 57) || ($0 >= 97 && $0 <= 102) }
    }
}

/// Unix time as Sidekiq writes it: float seconds.
public enum Clock {
    public static func now() -> Double { Date().timeIntervalSince1970 }

    /// The UTC day `YYYY-MM-DD` of an epoch time, for the per-day stat keys.
    public static func utcDay(_ epoch: Double) -> String {
        var t = time_t(epoch)
        var parts = tm()
        gmtime_r(&t, &parts)
        return String(format: "%04d-%02d-%02d", Int(parts.tm_year) + 1900, Int(parts.tm_mon) + 1, Int(parts.tm_mday))
    }
}
