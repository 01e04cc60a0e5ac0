import WorkersCivilDate
import Foundation

/// Conversions between `Date` and PostgreSQL's ISO text forms of `timestamptz`, `timestamp` and `date`.
///
/// Pure functions (no formatter objects, no locale, no shared state): safe from any thread.
/// Connections set `TimeZone = 'UTC'` and `DateStyle = 'ISO'`, so the server sends
/// `YYYY-MM-DD HH:MM:SS[.ffffff]+00`; other offsets are still honoured when parsing.
enum PostgresTimestamp {
    /// `2025-11-23 16:00:00.123456+00`.
    static func format(_ date: Date) -> String {
        let totalMicros = Int64((date.timeIntervalSince1970 * 1_000_000).rounded())
        let (seconds, micros) = floorDivMod(totalMicros, 1_000_000)
        let (days, secondOfDay) = floorDivMod(seconds, 86_400)
        let (year, month, day) = civil(fromDays: days)
        let hour = secondOfDay / 3600, minute = (secondOfDay % 3600) / 60, second = secondOfDay % 60
        return "\(pad(year, 4))-\(pad(month, 2))-\(pad(day, 2)) \(pad(hour, 2)):\(pad(minute, 2)):\(pad(second, 2))"
            + ".\(pad(micros, 6))+00"
    }

    /// Parses `date`, `timestamp` and `timestamptz` text; a value without offset is taken as UTC.
    /// Returns nil for anything else (including BC dates).
    static func parse(_ text: String) -> Date? {
        switch text {
        case "infinity": return .distantFuture
        case "-infinity": return .distantPast
        default: break
        }
        var scanner = Scanner(Array(text.utf8))
        guard let year = scanner.number(minDigits: 4, maxDigits: 7), scanner.skip(UInt8(ascii: "-")),
              let month = scanner.number(minDigits: 2, maxDigits: 2), scanner.skip(UInt8(ascii: "-")),
              let day = scanner.number(minDigits: 2, maxDigits: 2),
              (1...12).contains(month), (1...31).contains(day)
        else { return nil }
        if scanner.atEnd {
            return makeDate(year: year, month: month, day: day, seconds: 0, micros: 0, offsetSeconds: 0)
        }
        guard scanner.skip(UInt8(ascii: " ")) || scanner.skip(UInt8(ascii: "T")),
              let hour = scanner.number(minDigits: 2, maxDigits: 2), scanner.skip(UInt8(ascii: ":")),
              let minute = scanner.number(minDigits: 2, maxDigits: 2), scanner.skip(UInt8(ascii: ":")),
              let second = scanner.number(minDigits: 2, maxDigits: 2),
              hour <= 24, minute < 60, second < 61
        else { return nil }
        var micros = 0
        if scanner.skip(UInt8(ascii: ".")) {
            guard let (fraction, digits) = scanner.digits(maxDigits: 9, ignoringExtraDigits: true), digits > 0 else { return nil }
            var value = fraction
            var count = digits
            while count > 6 { value /= 10; count -= 1 }
            while count < 6 { value *= 10; count += 1 }
            micros = value
        }
        var offset = 0
        if scanner.skip(UInt8(ascii: "Z")) {
            offset = 0
        } else if let sign = scanner.sign() {
            guard let hours = scanner.number(minDigits: 2, maxDigits: 2) else { return nil }
            var minutes = 0, seconds = 0
            if scanner.skip(UInt8(ascii: ":")) {
                guard let value = scanner.number(minDigits: 2, maxDigits: 2) else { return nil }
                minutes = value
                if scanner.skip(UInt8(ascii: ":")) {
                    guard let value = scanner.number(minDigits: 2, maxDigits: 2) else { return nil }
                    seconds = value
                }
            }
            offset = sign * (hours * 3600 + minutes * 60 + seconds)
        }
        guard scanner.atEnd else { return nil }
        return makeDate(year: year, month: month, day: day,
                        seconds: hour * 3600 + minute * 60 + second, micros: micros, offsetSeconds: offset)
    }

    static func makeDate(year: Int, month: Int, day: Int, seconds: Int, micros: Int, offsetSeconds: Int) -> Date {
        let days = Int64(CivilDate.days(year: year, month: month, day: day))
        let utcSeconds = days * 86_400 + Int64(seconds) - Int64(offsetSeconds)
        return Date(timeIntervalSince1970: Double(utcSeconds) + Double(micros) / 1_000_000)
    }

    static func utcComponents(of date: Date) -> (year: Int, month: Int, day: Int) {
        let seconds = Int64(date.timeIntervalSince1970.rounded(.down))
        let (days, _) = floorDivMod(seconds, 86_400)
        return civil(fromDays: days)
    }

    /// Floor division with the remainder as `Int` (the calendar arithmetic is `CivilDate`'s).
    private static func floorDivMod(_ value: Int64, _ divisor: Int64) -> (Int64, Int) {
        let (quotient, remainder) = CivilDate.floorDivMod(value, divisor)
        return (quotient, Int(remainder))
    }

    private static func civil(fromDays days: Int64) -> (year: Int, month: Int, day: Int) {
        CivilDate.date(fromDays: Int(days))
    }

    private static func pad(_ value: Int, _ width: Int) -> String {
        let digits = String(value)
        return String(repeating: "0", count: max(0, width - digits.count)) + digits
    }

    /// A cursor over ASCII bytes.
    private struct Scanner {
        let bytes: [UInt8]
        var index = 0
        init(_ bytes: [UInt8]) { self.bytes = bytes }

        var atEnd: Bool { index == bytes.count }

        mutating func skip(_ byte: UInt8) -> Bool {
            guard index < bytes.count, bytes[index] == byte else { return false }
            index += 1
            return true
        }

        mutating func sign() -> Int? {
            if skip(UInt8(ascii: "+")) { return 1 }
            if skip(UInt8(ascii: "-")) { return -1 }
            return nil
        }

        /// Up to `maxDigits` decimal digits as (value, digit count); with `ignoringExtraDigits`, further
        /// digits are consumed and dropped (fractions finer than we keep).
        mutating func digits(maxDigits: Int, ignoringExtraDigits: Bool = false) -> (Int, Int)? {
            var value = 0, count = 0
            while index < bytes.count, count < maxDigits, (48...57).contains(bytes[index]) {
                value = value * 10 + Int(bytes[index] - 48)
                index += 1
                count += 1
            }
            while ignoringExtraDigits, index < bytes.count, (48...57).contains(bytes[index]) { index += 1 }
            return (value, count)
        }

        mutating func number(minDigits: Int, maxDigits: Int) -> Int? {
            guard let (value, count) = digits(maxDigits: maxDigits), count >= minDigits else { return nil }
            return value
        }
    }
}
