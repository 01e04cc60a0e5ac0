import WorkersCivilDate
import Foundation

// MARK: - Fire times
//
// # How ticks are computed
//
// A cron expression describes *wall-clock* times in a time zone. The engine first enumerates the
// matching wall-clock times with integer calendar arithmetic, jumping field by field (month, day,
// hour, minute, second — never second by second), and then maps each wall-clock time to the
// instants at which it fires (`ZoneResolver.instants`).
//
// # Daylight-saving rules
//
// A wall-clock time is *normal* (exists once), *skipped* (inside a spring-forward gap: 02:30 on the
// last Sunday of March in Europe/Berlin) or *repeated* (inside a fall-back overlap: 02:30 on the last
// Sunday of October in Europe/Berlin happens at +02:00 and again at +01:00).
//
// | expression kind                                   | skipped time                          | repeated time            |
// |---------------------------------------------------|---------------------------------------|--------------------------|
// | fixed hour (hour field a number, list or range)   | fires once, at the end of the gap (the first valid instant: 03:00 local in Berlin) | fires once, at the first occurrence |
// | periodic hour (hour field `*` or a step)          | does not fire (that hour did not happen) | fires at both occurrences |
//
// So a daily `30 2 * * *` fires exactly once every day (at 03:00 on the spring-forward day), and
// `*/15 * * * *` keeps firing every 15 real minutes across both transitions (4 ticks in the 23-hour
// day's missing hour are not invented; the repeated hour gets its 4 ticks twice). Several skipped
// times that map to the same instant fire once (ticks are instants, never duplicated).
// This is Vixie cron's behaviour, keyed on the hour field only.
//
// Assumption: a zone changes its UTC offset at most once within any 48 hours (true for every IANA
// zone in use); offsets come from Foundation's `TimeZone`.

extension CronExpression {
    /// The first tick strictly after `date`, or nil when there is none within 50 years.
    ///
    /// Ticks are whole seconds; `date` may have a fractional part.
    public func next(after date: Date, in zone: TimeZone) -> Date? {
        let resolver = ZoneResolver(zone: zone, hourIsPeriodic: hourIsPeriodic)
        let t = Int(date.timeIntervalSince1970.rounded(.down))
        // Every wall time with an instant > t is later than this wall time (one transition per day).
        var wall = t + min(resolver.offset(at: t), resolver.offset(at: t + 86_400))
        var best: Int?
        var stopWall = Int.max
        let horizon = WallTime(wallSeconds: wall).year + 50
        while let w = nextWall(after: wall, untilYear: horizon), w < stopWall {
            for instant in resolver.instants(ofWall: w) where instant > t && instant < (best ?? .max) {
                best = instant
                // A later wall time can only map to an earlier instant within one offset change.
                stopWall = instant + max(resolver.offset(at: instant), resolver.offset(at: instant - 86_400))
            }
            wall = w
        }
        return best.map { Date(timeIntervalSince1970: Double($0)) }
    }

    /// The last tick at or before `date`, or nil when there is none within 50 years.
    public func previous(atOrBefore date: Date, in zone: TimeZone) -> Date? {
        let resolver = ZoneResolver(zone: zone, hourIsPeriodic: hourIsPeriodic)
        let t = Int(date.timeIntervalSince1970.rounded(.down))
        var wall = t + max(resolver.offset(at: t), resolver.offset(at: t - 86_400))
        var best: Int?
        var stopWall = Int.min
        let horizon = WallTime(wallSeconds: wall).year - 50
        while let w = previousWall(atOrBefore: wall, untilYear: horizon), w > stopWall {
            for instant in resolver.instants(ofWall: w) where instant <= t && instant > (best ?? .min) {
                best = instant
                stopWall = instant + min(resolver.offset(at: instant), resolver.offset(at: instant + 86_400))
            }
            wall = w - 1
        }
        return best.map { Date(timeIntervalSince1970: Double($0)) }
    }

    /// The ticks `t` with `start < t <= end`, in increasing order, at most `limit` of them (the
    /// earliest ones). Exactly the sequence `next(after:)` walks from `start`.
    public func ticks(from start: Date, to end: Date, in zone: TimeZone, limit: Int = .max) -> [Date] {
        var result: [Date] = []
        var cursor = start
        while result.count < limit, let tick = next(after: cursor, in: zone), tick <= end {
            result.append(tick)
            cursor = tick
        }
        return result
    }

    // MARK: Wall-clock enumeration

    /// The first matching wall time strictly after `wallSeconds`, searching up to the end of `lastYear`.
    func nextWall(after wallSeconds: Int, untilYear lastYear: Int) -> Int? {
        var t = WallTime(wallSeconds: wallSeconds + 1)
        while t.year <= lastYear {
            guard let month = months.next(atOrAfter: t.month) else {
                t = WallTime(year: t.year + 1, month: 1, day: 1)
                continue
            }
            if month != t.month { t = WallTime(year: t.year, month: month, day: 1) }
            guard days.matches(year: t.year, month: t.month, day: t.day, weekday: t.weekday) else {
                t.advanceDay(); continue
            }
            guard let hour = hours.next(atOrAfter: t.hour) else { t.advanceDay(); continue }
            if hour != t.hour { t.hour = hour; t.minute = 0; t.second = 0 }
            guard let minute = minutes.next(atOrAfter: t.minute) else { t.advanceHour(); continue }
            if minute != t.minute { t.minute = minute; t.second = 0 }
            guard let second = seconds.next(atOrAfter: t.second) else { t.advanceMinute(); continue }
            t.second = second
            return t.wallSeconds
        }
        return nil
    }

    /// The last matching wall time at or before `wallSeconds`, searching back to the start of `firstYear`.
    func previousWall(atOrBefore wallSeconds: Int, untilYear firstYear: Int) -> Int? {
        var t = WallTime(wallSeconds: wallSeconds)
        while t.year >= firstYear {
            guard let month = months.previous(atOrBefore: t.month) else {
                t = WallTime(year: t.year - 1, month: 12, day: 31, hour: 23, minute: 59, second: 59)
                continue
            }
            if month != t.month {
                t = WallTime(year: t.year, month: month, day: CivilDate.daysInMonth(year: t.year, month: month),
                             hour: 23, minute: 59, second: 59)
            }
            guard days.matches(year: t.year, month: t.month, day: t.day, weekday: t.weekday) else {
                t.retreatDay(); continue
            }
            guard let hour = hours.previous(atOrBefore: t.hour) else { t.retreatDay(); continue }
            if hour != t.hour { t.hour = hour; t.minute = 59; t.second = 59 }
            guard let minute = minutes.previous(atOrBefore: t.minute) else { t.retreatHour(); continue }
            if minute != t.minute { t.minute = minute; t.second = 59 }
            guard let second = seconds.previous(atOrBefore: t.second) else { t.retreatMinute(); continue }
            t.second = second
            return t.wallSeconds
        }
        return nil
    }
}

/// Maps wall-clock times of one time zone to instants, applying the daylight-saving rules above.
struct ZoneResolver {
    let zone: TimeZone
    let hourIsPeriodic: Bool

    func offset(at instant: Int) -> Int { utcOffset(of: zone, at: instant) }

    /// The instants (Unix seconds, increasing) at which the wall time `wall` fires:
    /// one for a normal time; for a skipped time, the end of the gap (fixed hour) or none (periodic);
    /// for a repeated time, the first occurrence (fixed hour) or both (periodic).
    func instants(ofWall wall: Int) -> [Int] {
        // Candidate offsets: those in force a day either side (an instant with this wall time is
        // within 14 h of `wall` read as UTC), plus the offset at the naive instant.
        let early = offset(at: wall - 86_400)
        let late = offset(at: wall + 86_400)
        var candidates = [early]
        if late != early { candidates.append(late) }
        let naive = offset(at: wall - offset(at: wall))
        if !candidates.contains(naive) { candidates.append(naive) }

        let valid = candidates.map { wall - $0 }.filter { $0 + offset(at: $0) == wall }.sorted()
        var unique: [Int] = []
        for v in valid where unique.last != v { unique.append(v) }

        switch unique.count {
        case 0:
            return hourIsPeriodic ? [] : [endOfGap(containing: wall, offsets: candidates)]
        case 1:
            return unique
        default:
            return hourIsPeriodic ? unique : [unique[0]]
        }
    }

    /// The first instant whose wall-clock time is later than `wall`, a time inside a gap:
    /// the transition instant that ends the gap.
    func endOfGap(containing wall: Int, offsets: [Int]) -> Int {
        // Reading `wall` with the largest offset gives an instant before the gap, with the smallest
        // one an instant after it; the wall clock is increasing in between.
        var low = wall - (offsets.max() ?? 0)   // wall clock there < wall
        var high = wall - (offsets.min() ?? 0)  // wall clock there > wall
        guard low < high else { return high }
        while high - low > 1 {
            let mid = low + (high - low) / 2
            if mid + offset(at: mid) > wall { high = mid } else { low = mid }
        }
        return high
    }
}
