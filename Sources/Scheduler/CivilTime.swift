import WorkersCivilDate
import Foundation

// Wall-clock times for the cron engine, independent of any time zone. The calendar arithmetic itself
// (day counts, month lengths, weekdays) is `CivilDate`'s, shared with Storage.
//
// The cron engine enumerates *wall-clock* times (what a clock on the wall in the entry's time zone
// shows) with plain integer arithmetic, and only then maps them to instants (see `ZoneResolver`).
// A wall-clock time is represented either as broken-down fields (`WallTime`) or as "wall seconds":
// the number of seconds from 1970-01-01 00:00:00 *on that wall clock* (that is, the Unix time the
// same fields would have in UTC).

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
        let days = CivilDate.floorDiv(wallSeconds, 86_400)
        let secondOfDay = wallSeconds - days * 86_400
        let date = CivilDate.date(fromDays: days)
        self.init(year: date.year, month: date.month, day: date.day,
                  hour: secondOfDay / 3600, minute: secondOfDay % 3600 / 60, second: secondOfDay % 60)
    }

    var dayNumber: Int { CivilDate.days(year: year, month: month, day: day) }
    var wallSeconds: Int { dayNumber * 86_400 + hour * 3600 + minute * 60 + second }
    var weekday: Int { CivilDate.weekday(ofDays: dayNumber) }
    var daysInThisMonth: Int { CivilDate.daysInMonth(year: year, month: month) }

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
