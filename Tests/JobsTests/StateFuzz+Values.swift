import Foundation
import WorkersQueue

/// SplitMix64 (Steele, Lea, Flood 2014): a seeded generator of our own, so that one printed seed replays a state
/// fuzzer iteration exactly (`STATE_FUZZ_SEED`). Not for secrets.
struct SplitMix64: RandomNumberGenerator {
    private var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    /// `true` with probability `p`.
    mutating func chance(_ p: Double) -> Bool { Double(next() >> 11) / Double(1 << 53) < p }
    mutating func pick<T>(_ values: [T]) -> T { values[Int(next() % UInt64(values.count))] }
    mutating func below(_ bound: Int) -> Int { Int(next() % UInt64(max(1, bound))) }
    mutating func hex(_ count: Int) -> String {
        let digits = Array("0123456789abcdef")
        return String((0..<count).map { _ in digits[below(16)] })
    }
}

/// One key's content, of one Redis type, as the state fuzzer writes it.
enum FuzzContent {
    case string([UInt8])
    case hash([([UInt8], [UInt8])])
    case list([[UInt8]])
    case set([[UInt8]])
    /// Scores as Redis reads them (`inf`, `-1e300`, …; never `nan`, which ZADD refuses).
    case zset([(String, [UInt8])])

    var type: KeyPattern.RedisType {
        switch self {
        case .string: .string
        case .hash: .hash
        case .list: .list
        case .set: .set
        case .zset: .zset
        }
    }

    /// The commands that write it at `key` (after a `DEL`), in chunks Redis takes in one go.
    func commands(_ key: String) -> [[any RedisArgument]] {
        var out: [[any RedisArgument]] = [["DEL", key]]
        func chunks<T>(_ items: [T], _ body: ([T]) -> [any RedisArgument]) {
            var index = 0
            while index < items.count {
                out.append(body(Array(items[index..<min(items.count, index + 1000)])))
                index += 1000
            }
        }
        switch self {
        case .string(let value): out.append(["SET", key, value])
        case .hash(let pairs): chunks(pairs) { [String("HSET"), key] + $0.flatMap { [$0.0, $0.1] as [any RedisArgument] } }
        case .list(let items): chunks(items) { [String("RPUSH"), key] + $0.map { $0 as any RedisArgument } }
        case .set(let items): chunks(items) { [String("SADD"), key] + $0.map { $0 as any RedisArgument } }
        case .zset(let items): chunks(items) { [String("ZADD"), key] + $0.flatMap { [$0.0, $0.1] as [any RedisArgument] } }
        }
        return out
    }
}

/// The hostile values the state fuzzer draws from: numbers at every extreme and as text no writer produces, huge
/// strings, control, C1 and bidi characters, invalid UTF-8, JSON of the wrong shape and deeply nested, and job
/// payloads that look valid but carry such values in their fields.
enum HostileValues {
    static let hugeDigits = Array(String(repeating: "9", count: 100_000).utf8)
    static let hugeText = Array(String(repeating: "\u{202E}a\u{1B}[1m", count: 12_000).utf8)
    static let deepArray = Array((String(repeating: "[", count: 20_000) + String(repeating: "]", count: 20_000)).utf8)
    static let deepObject = Array((String(repeating: #"{"a":"#, count: 10_000) + "1" + String(repeating: "}", count: 10_000)).utf8)

    /// Scalars as text: what a reader parses as a number, a time, a name or JSON.
    static let scalars: [String] = [
        "1e300", "-1e300", "nan", "-nan", "NaN", "inf", "-inf", "Infinity", "1e400", "-1", "-2", "-5", "0", "-0",
        "9223372036854775807", "-9223372036854775808", "9223372036854775808", "18446744073709551616", "4e17",
        "1.5", "0x10", " 7", "", "true", "null", "[]", "{}", "\"s\"", "[1,2", "{\"class\":1}", "{\"class\":\"X\"}",
        "\u{1B}]0;pwned\u{7}\u{1B}[2J\u{0}\r", "\u{85}\u{9B}31m\u{9C}", "\u{202E}gnp.exe\u{202C}\u{2066}\u{2069}\u{200F}",
        "2026-12-07T00:00:00Z", "1765000000", "1765000000000", "window 10 60000", "bucket 0 0", "concurrent -1 -1",
        "window 9223372036854775807 1", "a b c", "\u{FEFF}", "\u{D7FF}\u{E000}", "😀\u{200D}😀",
    ]

    /// JSON values (as text) for a payload's fields.
    static let jsonValues: [String] = [
        "1e300", "-1e300", "1e400", "-1e400", "-0", "9223372036854775807", "9223372036854775808", "-9223372036854775809",
        "18446744073709551616", "null", "true", "false", "[]", "{}", "\"\"", #""\u001b[31mred\u0007\u0000""#,
        #""\u202egnp\u2066""#, #""\ud800""#, #""\u0085\u009b""#, "-1", "-2", "0", "1.5", "1e-320", "1765000000",
        "1765000000000", "4e17", #""nan""#, #""inf""#, #"{"a":1}"#, #"[1,"x",null]"#, #""2026-12-07T00:00:00Z""#,
    ]

    static let payloadFields = [
        "retry", "retry_count", "interrupted_count", "overrated", "created_at", "enqueued_at", "failed_at",
        "retried_at", "retry_for", "retry_queue", "dead", "error_message", "error_class", "error_backtrace",
        "display_class", "wrapped", "bid", "unique_for", "unique_until", "at", "tags", "args_version", "trace_context",
        "encrypt", "backtrace", "processed_at",
    ]

    /// Invalid UTF-8: a lone continuation byte, an overlong NUL, a truncated sequence, bytes never valid.
    static let invalidUTF8: [[UInt8]] = [[0xFF, 0xFE], [0xC0, 0x80], [0x61, 0xE2, 0x82], [0x80], [0xED, 0xA0, 0x80]]

    static func scalar(_ r: inout SplitMix64) -> [UInt8] {
        switch r.below(20) {
        case 0: return hugeDigits
        case 1: return hugeText
        case 2: return r.chance(0.5) ? deepArray : deepObject
        case 3: return r.pick(invalidUTF8) + Array("x".utf8) + r.pick(invalidUTF8)
        case 4: return (0..<r.below(64)).map { _ in UInt8(truncatingIfNeeded: r.next()) }
        default: return Array(r.pick(scalars).utf8)
        }
    }

    /// A score for a sorted set: extremes, and times around now.
    static func score(_ r: inout SplitMix64, now: Double) -> String {
        r.pick(["inf", "-inf", "+inf", "1e300", "-1e300", "-1", "0", "4e17", "9.3e18", "1e-300",
                "\(Int(now))", "\(Int(now) + 3600)", "\(Int(now) - 86_400 * 400)", "\(now)", "\(Int(now) * 1000)"])
    }

    /// A job payload: mostly valid-looking (class, args, jid, queue, and `bid` when given, from the state) with
    /// hostile values in a few fields; now and then broken JSON or no object at all.
    static func job(_ r: inout SplitMix64, jid: String, queue: String, className: String, bid: String? = nil) -> [UInt8] {
        if r.chance(0.08) { return scalar(&r) }
        var fields: [String] = []
        func quoted(_ text: String) -> String { JSONValue.string(text).serialized() }
        fields.append(#""class":"# + (r.chance(0.85) ? quoted(className) : r.pick(jsonValues)))
        if let bid { fields.append(#""bid":"# + quoted(bid)) }
        fields.append(#""args":"# + (r.chance(0.7) ? r.pick(["[]", #"[{"steps":1,"step_ms":1}]"#, #"[1,"two"]"#, "[1]", #"[1,"user-1"]"#])
                                    : r.chance(0.5) ? r.pick(jsonValues) : String(decoding: deepArray, as: UTF8.self)))
        fields.append(#""jid":"# + (r.chance(0.9) ? quoted(jid) : r.pick(jsonValues)))
        fields.append(#""queue":"# + (r.chance(0.9) ? quoted(queue) : r.pick(jsonValues)))
        for _ in 0..<r.below(8) {
            let name = r.pick(payloadFields)
            let value = r.chance(0.1) ? quoted(String(decoding: hugeText, as: UTF8.self)) : r.pick(jsonValues)
            fields.append(quoted(name) + ":" + value)
        }
        let text = "{" + fields.joined(separator: ",") + "}"
        if r.chance(0.05) { return Array(text.utf8.prefix(r.below(text.utf8.count))) }
        return Array(text.utf8)
    }
}
