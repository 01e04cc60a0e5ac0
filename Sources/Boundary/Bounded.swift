/// The one way a number from outside the process — a payload field, an HTTP header, a URL, a query string, a
/// configuration value — becomes a number the runtime computes with.
///
/// Swift traps on integer overflow and on converting a `Double` that is NaN, infinite or out of range to an
/// integer. A number a producer, a provider or a browser sends must therefore never reach `+`, `*` or `Int(_:)`
/// unchecked: read it here, where it is clamped into the range the runtime is built for (the `clamped…`
/// functions, for values a client may legitimately set: `unique_for`, `at`, `retry`, `Retry-After`) or refused
/// with a reason (`checked…`, which returns a `BoundaryError` the caller turns into a dead job, a 400 answer or a
/// start-up error).
///
/// Invariant: every function here is total — no input traps, and the result is inside the range asked for.
/// Pure functions; any thread.
public enum Bounded {
    /// The largest run-time counter a payload may carry (`retry_count`, `interrupted_count`): far above any
    /// retry limit in use (Sidekiq's default is 25), far below where `count + 2` could overflow.
    public static let maxCount = 1_000_000
    /// The longest duration, in seconds, any client-settable interval may ask for (`unique_for`, a retry delay
    /// computed from a payload): one year (365 days).
    public static let maxIntervalSeconds: Double = 365 * 86_400
    /// The latest epoch time (seconds) the runtime accepts as a time: 9999-12-31T23:59:59Z. Later (or earlier
    /// than the epoch) is not a time a job was created, enqueued or failed at; readers treat it as unknown.
    public static let maxEpochSeconds: Double = 253_402_300_799

    /// `value` as an `Int` clamped into `range`: rounded toward zero, NaN gives `range.lowerBound`, ±∞ and
    /// out-of-range values the nearer bound.
    public static func int(_ value: Double, in range: ClosedRange<Int>) -> Int {
        guard !value.isNaN else { return range.lowerBound }
        if value <= Double(range.lowerBound) { return range.lowerBound }
        // Double(Int.max) rounds up to 2^63, so compare with >= and never convert a value at or above it.
        if value >= Double(range.upperBound) { return range.upperBound }
        return Int(value)
    }

    /// `value` clamped into `range` (an integer from JSON, a header, a config file).
    public static func int<T: BinaryInteger>(_ value: T, in range: ClosedRange<Int>) -> Int {
        Int(clamping: value).clamped(to: range)
    }

    /// A duration in seconds clamped into `0...max` (NaN and negative values give 0).
    public static func seconds(_ value: Double, max: Double) -> Double {
        guard value.isFinite else { return value == .infinity ? max : 0 }
        return Swift.min(Swift.max(value, 0), max)
    }

    /// A `Duration` of `value` seconds clamped into `0...max` seconds (NaN and negative values give zero, +∞ gives
    /// `max`): the one way a number of seconds from outside (a payload, a header, a config file, a CLI flag) becomes
    /// a `Duration`, since `Duration.seconds(_: Double)` traps on NaN, ±∞ and values beyond `Int64.max` (~9.2e18) s.
    /// `max` must be finite (the limits used are at most `maxIntervalSeconds`).
    public static func duration(seconds value: Double, max: Double = maxIntervalSeconds) -> Duration {
        .seconds(self.seconds(value, max: max))
    }

    /// Milliseconds for a duration in seconds, clamped into `0...maxSeconds * 1000`, rounded up (a lock or a hold
    /// never ends before it was asked to).
    public static func milliseconds(_ seconds: Double, maxSeconds: Double) -> Int {
        let clamped = self.seconds(seconds, max: maxSeconds)
        return int((clamped * 1000).rounded(.up), in: 0...Int.max)
    }

    /// An epoch time in seconds, or nil when it is not finite or outside `0...maxEpochSeconds` (unknown).
    public static func epochSeconds(_ value: Double?) -> Double? {
        guard let value, value.isFinite, value >= 0, value <= maxEpochSeconds else { return nil }
        return value
    }

    /// A decimal integer from text (a query string, a header, a URL): nil when it is not one; clamped into
    /// `range` when it is one but too large (any number of digits, never a trap).
    public static func int(parsing text: Substring, in range: ClosedRange<Int>) -> Int? {
        var digits = text.utf8[...]
        var negative = false
        if let first = digits.first, first == UInt8(ascii: "-") || first == UInt8(ascii: "+") {
            negative = first == UInt8(ascii: "-")
            digits = digits.dropFirst()
        }
        guard !digits.isEmpty, digits.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        var magnitude = 0
        for digit in digits {
            let (times10, o1) = magnitude.multipliedReportingOverflow(by: 10)
            let (next, o2) = times10.addingReportingOverflow(Int(digit - 0x30))
            if o1 || o2 { return negative ? range.lowerBound : range.upperBound }
            magnitude = next
        }
        return (negative ? -magnitude : magnitude).clamped(to: range)
    }

    public static func int(parsing text: String, in range: ClosedRange<Int>) -> Int? {
        int(parsing: text[...], in: range)
    }

    /// The largest counter read from Redis that the admin views show and add up (`stat:*`, the per-minute counts, a
    /// process's `busy`): 10^15, so thousands of them still add up below `Int.max`; anyone may have written the key.
    package static let maxCounter = 1_000_000_000_000_000

    /// A counter Redis stores as text: its integer clamped to `0...maxCounter`; 0 when it is not an integer.
    package static func counter(_ text: String?) -> Int {
        text.flatMap { int(parsing: $0, in: 0...maxCounter) } ?? 0
    }

    /// A number Redis stores as text (a limiter's `count`, `tokens`, `at`, a score): nil when the text is not a number
    /// (`Double(_:)` reads "nan", "inf" and "1e300" as numbers: those give nil too when outside `range`), so a reader
    /// can say "invalid" instead of converting it. `range` must be finite.
    package static func number(_ text: String?, in range: ClosedRange<Double>) -> Double? {
        guard let text, text.utf8.count <= 64, let value = Double(text), value.isFinite, range.contains(value) else {
            return nil
        }
        return value
    }

    /// `a + b`, saturating at `Int.min` / `Int.max` instead of trapping: for totals of counters from outside.
    package static func sum(_ a: Int, _ b: Int) -> Int {
        let (total, overflow) = a.addingReportingOverflow(b)
        return overflow ? (b > 0 ? Int.max : Int.min) : total
    }
}

/// A number (or other value) from outside that the runtime refuses, with the field it came in and why.
/// Its description is the reason a dead job, an error answer or a start-up failure shows; it never repeats
/// anything but the offending number (not a secret or personal value).
public struct BoundaryError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Problem: Sendable, Equatable {
        case notAnInteger(String)
        case outOfRange(String, range: ClosedRange<Int>)
        case tooLarge(bytes: Int, limit: Int)
    }

    public let field: String
    public let problem: Problem

    public init(field: String, problem: Problem) {
        self.field = field
        self.problem = problem
    }

    public var description: String {
        switch problem {
        case .notAnInteger(let type): return "\"\(field)\" must be an integer, got \(type)"
        case .outOfRange(let value, let range):
            let shown = value.count > 24 ? String(value.prefix(24)) + "…" : value
            return "\"\(field)\" is \(shown), outside \(range.lowerBound)...\(range.upperBound)"
        case .tooLarge(let bytes, let limit): return "\(field) is \(bytes) bytes, over the limit of \(limit)"
        }
    }
}

extension Comparable {
    @usableFromInline func clamped(to range: ClosedRange<Self>) -> Self {
        min(max(self, range.lowerBound), range.upperBound)
    }
}

extension Duration {
    /// This duration in seconds (`Double`), for the places that compute with epoch seconds (Redis scores).
    public var inSeconds: Double {
        let parts = components
        return Double(parts.seconds) + Double(parts.attoseconds) / 1e18
    }
}
