/// Proleptic Gregorian calendar arithmetic on day counts, independent of any time zone and of
/// Foundation: the one implementation that Storage (PostgreSQL's date and timestamp text) and
/// Scheduler (cron's wall-clock times) both use.
///
/// A day count is the number of days since 1970-01-01 (negative before it). Pure functions on
/// integers: safe from any thread. Algorithms: Howard Hinnant, "chrono-Compatible Low-Level Date
/// Algorithms" (`days_from_civil`, `civil_from_days`, `weekday_from_days`).
public enum CivilDate {
    /// Days since 1970-01-01 of a civil date. Valid for any year representable in `Int`;
    /// `month` is 1...12, `day` 1...31.
    public static func days(year: Int, month: Int, day: Int) -> Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let mp = (month + 9) % 12
        let doy = (153 * mp + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }

    /// The civil date of a day count (inverse of `days(year:month:day:)`).
    public static func date(fromDays days: Int) -> (year: Int, month: Int, day: Int) {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let day = doy - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        return (yoe + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }

    public static func isLeapYear(_ year: Int) -> Bool { (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 }

    /// Number of days in `month` (1...12) of `year`.
    public static func daysInMonth(year: Int, month: Int) -> Int {
        switch month {
        case 2: return isLeapYear(year) ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }

    /// Day of the week of a day count: 0 = Sunday ... 6 = Saturday (1970-01-01 was a Thursday).
    public static func weekday(ofDays days: Int) -> Int {
        let r = (days + 4) % 7
        return r < 0 ? r + 7 : r
    }

    /// Integer division rounding towards negative infinity.
    @inline(__always) public static func floorDiv(_ a: Int, _ b: Int) -> Int {
        let q = a / b
        return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q
    }

    /// Quotient rounded towards negative infinity, and the remainder in `0..<divisor` (`divisor` > 0).
    @inline(__always) public static func floorDivMod(_ value: Int64, _ divisor: Int64) -> (quotient: Int64, remainder: Int64) {
        var quotient = value / divisor
        var remainder = value % divisor
        if remainder < 0 { quotient -= 1; remainder += divisor }
        return (quotient, remainder)
    }
}
