import WorkersCivilDate
import Foundation
import WorkersQueue

/// What to do about ticks that passed while no scheduler was running (deploy, outage).
///
/// * `skip`: never catch up. Only a tick at most `CatchUpPlanner.grace` old fires (sidekiq-cron's rule).
/// * `latest`: fire the most recent missed tick once (if it is within `window`, when one is set).
/// * `all`: fire every missed tick within `window` (default 24 h), oldest first.
public struct CatchUpPolicy: Sendable, Equatable, CustomStringConvertible {
    public enum Mode: String, Sendable, CaseIterable {
        case skip, latest, all
    }

    public let mode: Mode
    /// How old (relative to now) a missed tick may be and still fire; nil = no limit.
    /// Invariant: nil for `skip`; non-nil for `all`; positive when set.
    public let window: TimeInterval?

    public static let defaultAllWindow: TimeInterval = 24 * 3600

    public static let skip = CatchUpPolicy(uncheckedMode: .skip, window: nil)
    public static let latest = CatchUpPolicy(uncheckedMode: .latest, window: nil)
    public static func latest(within window: TimeInterval) -> CatchUpPolicy { .init(uncheckedMode: .latest, window: window) }
    public static func all(within window: TimeInterval = defaultAllWindow) -> CatchUpPolicy {
        .init(uncheckedMode: .all, window: window)
    }

    private init(uncheckedMode mode: Mode, window: TimeInterval?) {
        precondition(window.map { $0 > 0 } ?? true, "catch-up window must be positive")
        self.mode = mode
        self.window = window
    }

    /// Builds a policy from the YAML keys, applying defaults; throws a reason on a bad combination.
    public init(mode: Mode, window: TimeInterval?) throws(ScheduleProblem.Reason) {
        if let window, window <= 0 { throw .init("catch_up_window must be positive") }
        switch mode {
        case .skip:
            if window != nil { throw .init("catch_up_window has no effect with catch_up: skip") }
            self = .skip
        case .latest: self = .init(uncheckedMode: .latest, window: window)
        case .all: self = .all(within: window ?? Self.defaultAllWindow)
        }
    }

    public var description: String {
        guard let window else { return mode.rawValue }
        return "\(mode.rawValue) within \(DurationText.format(window))"
    }
}

/// Which value of the tick the runner adds to the job's arguments, so that a job fired late
/// (caught up) works on the period of *its* tick rather than on "now".
///
/// YAML key `pass_tick`:
/// * `none` (default): the arguments are `args` as written;
/// * `date`: appends `{"date": "YYYY-MM-DD"}`, the tick's local date in the entry's time zone;
/// * `date_minus_N` (e.g. `date_minus_1`): the same, N days before the tick's local date —
///   a nightly job at 00:15 that aggregates "yesterday" uses `date_minus_1`;
/// * `time`: appends `{"time": "2026-03-29T01:00:00Z"}`, the tick as ISO-8601 UTC.
///
/// The object is added as one extra **last** argument (like sidekiq-cron's `date_as_argument`).
public enum TickArgument: Sendable, Equatable, CustomStringConvertible {
    case none
    case date(daysBefore: Int)
    case time

    public init?(yaml text: String) {
        switch text {
        case "none": self = .none
        case "date": self = .date(daysBefore: 0)
        case "time": self = .time
        default:
            let prefix = "date_minus_"
            guard text.hasPrefix(prefix), let n = Int(text.dropFirst(prefix.count)), n >= 0,
                  text.dropFirst(prefix.count).allSatisfy(\.isASCII) else { return nil }
            self = .date(daysBefore: n)
        }
    }

    public var description: String {
        switch self {
        case .none: return "none"
        case .date(0): return "date"
        case .date(let n): return "date_minus_\(n)"
        case .time: return "time"
        }
    }

    /// The extra argument for `tick`, or nil for `.none`.
    public func value(forTick tick: Date, in zone: TimeZone) -> JSONValue? {
        let instant = Int(tick.timeIntervalSince1970.rounded(.down))
        switch self {
        case .none:
            return nil
        case .date(let daysBefore):
            let wall = WallTime(wallSeconds: instant + utcOffset(of: zone, at: instant))
            let date = CivilDate.date(fromDays: wall.dayNumber - daysBefore)
            let text = WallTime(year: date.year, month: date.month, day: date.day).description.prefix(10)
            return .object(["date": .string(String(text))])
        case .time:
            return .object(["time": .string(TickFormat.iso8601UTC(tick))])
        }
    }
}

/// Text forms of a tick.
public enum TickFormat {
    /// `2026-11-22T07:00:00Z` (whole seconds, UTC): sidekiq-cron's member in `cron_job:NAME:enqueued`.
    public static func iso8601UTC(_ tick: Date) -> String {
        let wall = WallTime(wallSeconds: Int(tick.timeIntervalSince1970.rounded(.down))).description
        return wall.replacingOccurrences(of: " ", with: "T") + "Z"
    }
}

/// One periodic job of `config/schedule.yaml`.
///
/// Invariants (checked by `init`): `name` is non-empty and made of `[A-Za-z0-9_.-]`; `className`
/// is a Ruby-style constant path (`AdRevenueAggregationJob`, `Billing::Sweep`); `queue` is non-empty
/// without whitespace.
public struct ScheduleEntry: Sendable, Equatable {
    public let name: String
    public let cron: CronExpression
    public let className: String
    public let queue: String
    public let args: [JSONValue]
    public let timeZone: TimeZone
    public let enabled: Bool
    public let catchUp: CatchUpPolicy
    public let tickArgument: TickArgument
    public let description: String?

    public init(name: String, cron: CronExpression, className: String, queue: String = "default",
                args: [JSONValue] = [], timeZone: TimeZone = TimeZone(identifier: "UTC")!, enabled: Bool = true,
                catchUp: CatchUpPolicy = .skip, tickArgument: TickArgument = .none,
                description: String? = nil) throws(ScheduleProblem) {
        func problem(_ field: String, _ reason: String) -> ScheduleProblem {
            ScheduleProblem(entry: name.isEmpty ? "(unnamed)" : name, field: field, reason: reason)
        }
        guard Self.isValidName(name) else {
            throw problem("name", "'\(name)' must be non-empty and use only letters, digits, '_', '.' and '-'")
        }
        guard Self.isValidClassName(className) else {
            throw problem("class", "'\(className)' is not a class name (like AdRevenueAggregationJob or Billing::Sweep)")
        }
        guard !queue.isEmpty, !queue.contains(where: \.isWhitespace) else {
            throw problem("queue", "'\(queue)' must be non-empty without spaces")
        }
        // The rest of what the job client refuses (glob characters), so that a fire never fails on it.
        do { try JobClient.validateQueue(queue) } catch { throw problem("queue", error.description) }
        self.name = name
        self.cron = cron
        self.className = className
        self.queue = queue
        self.args = args
        self.timeZone = timeZone
        self.enabled = enabled
        self.catchUp = catchUp
        self.tickArgument = tickArgument
        self.description = description
    }

    /// The same entry with `enabled` replaced (the runner applies the status an operator set in Redis).
    public func withEnabled(_ enabled: Bool) -> ScheduleEntry {
        guard enabled != self.enabled else { return self }
        // Every other field already passed `init`'s checks, which do not look at `enabled`.
        return try! ScheduleEntry(name: name, cron: cron, className: className, queue: queue, args: args,
                                  timeZone: timeZone, enabled: enabled, catchUp: catchUp,
                                  tickArgument: tickArgument, description: description)
    }

    static func isValidName(_ name: String) -> Bool {
        !name.isEmpty && name.unicodeScalars.allSatisfy { $0.isASCII && (CharacterSet.alphanumerics.contains($0) || "_.-".unicodeScalars.contains($0)) }
    }

    static func isValidClassName(_ name: String) -> Bool {
        let parts = name.components(separatedBy: "::")
        return parts.allSatisfy { part in
            guard let first = part.unicodeScalars.first, first.isASCII, CharacterSet.uppercaseLetters.contains(first) else { return false }
            return part.unicodeScalars.allSatisfy { $0.isASCII && (CharacterSet.alphanumerics.contains($0) || $0 == "_") }
        }
    }

    /// The job arguments for one tick: `args`, plus the tick argument (see `TickArgument`) as the last one.
    public func arguments(forTick tick: Date) -> [JSONValue] {
        guard let extra = tickArgument.value(forTick: tick, in: timeZone) else { return args }
        return args + [extra]
    }

    /// The first tick strictly after `date` in the entry's time zone.
    public func nextTick(after date: Date) -> Date? { cron.next(after: date, in: timeZone) }

    /// The last tick at or before `date` in the entry's time zone.
    public func previousTick(atOrBefore date: Date) -> Date? { cron.previous(atOrBefore: date, in: timeZone) }
}

/// Durations as written in the schedule file: one or more `<integer><unit>` with units
/// `s`, `m`, `h`, `d`, `w` — `90m`, `6h`, `7d`, `1h30m`.
public enum DurationText {
    public static func parse(_ text: String) -> TimeInterval? {
        var total = 0
        var number = ""
        var sawUnit = false
        for character in text {
            if character.isASCII, character.isNumber {
                number.append(character)
                continue
            }
            let unit: Int
            switch character {
            case "s": unit = 1
            case "m": unit = 60
            case "h": unit = 3600
            case "d": unit = 86_400
            case "w": unit = 7 * 86_400
            default: return nil
            }
            guard let n = Int(number), n <= 1_000_000 else { return nil }
            total += n * unit
            number = ""
            sawUnit = true
        }
        guard sawUnit, number.isEmpty else { return nil }
        return TimeInterval(total)
    }

    /// The shortest spelling in the largest units: 86400 → `1d`, 5400 → `1h30m`.
    public static func format(_ interval: TimeInterval) -> String {
        var rest = Int(interval)
        var text = ""
        for (unit, size) in [("d", 86_400), ("h", 3600), ("m", 60), ("s", 1)] where rest >= size {
            text += "\(rest / size)\(unit)"
            rest %= size
        }
        return text.isEmpty ? "0s" : text
    }
}
