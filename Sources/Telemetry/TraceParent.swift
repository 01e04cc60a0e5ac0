import Foundation

/// A W3C Trace Context `traceparent` (and its `tracestate`): https://www.w3.org/TR/trace-context/ §3.2, §3.3.
///
/// Only version `00` is written; a higher version is read by its first four fields, as §3.2.4 asks. An
/// all-zero trace id or parent id is invalid (§3.2.2.3, §3.2.2.4) and parses to nil.
public struct TraceParent: Sendable, Hashable {
    /// 32 lowercase hex characters.
    public let traceID: String
    /// 16 lowercase hex characters: the span this context points at.
    public let spanID: String
    /// The `sampled` trace flag (bit 0 of trace-flags).
    public let sampled: Bool
    /// The `tracestate` header as received, carried on unchanged (nil when absent or empty).
    public let traceState: String?

    public init(traceID: String, spanID: String, sampled: Bool, traceState: String? = nil) {
        self.traceID = traceID
        self.spanID = spanID
        self.sampled = sampled
        self.traceState = traceState
    }

    /// Parses `traceparent`; nil when it is not a valid header (then a new trace starts, §3.2.2).
    public init?(header: String, traceState: String? = nil) {
        let parts = header.split(separator: "-", omittingEmptySubsequences: false)
        guard parts.count >= 4, parts[0].count == 2, parts[1].count == 32, parts[2].count == 16, parts[3].count == 2,
              parts.prefix(4).allSatisfy({ $0.allSatisfy(Self.isLowerHex) }), parts[0] != "ff",
              parts[0] != "00" || parts.count == 4,
              parts[1].contains(where: { $0 != "0" }), parts[2].contains(where: { $0 != "0" }),
              let flags = UInt8(parts[3], radix: 16) else { return nil }
        self.traceID = String(parts[1])
        self.spanID = String(parts[2])
        self.sampled = flags & 1 == 1
        let state = traceState?.trimmingCharacters(in: .whitespaces)
        self.traceState = (state?.isEmpty ?? true) ? nil : state
    }

    /// The `traceparent` header value, version 00.
    public var header: String { "00-\(traceID)-\(spanID)-\(sampled ? "01" : "00")" }

    private static func isLowerHex(_ c: Character) -> Bool { ("0"..."9").contains(c) || ("a"..."f").contains(c) }

    /// Random ids (§3.2.2.3: random, not all zero).
    static func randomTraceID() -> String { randomHex(bytes: 16) }
    static func randomSpanID() -> String { randomHex(bytes: 8) }

    private static func randomHex(bytes: Int) -> String {
        var generator = SystemRandomNumberGenerator()
        while true {
            var text = ""
            text.reserveCapacity(bytes * 2)
            var nonZero = false
            for _ in 0..<bytes {
                let byte = UInt8.random(in: 0...255, using: &generator)
                if byte != 0 { nonZero = true }
                text += byte < 16 ? "0" + String(byte, radix: 16) : String(byte, radix: 16)
            }
            if nonZero { return text }
        }
    }
}
