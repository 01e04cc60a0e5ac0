import Foundation

// Proleptic Gregorian calendar arithmetic on wall-clock times, independent of any time zone.
//
// The cron engine enumerates *wall-clock* times (what a clock on the wall in the entry's time zone
// shows) with plain integer arithmetic, and only then maps them to instants (see `ZoneResolver`).
// A wall-clock time is represented either as broken-down fields (`WallTime`) or as "wall seconds":
// the number of seconds from 1970-01-01 00:00:00 *on that wall clock* (that is, the Unix time the
// same fields would have in UTC).

/// Days since 1970-01-01 of a civil date (Howard Hinnant's `days_from_civil`).
/// Valid for any year representable in `Int`; `month` is 1...12, `day` 1...31.
func daysFromCivil(year: Int, month: Int, day: Int) -> Int {
    let y = month <= 2 ? year - 1 : year
    let era = (y >= 0 ? y : y - 399) / 400
    let yoe = y - era * 400
    let mp = (month + 9) % 12
    let doy = (153 * mp + 2) / 5 + day - 1
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
    return era * 146_097 + doe - 719_468
}

/// The civil date of a day count since 1970-01-01 (inverse of `daysFromCivil`).
func civilFromDays(_ days: Int) -> (year: Int, month: Int, day: Int) {
    let z = days + 719_468
    let era = (z >= 0 ? z : z - 146_096) / 146_097
    let doe = z - era * 146_097
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
    let mp = (5 * doy + 2) / 153
    let day = doy - (153 * mp + 2) / 5 + 1
    let month = mp < 10 ? mp + 3 : mp - 9
    return (yoe + era * 400 + (month <= 2 ? 1 : 0), month, day)
}

func isLeapYear(_ year: Int) -> Bool { (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 }

/// Number of days in `month` (1...12) of `year`.
func daysInMonth(year: Int, month: Int) -> Int {
    switch month {
    case 2: return isLeapYear(year) ? 29 : 28
    case 4, 6, 9, 11: return 30
    default: return 31
    }
}

/// Day of the week of a day count since 1970-01-01: 0 = Sunday ... 6 = Saturday (1970-01-01 was a Thursday).
func weekday(ofDays days: Int) -> Int {
    let r = (days + 4) % 7
    return r < 0 ? r + 7 : r
}

/// Integer division rounding towards negative infinity.
@inline(__always) func floorDiv(_ a: Int, _ b: Int) -> Int {
    let q = a / b
    return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q
}

/// A broken-down wall-clock time.
///
/// Invariant when produced by this file's helpers: every field is in range
/// (`month` 1...12, `day` 1...daysInMonth, `hour` 0...23, `minute` and `second` 0...59).
struct WallTime: Equatable, Sendable, CustomStringConvertible {
    var year: Int
    var month: Int
    var day: Int
    var hour: Int
    var minute: Int
    var second: Int

    init(year: Int, month: Int, day: Int, hour: Int = 0, minute: Int = 0, second: Int = 0) {
        self.year = year
        self.month = month
        self.day = day
        self.hour = hour
        self.minute = minute
        self.second = second
    }

    init(wallSeconds: Int) {
        let days = floorDiv(wallSeconds, 86_400)
        let secondOfDay = wallSeconds - days * 86_400
        let date = civilFromDays(days)
        self.init(year: date.year, month: date.month, day: date.day,
                  hour: secondOfDay / 3600, minute: secondOfDay % 3600 / 60, second: secondOfDay % 60)
    }

    var dayNumber: Int { daysFromCivil(year: year, month: month, day: day) }
    var wallSeconds: Int { dayNumber * 86_400 + hour * 3600 + minute * 60 + second }
    var weekday: Int { Scheduler.weekday(ofDays: dayNumber) }
    var daysInThisMonth: Int { daysInMonth(year: year, month: month) }

    var description: String {
        func pad(_ n: Int, _ width: Int = 2) -> String {
            let s = String(n)
            return String(repeating: "0", count: max(0, width - s.count)) + s
        }
        return "\(pad(year, 4))-\(pad(month))-\(pad(day)) \(pad(hour)):\(pad(minute)):\(pad(second))"
    }

    // MARK: Carrying moves (each resets the smaller fields)

    /// The first second of the next day.
    mutating func advanceDay() {
        hour = 0; minute = 0; second = 0
        day += 1
        if day > daysInThisMonth { advanceMonth() }
    }

    /// The first second of the next month.
    mutating func advanceMonth() {
        hour = 0; minute = 0; second = 0; day = 1
        month += 1
        if month > 12 { month = 1; year += 1 }
    }

    mutating func advanceHour() {
        minute = 0; second = 0
        hour += 1
        if hour > 23 { advanceDay() }
    }

    mutating func advanceMinute() {
        second = 0
        minute += 1
        if minute > 59 { advanceHour() }
    }

    /// The last second (23:59:59) of the previous day.
    mutating func retreatDay() {
        hour = 23; minute = 59; second = 59
        day -= 1
        if day < 1 { retreatMonth() }
    }

    /// The last second of the previous month.
    mutating func retreatMonth() {
        hour = 23; minute = 59; second = 59
        month -= 1
        if month < 1 { month = 12; year -= 1 }
        day = daysInThisMonth
    }

    mutating func retreatHour() {
        minute = 59; second = 59
        hour -= 1
        if hour < 0 { retreatDay() }
    }

    mutating func retreatMinute() {
        second = 59
        minute -= 1
        if minute < 0 { retreatHour() }
    }
}

/// The time zone's offset from UTC, in seconds, at a Unix instant.
func utcOffset(of zone: TimeZone, at instant: Int) -> Int {
    zone.secondsFromGMT(for: Date(timeIntervalSince1970: Double(instant)))
}
