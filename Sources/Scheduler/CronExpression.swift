import WorkersCivilDate
import Foundation

/// One field of a cron expression, in the order it is written.
public enum CronField: String, Sendable, CaseIterable, CustomStringConvertible {
    case second
    case minute
    case hour
    case dayOfMonth = "day-of-month"
    case month
    case dayOfWeek = "day-of-week"

    public var description: String { rawValue }

    /// The values the field accepts. Day-of-week accepts 7 as a second spelling of Sunday (0).
    public var range: ClosedRange<Int> {
        switch self {
        case .second, .minute: return 0...59
        case .hour: return 0...23
        case .dayOfMonth: return 1...31
        case .month: return 1...12
        case .dayOfWeek: return 0...7
        }
    }

    /// Names accepted instead of numbers (lowercase, three letters), with their values.
    var names: [String: Int] {
        switch self {
        case .month:
            return ["jan": 1, "feb": 2, "mar": 3, "apr": 4, "may": 5, "jun": 6,
                    "jul": 7, "aug": 8, "sep": 9, "oct": 10, "nov": 11, "dec": 12]
        case .dayOfWeek:
            return ["sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6]
        default:
            return [:]
        }
    }
}

/// Why a cron expression was refused: the field (nil when the expression as a whole is wrong,
/// e.g. the number of fields) and a human-readable reason.
///
/// `description` reads like `minute: 61 is out of range 0-59`.
public struct CronParseError: Error, Sendable, Equatable, CustomStringConvertible {
    public let expression: String
    public let field: CronField?
    public let reason: String

    public init(expression: String, field: CronField?, reason: String) {
        self.expression = expression
        self.field = field
        self.reason = reason
    }

    public var description: String {
        if let field { return "\(field): \(reason)" }
        return reason
    }
}

/// A set of small non-negative integers (0...63) stored as a bit mask.
struct BitSet64: Sendable, Hashable {
    var bits: UInt64 = 0

    init(bits: UInt64 = 0) { self.bits = bits }
    init(_ range: ClosedRange<Int>) { for v in range { insert(v) } }

    mutating func insert(_ value: Int) { bits |= 1 << UInt64(value) }
    mutating func remove(_ value: Int) { bits &= ~(1 << UInt64(value)) }
    func contains(_ value: Int) -> Bool { value >= 0 && value < 64 && bits & (1 << UInt64(value)) != 0 }
    var isEmpty: Bool { bits == 0 }
    var values: [Int] { (0..<64).filter(contains) }

    /// The smallest member `>= value`, or nil.
    func next(atOrAfter value: Int) -> Int? {
        guard value < 64 else { return nil }
        let masked = bits & (UInt64.max << UInt64(max(0, value)))
        return masked == 0 ? nil : masked.trailingZeroBitCount
    }

    /// The largest member `<= value`, or nil.
    func previous(atOrBefore value: Int) -> Int? {
        guard value >= 0 else { return nil }
        let masked = value >= 63 ? bits : bits & ((1 << UInt64(value + 1)) - 1)
        return masked == 0 ? nil : 63 - masked.leadingZeroBitCount
    }
}

/// Which days a cron expression fires on: the day-of-month and day-of-week fields together.
///
/// Standard (Vixie / fugit) semantics: when both fields are restricted (neither is written `*` or `?`),
/// a day matches if **either** matches; when only one is restricted, that one decides; when neither
/// is, every day matches.
struct DaySpec: Sendable, Hashable {
    /// Days of the month, 1...31.
    var monthDays = BitSet64()
    /// `L` in day-of-month: the last day of the month.
    var lastDayOfMonth = false
    var monthDaysRestricted = false
    /// Days of the week, 0 = Sunday ... 6 = Saturday.
    var weekdays = BitSet64()
    /// `dow#n`: the n-th such weekday of the month, n in 1...5, or -1 for the last one (`dow#L`, `dow#-1`).
    var nthWeekdays: [NthWeekday] = []
    var weekdaysRestricted = false

    struct NthWeekday: Sendable, Hashable {
        let weekday: Int
        let n: Int
    }

    func matches(year: Int, month: Int, day: Int, weekday: Int) -> Bool {
        let lastDay = CivilDate.daysInMonth(year: year, month: month)
        let domMatch = monthDays.contains(day) || (lastDayOfMonth && day == lastDay)
        let dowMatch = weekdays.contains(weekday)
            || nthWeekdays.contains { nth in
                nth.weekday == weekday && (nth.n == -1 ? day + 7 > lastDay : (day - 1) / 7 + 1 == nth.n)
            }
        switch (monthDaysRestricted, weekdaysRestricted) {
        case (true, true): return domMatch || dowMatch
        case (true, false): return domMatch
        case (false, true): return dowMatch
        case (false, false): return true
        }
    }
}

/// A parsed cron expression (fugit / sidekiq-cron dialect).
///
/// Syntax:
/// * 5 fields `minute hour day-of-month month day-of-week`, or 6 with a leading `second` field
///   (5 fields fire at second 0);
/// * in each field: `*`, a number, a range `a-b`, a step `*/n`, `a-b/n` or `a/n` (= `a-max/n`), and
///   comma-separated lists of those;
/// * month names `jan`...`dec` and day names `sun`...`sat` (case-insensitive, also in ranges: `MON-FRI`);
///   day-of-week 7 is Sunday like 0;
/// * `L` in day-of-month (last day of the month), `dow#n` in day-of-week (n-th weekday of the month,
///   n in 1...5; `#L` or `#-1` for the last), `?` as a synonym of `*` in the two day fields;
/// * macros `@yearly @annually @monthly @weekly @daily @midnight @noon @hourly`.
///
/// Not supported: a trailing time-zone token inside the expression (put it in the entry's `timezone`),
/// wrap-around ranges (`FRI-MON`), plain English.
///
/// Invariants: every field set is non-empty and within its field's range; day-of-week holds no 7
/// (folded into 0); an expression that can never fire (e.g. `0 0 30 2 *`) is refused at parse time.
public struct CronExpression: Sendable, Hashable, CustomStringConvertible {
    /// The text this expression was parsed from, trimmed.
    public let source: String
    /// True when the expression was written with 6 fields (a leading seconds field).
    public let hasSeconds: Bool

    let seconds: BitSet64
    let minutes: BitSet64
    let hours: BitSet64
    let days: DaySpec
    let months: BitSet64

    /// True when the hour field is `*` or a step (`*/2`, `8-18/2`): the entry fires on a period
    /// rather than at a fixed hour. Decides the daylight-saving behaviour (see `next(after:in:)`).
    public let hourIsPeriodic: Bool

    public var description: String { source }

    static let macros: [String: String] = [
        "@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
        "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
        "@noon": "0 12 * * *", "@hourly": "0 * * * *",
    ]

    /// Parses an expression; throws a `CronParseError` naming the field and the reason.
    public init(_ text: String) throws(CronParseError) {
        let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
        source = trimmed
        func fail(_ field: CronField?, _ reason: String) -> CronParseError {
            CronParseError(expression: trimmed, field: field, reason: reason)
        }
        var body = trimmed
        if trimmed.hasPrefix("@") {
            guard let expansion = Self.macros[trimmed.lowercased()] else {
                throw fail(nil, "unknown macro '\(trimmed)' (expected one of \(Self.macros.keys.sorted().joined(separator: " ")))")
            }
            body = expansion
        }
        let tokens = body.split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init)
        let fieldTexts: [String]
        switch tokens.count {
        case 5: fieldTexts = ["0"] + tokens; hasSeconds = false
        case 6: fieldTexts = tokens; hasSeconds = true
        case 0: throw fail(nil, "empty cron expression")
        default:
            throw fail(nil, "expected 5 fields (minute hour day-of-month month day-of-week) or 6 (with leading seconds), got \(tokens.count)")
        }

        let parser = FieldParser(expression: trimmed)
        seconds = try parser.parse(fieldTexts[0], as: .second).values
        minutes = try parser.parse(fieldTexts[1], as: .minute).values
        hours = try parser.parse(fieldTexts[2], as: .hour).values
        months = try parser.parse(fieldTexts[4], as: .month).values
        hourIsPeriodic = fieldTexts[2].contains("*") || fieldTexts[2].contains("/")

        var days = DaySpec()
        let dom = try parser.parse(fieldTexts[3], as: .dayOfMonth)
        days.monthDays = dom.values
        days.lastDayOfMonth = dom.last
        days.monthDaysRestricted = dom.restricted
        let dow = try parser.parse(fieldTexts[5], as: .dayOfWeek)
        days.weekdays = dow.values
        if days.weekdays.contains(7) { days.weekdays.remove(7); days.weekdays.insert(0) }
        days.nthWeekdays = dow.nth
        days.weekdaysRestricted = dow.restricted
        self.days = days

        // Refuse expressions that can never fire: only day-of-month restricted, with days that no
        // listed month has (30 and 31 in February, 31 in April...).
        if days.monthDaysRestricted, !days.weekdaysRestricted, !days.lastDayOfMonth {
            let possible = months.values.contains { month in
                days.monthDays.values.contains { $0 <= CivilDate.daysInMonth(year: 2000, month: month) }
            }
            if !possible {
                throw fail(.dayOfMonth, "day(s) \(days.monthDays.values.map(String.init).joined(separator: ",")) never occur in month(s) \(months.values.map(String.init).joined(separator: ","))")
            }
        }
    }

    /// Whether `date` is a tick of this expression on the wall clock of `zone`
    /// (ignores the daylight-saving rules: a wall-clock match).
    public func matches(_ date: Date, in zone: TimeZone) -> Bool {
        let instant = Int(date.timeIntervalSince1970.rounded(.down))
        guard Double(instant) == date.timeIntervalSince1970 else { return false }
        return matches(wall: WallTime(wallSeconds: instant + utcOffset(of: zone, at: instant)))
    }

    func matches(wall t: WallTime) -> Bool {
        months.contains(t.month) && hours.contains(t.hour) && minutes.contains(t.minute) && seconds.contains(t.second)
            && days.matches(year: t.year, month: t.month, day: t.day, weekday: t.weekday)
    }
}

/// Parses one field's text into a value set.
private struct FieldParser {
    let expression: String

    struct Parsed {
        var values = BitSet64()
        var last = false
        var nth: [DaySpec.NthWeekday] = []
        var restricted = true
    }

    func fail(_ field: CronField, _ reason: String) -> CronParseError {
        CronParseError(expression: expression, field: field, reason: reason)
    }

    func parse(_ text: String, as field: CronField) throws(CronParseError) -> Parsed {
        var parsed = Parsed()
        let isDayField = field == .dayOfMonth || field == .dayOfWeek
        if text == "*" || (isDayField && text == "?") {
            parsed.values = BitSet64(field.range)
            parsed.restricted = false
            return parsed
        }
        for element in text.split(separator: ",", omittingEmptySubsequences: false).map(String.init) {
            guard !element.isEmpty else { throw fail(field, "empty element in list '\(text)'") }
            if field == .dayOfMonth, element.uppercased() == "L" {
                parsed.last = true
                continue
            }
            if field == .dayOfWeek, let hash = element.firstIndex(of: "#") {
                let day = try value(String(element[..<hash]), field)
                let nText = element[element.index(after: hash)...].uppercased()
                let n: Int
                switch nText {
                case "L", "-1": n = -1
                default:
                    guard let k = Int(nText), (1...5).contains(k) else {
                        throw fail(field, "'\(element)': the occurrence after '#' must be 1-5, L or -1")
                    }
                    n = k
                }
                parsed.nth.append(.init(weekday: day == 7 ? 0 : day, n: n))
                continue
            }
            try parseElement(element, field, into: &parsed.values)
        }
        return parsed
    }

    /// `*`, `*/n`, `a`, `a-b`, `a-b/n`, `a/n`.
    func parseElement(_ element: String, _ field: CronField, into set: inout BitSet64) throws(CronParseError) {
        let range = field.range
        let parts = element.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        guard parts.count <= 2 else { throw fail(field, "'\(element)' has more than one '/'") }
        var step = 1
        if parts.count == 2 {
            guard let n = Int(parts[1]), parts[1].allSatisfy(\.isASCII) else {
                throw fail(field, "step '\(parts[1])' in '\(element)' is not a number")
            }
            guard n >= 1 else { throw fail(field, "step \(n) in '\(element)' must be at least 1") }
            guard n <= range.upperBound - range.lowerBound else {
                throw fail(field, "step \(n) in '\(element)' is larger than the field's range \(range.lowerBound)-\(range.upperBound)")
            }
            step = n
        }
        let base = parts[0]
        var low: Int
        var high: Int
        if base == "*" {
            low = range.lowerBound
            high = field == .dayOfWeek ? 6 : range.upperBound
        } else if let dash = base.firstIndex(of: "-"), dash != base.startIndex {
            low = try value(String(base[..<dash]), field)
            high = try value(String(base[base.index(after: dash)...]), field)
            guard low <= high else {
                throw fail(field, "range '\(base)' is reversed (\(low) > \(high))")
            }
        } else {
            low = try value(base, field)
            // `a/n` means from a to the end of the field's range.
            high = parts.count == 2 ? (field == .dayOfWeek ? 6 : range.upperBound) : low
        }
        // `7/n` in day-of-week would run from 7 to 6: an empty set, an expression that never fires.
        guard low <= high else {
            let hint = field == .dayOfWeek && low == 7 ? " (Sunday is 0 in a step: 0/\(step))" : ""
            throw fail(field, "'\(element)' selects no value\(hint)")
        }
        for v in stride(from: low, through: high, by: step) { set.insert(v) }
    }

    /// A number or, for months and weekdays, a three-letter name.
    func value(_ text: String, _ field: CronField) throws(CronParseError) -> Int {
        if let named = field.names[text.lowercased()] { return named }
        guard !text.isEmpty, text.allSatisfy({ $0.isASCII && $0.isNumber }), let n = Int(text) else {
            let hint = field.names.isEmpty ? "" : " or a name (\(field == .month ? "jan-dec" : "sun-sat"))"
            throw fail(field, "'\(text)' is not a number\(hint)")
        }
        guard field.range.contains(n) else {
            throw fail(field, "\(n) is out of range \(field.range.lowerBound)-\(field.range.upperBound)")
        }
        return n
    }
}
