import Foundation
import WorkersBoundary

/// A parsed `Retry-After` header (RFC 9110 §10.2.3): either delay-seconds or an HTTP-date.
///
/// The header comes from a provider or a proxy, so it is read as any outside number is (`Bounded`): delay-seconds
/// of any length are clamped to `maxSeconds` (one day) when parsed, and `delay(from:)` never exceeds it either,
/// whatever date was sent (review M9: 20 digits trapped a worker; 31536000000 held the fleet's geocoding for
/// 1,000 years). Callers that hold a fleet-wide limit clamp further (`CallLimiter.maxHold`).
public enum RetryAfter: Sendable, Equatable {
    case seconds(Int)
    case date(Date)

    /// The longest wait a `Retry-After` can ask of us: one day.
    public static let maxSeconds = 86_400

    /// Parses `value`; nil when it is neither a non-negative integer nor an HTTP-date
    /// (IMF-fixdate, obsolete RFC 850 or asctime form).
    public init?(headerValue value: String) {
        let v = value.trimmingCharacters(in: .whitespaces)
        if !v.isEmpty, v.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
           let seconds = Bounded.int(parsing: v, in: 0...Self.maxSeconds) {
            self = .seconds(seconds)
        } else if let d = HTTPDate.parse(v) {
            self = .date(d)
        } else {
            return nil
        }
    }

    /// Seconds to wait from `now`, in `0...maxSeconds`.
    public func delay(from now: Date = Date()) -> TimeInterval {
        switch self {
        case .seconds(let s): return Bounded.seconds(TimeInterval(s), max: TimeInterval(Self.maxSeconds))
        case .date(let d): return Bounded.seconds(d.timeIntervalSince(now), max: TimeInterval(Self.maxSeconds))
        }
    }
}

/// HTTP-date parsing (RFC 9110 §5.6.7) without `DateFormatter` (locale- and thread-neutral).
enum HTTPDate {
    private static let months = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]

    /// "Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994".
    static func parse(_ s: String) -> Date? {
        let tokens = s.split(whereSeparator: { $0 == " " || $0 == "," }).map(String.init)
        guard tokens.count >= 4 else { return nil }
        var day: Int?, month: Int?, year: Int?, time: String?
        if tokens.count >= 5, tokens[1].contains("-") == false, let d = Int(tokens[1]) {
            // IMF-fixdate: wkday DD Mon YYYY HH:MM:SS GMT
            day = d; month = monthIndex(tokens[2]); year = Int(tokens[3]); time = tokens[4]
        } else if tokens[1].contains("-") {
            // RFC 850: weekday DD-Mon-YY HH:MM:SS GMT
            let p = tokens[1].split(separator: "-").map(String.init)
            guard p.count == 3 else { return nil }
            day = Int(p[0]); month = monthIndex(p[1])
            if let y = Int(p[2]) { year = y < 100 ? (y < 70 ? 2000 + y : 1900 + y) : y }
            time = tokens[2]
        } else if tokens.count >= 5 {
            // asctime: wkday Mon D HH:MM:SS YYYY
            month = monthIndex(tokens[1]); day = Int(tokens[2]); time = tokens[3]; year = Int(tokens[4])
        }
        guard let day, let month, let year, let time else { return nil }
        let hms = time.split(separator: ":").compactMap { Int($0) }
        guard hms.count == 3, (1...31).contains(day), (0...23).contains(hms[0]), (0...59).contains(hms[1]),
              (0...60).contains(hms[2]) else { return nil }
        var comps = DateComponents()
        comps.year = year; comps.month = month; comps.day = day
        comps.hour = hms[0]; comps.minute = hms[1]; comps.second = hms[2]
        var cal = Calendar(identifier: .gregorian)
        cal.timeZone = TimeZone(identifier: "GMT")!
        return cal.date(from: comps)
    }

    private static func monthIndex(_ s: String) -> Int? {
        months.firstIndex(of: String(s.lowercased().prefix(3))).map { $0 + 1 }
    }
}
