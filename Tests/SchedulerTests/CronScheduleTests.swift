import Foundation
import XCTest
@testable import WorkersScheduler

final class CronScheduleTests: XCTestCase {
    func cron(_ text: String) -> CronExpression { try! CronExpression(text) }

    func ticks(_ expression: String, _ from: String, _ to: String, in zone: TimeZone) -> [String] {
        cron(expression).ticks(from: at(from), to: at(to), in: zone).map(utc)
    }

    // MARK: UTC basics

    func testNextAndPreviousDaily() {
        let c = cron("15 0 * * *")
        let now = at("2026-11-22T07:01:05Z")
        XCTAssertEqual(utc(c.next(after: now, in: utcZone)), "2026-11-23T00:15:00Z")
        XCTAssertEqual(utc(c.previous(atOrBefore: now, in: utcZone)), "2026-11-22T00:15:00Z")
        // A tick itself: `next` is strictly after, `previous` includes it.
        let tick = at("2026-11-22T00:15:00Z")
        XCTAssertEqual(utc(c.next(after: tick, in: utcZone)), "2026-11-23T00:15:00Z")
        XCTAssertEqual(utc(c.previous(atOrBefore: tick, in: utcZone)), "2026-11-22T00:15:00Z")
        XCTAssertEqual(utc(c.previous(atOrBefore: tick.addingTimeInterval(-0.5), in: utcZone)), "2026-11-21T00:15:00Z")
        XCTAssertEqual(utc(c.next(after: tick.addingTimeInterval(-0.5), in: utcZone)), "2026-11-22T00:15:00Z")
    }

    func testYearBoundaryAndMonthSkipping() {
        XCTAssertEqual(utc(cron("@yearly").next(after: at("2026-06-01T00:00:00Z"), in: utcZone)), "2027-01-01T00:00:00Z")
        XCTAssertEqual(utc(cron("@yearly").previous(atOrBefore: at("2026-06-01T00:00:00Z"), in: utcZone)), "2026-01-01T00:00:00Z")
        XCTAssertEqual(utc(cron("0 12 31 * *").next(after: at("2026-04-01T00:00:00Z"), in: utcZone)), "2026-05-31T12:00:00Z")
        XCTAssertEqual(utc(cron("0 12 31 * *").previous(atOrBefore: at("2026-07-15T00:00:00Z"), in: utcZone)), "2026-05-31T12:00:00Z")
        XCTAssertEqual(utc(cron("0 0 29 2 *").next(after: at("2026-01-01T00:00:00Z"), in: utcZone)), "2028-02-29T00:00:00Z")
        XCTAssertEqual(utc(cron("0 0 29 2 *").previous(atOrBefore: at("2026-01-01T00:00:00Z"), in: utcZone)), "2024-02-29T00:00:00Z")
    }

    func testSecondsField() {
        let c = cron("*/20 * * * * *")
        XCTAssertEqual(utc(c.next(after: at("2026-11-22T12:00:05Z"), in: utcZone)), "2026-11-22T12:00:20Z")
        XCTAssertEqual(utc(c.next(after: at("2026-11-22T12:59:45Z"), in: utcZone)), "2026-11-22T13:00:00Z")
        XCTAssertEqual(utc(c.previous(atOrBefore: at("2026-11-22T12:00:05Z"), in: utcZone)), "2026-11-22T12:00:00Z")
        XCTAssertEqual(ticks("30 0 0 * * *", "2026-11-22T00:00:00Z", "2026-11-24T00:00:00Z", in: utcZone),
                       ["2026-11-22T00:00:30Z", "2026-11-23T00:00:30Z"])
        // Five fields fire at second 0 only.
        XCTAssertEqual(utc(cron("* * * * *").next(after: at("2026-11-22T12:00:05Z"), in: utcZone)), "2026-11-22T12:01:00Z")
    }

    func testTicksAreHalfOpenAndLimited() {
        XCTAssertEqual(ticks("*/15 * * * *", "2026-11-22T10:00:00Z", "2026-11-22T11:00:00Z", in: utcZone),
                       ["2026-11-22T10:15:00Z", "2026-11-22T10:30:00Z", "2026-11-22T10:45:00Z", "2026-11-22T11:00:00Z"])
        XCTAssertEqual(cron("* * * * * *").ticks(from: at("2026-11-22T10:00:00Z"), to: at("2026-11-29T10:00:00Z"),
                                                 in: utcZone, limit: 3).map(utc),
                       ["2026-11-22T10:00:01Z", "2026-11-22T10:00:02Z", "2026-11-22T10:00:03Z"])
        XCTAssertEqual(ticks("0 0 * * *", "2026-11-22T10:00:00Z", "2026-11-22T11:00:00Z", in: utcZone), [])
    }

    func testDayOfMonthOrDayOfWeek() {
        // April 2026: Fridays are 3, 10, 17, 24; the 13th is a Monday. Both restricted => either matches.
        XCTAssertEqual(ticks("0 0 13 * fri", "2026-04-01T00:00:00Z", "2026-04-30T00:00:00Z", in: utcZone),
                       ["2026-04-03T00:00:00Z", "2026-04-10T00:00:00Z", "2026-04-13T00:00:00Z",
                        "2026-04-17T00:00:00Z", "2026-04-24T00:00:00Z"])
        // Only one restricted => that one decides.
        XCTAssertEqual(ticks("0 0 13 * *", "2026-04-01T00:00:00Z", "2026-05-30T00:00:00Z", in: utcZone),
                       ["2026-04-13T00:00:00Z", "2026-05-13T00:00:00Z"])
        XCTAssertEqual(ticks("0 0 * * FRI", "2026-04-01T00:00:00Z", "2026-04-12T00:00:00Z", in: utcZone),
                       ["2026-04-03T00:00:00Z", "2026-04-10T00:00:00Z"])
        XCTAssertEqual(ticks("0 9 * * MON-FRI", "2026-04-03T10:00:00Z", "2026-04-08T00:00:00Z", in: utcZone),
                       ["2026-04-06T09:00:00Z", "2026-04-07T09:00:00Z"])
        XCTAssertEqual(ticks("0 0 * * 7", "2026-04-01T00:00:00Z", "2026-04-12T00:00:00Z", in: utcZone),
                       ["2026-04-05T00:00:00Z", "2026-04-12T00:00:00Z"])
    }

    func testLastDayOfMonthAndNthWeekday() {
        XCTAssertEqual(ticks("0 0 L * *", "2028-01-15T00:00:00Z", "2028-04-01T00:00:00Z", in: utcZone),
                       ["2028-01-31T00:00:00Z", "2028-02-29T00:00:00Z", "2028-03-31T00:00:00Z"])
        // November 2026: Mondays 2, 9, 16, 23, 30; Fridays 6, 13, 20, 27.
        XCTAssertEqual(ticks("0 0 * 11 mon#2", "2026-01-01T00:00:00Z", "2026-12-31T00:00:00Z", in: utcZone),
                       ["2026-11-09T00:00:00Z"])
        XCTAssertEqual(ticks("0 0 * 11 fri#L", "2026-01-01T00:00:00Z", "2026-12-31T00:00:00Z", in: utcZone),
                       ["2026-11-27T00:00:00Z"])
        XCTAssertEqual(ticks("0 0 * 11 mon#5", "2026-01-01T00:00:00Z", "2026-12-31T00:00:00Z", in: utcZone),
                       ["2026-11-30T00:00:00Z"])
    }

    func testTimeZoneWithoutTransition() {
        // 09:00 in Berlin in winter is 08:00Z, in summer 07:00Z.
        XCTAssertEqual(utc(cron("0 9 * * *").next(after: at("2026-01-10T12:00:00Z"), in: berlin)), "2026-01-11T08:00:00Z")
        XCTAssertEqual(utc(cron("0 9 * * *").next(after: at("2026-07-10T12:00:00Z"), in: berlin)), "2026-07-11T07:00:00Z")
        XCTAssertEqual(utc(cron("0 9 * * *").previous(atOrBefore: at("2026-07-10T12:00:00Z"), in: berlin)), "2026-07-10T07:00:00Z")
        // Day boundaries are local: midnight in Tokyo is 15:00Z the day before.
        XCTAssertEqual(utc(cron("0 0 1 * *").next(after: at("2026-05-15T00:00:00Z"), in: zone("Asia/Tokyo"))), "2026-05-31T15:00:00Z")
    }

    func testNeverFiresWithinHorizonIsNil() {
        // A fifth Monday in February only happens when Feb 29 is a Monday: 2044 after 2026.
        let c = cron("0 0 * 2 mon#5")
        XCTAssertEqual(utc(c.next(after: at("2026-01-01T00:00:00Z"), in: utcZone)), "2044-02-29T00:00:00Z")
        XCTAssertEqual(utc(c.previous(atOrBefore: at("2026-01-01T00:00:00Z"), in: utcZone)), "2016-02-29T00:00:00Z")
    }

    // MARK: Daylight saving time — Europe/Berlin (2026: spring 03-29 01:00Z, fall 10-25 01:00Z)

    func testBerlinSpringFixedTimeInGapFiresOnceAtEndOfGap() {
        XCTAssertEqual(ticks("30 2 * * *", "2026-03-27T12:00:00Z", "2026-03-30T12:00:00Z", in: berlin),
                       ["2026-03-28T01:30:00Z",   // 02:30 CET
                        "2026-03-29T01:00:00Z",   // 02:30 does not exist: 03:00 CEST, the end of the gap
                        "2026-03-30T00:30:00Z"])  // 02:30 CEST
        // Several skipped times and a real one collapse into a single tick.
        XCTAssertEqual(ticks("0,30 2,3 * * *", "2026-03-29T00:00:00Z", "2026-03-29T02:00:00Z", in: berlin),
                       ["2026-03-29T01:00:00Z", "2026-03-29T01:30:00Z"])
        XCTAssertEqual(utc(cron("30 2 * * *").previous(atOrBefore: at("2026-03-29T01:59:00Z"), in: berlin)), "2026-03-29T01:00:00Z")
        XCTAssertEqual(utc(cron("30 2 * * *").previous(atOrBefore: at("2026-03-29T00:59:59Z"), in: berlin)), "2026-03-28T01:30:00Z")
        // A time just before and just after the gap are unaffected.
        XCTAssertEqual(ticks("59 1 * * *", "2026-03-29T00:00:00Z", "2026-03-29T12:00:00Z", in: berlin), ["2026-03-29T00:59:00Z"])
        XCTAssertEqual(ticks("0 3 * * *", "2026-03-29T00:00:00Z", "2026-03-29T12:00:00Z", in: berlin), ["2026-03-29T01:00:00Z"])
    }

    func testBerlinSpringPeriodicSkipsTheMissingHour() {
        XCTAssertEqual(ticks("*/30 * * * *", "2026-03-28T23:59:00Z", "2026-03-29T02:00:00Z", in: berlin),
                       ["2026-03-29T00:00:00Z", "2026-03-29T00:30:00Z",  // 01:00, 01:30 CET
                        "2026-03-29T01:00:00Z", "2026-03-29T01:30:00Z",  // 03:00, 03:30 CEST
                        "2026-03-29T02:00:00Z"])
        XCTAssertEqual(ticks("30 * * * *", "2026-03-28T23:59:00Z", "2026-03-29T02:00:00Z", in: berlin),
                       ["2026-03-29T00:30:00Z", "2026-03-29T01:30:00Z"])  // 01:30 CET then 03:30 CEST: one real hour
    }

    func testBerlinFallFixedTimeFiresAtFirstOccurrenceOnly() {
        XCTAssertEqual(ticks("30 2 * * *", "2026-10-23T12:00:00Z", "2026-10-26T12:00:00Z", in: berlin),
                       ["2026-10-24T00:30:00Z",   // 02:30 CEST
                        "2026-10-25T00:30:00Z",   // first 02:30 (CEST); the second (01:30Z) does not fire
                        "2026-10-26T01:30:00Z"])  // 02:30 CET
        XCTAssertEqual(utc(cron("30 2 * * *").previous(atOrBefore: at("2026-10-25T01:45:00Z"), in: berlin)), "2026-10-25T00:30:00Z")
        XCTAssertEqual(utc(cron("30 2 * * *").next(after: at("2026-10-25T00:45:00Z"), in: berlin)), "2026-10-26T01:30:00Z")
    }

    func testBerlinFallPeriodicFiresInBothRepeatedHours() {
        XCTAssertEqual(ticks("*/30 * * * *", "2026-10-24T23:59:00Z", "2026-10-25T02:00:00Z", in: berlin),
                       ["2026-10-25T00:00:00Z", "2026-10-25T00:30:00Z",  // 02:00, 02:30 CEST
                        "2026-10-25T01:00:00Z", "2026-10-25T01:30:00Z",  // 02:00, 02:30 CET
                        "2026-10-25T02:00:00Z"])                         // 03:00 CET
        // previous() from inside the second occurrence finds the second occurrence.
        XCTAssertEqual(utc(cron("30 * * * *").previous(atOrBefore: at("2026-10-25T01:45:00Z"), in: berlin)), "2026-10-25T01:30:00Z")
        XCTAssertEqual(utc(cron("30 * * * *").previous(atOrBefore: at("2026-10-25T01:29:00Z"), in: berlin)), "2026-10-25T00:30:00Z")
        // next() from inside the first occurrence finds the second occurrence of an earlier wall time.
        XCTAssertEqual(utc(cron("10 * * * *").next(after: at("2026-10-25T00:40:00Z"), in: berlin)), "2026-10-25T01:10:00Z")
    }

    // MARK: Daylight saving time — America/New_York (2026: spring 03-08 07:00Z, fall 11-01 06:00Z)

    func testNewYorkSpring() {
        XCTAssertEqual(ticks("30 2 * * *", "2026-03-07T00:00:00Z", "2026-03-10T00:00:00Z", in: newYork),
                       ["2026-03-07T07:30:00Z",   // 02:30 EST
                        "2026-03-08T07:00:00Z",   // 03:00 EDT, end of the gap
                        "2026-03-09T06:30:00Z"])  // 02:30 EDT
        XCTAssertEqual(ticks("0 * * * *", "2026-03-08T05:30:00Z", "2026-03-08T08:00:00Z", in: newYork),
                       ["2026-03-08T06:00:00Z", "2026-03-08T07:00:00Z", "2026-03-08T08:00:00Z"])  // 01:00 EST, 03:00, 04:00 EDT
    }

    func testNewYorkFall() {
        XCTAssertEqual(ticks("30 1 * * *", "2026-10-31T00:00:00Z", "2026-11-03T00:00:00Z", in: newYork),
                       ["2026-10-31T05:30:00Z",   // 01:30 EDT
                        "2026-11-01T05:30:00Z",   // first 01:30 (EDT) only
                        "2026-11-02T06:30:00Z"])  // 01:30 EST
        XCTAssertEqual(ticks("0 * * * *", "2026-11-01T04:30:00Z", "2026-11-01T07:00:00Z", in: newYork),
                       ["2026-11-01T05:00:00Z", "2026-11-01T06:00:00Z", "2026-11-01T07:00:00Z"])  // 01:00 EDT, 01:00 EST, 02:00 EST
    }

    func testSecondsAcrossTheGap() {
        // Every 20 s at 02:00 local (fixed hour): the whole skipped minute collapses into the end of the gap.
        XCTAssertEqual(ticks("*/20 0 2 * * *", "2026-03-29T00:00:00Z", "2026-03-29T02:00:00Z", in: berlin),
                       ["2026-03-29T01:00:00Z"])
    }

    // MARK: Properties

    /// Walking forward with `next` and backward with `previous` gives the same ticks, over a year
    /// with both transitions, in several zones (including a 30-minute DST shift and the southern hemisphere).
    func testNextAndPreviousAgree() {
        let zones = [berlin, newYork, utcZone, zone("Australia/Lord_Howe"), zone("America/Santiago"), zone("Asia/Kolkata")]
        let expressions = ["30 2 * * *", "0,30 1-3 * * *", "*/45 * * * *", "0 0 * * mon", "15 0 * * *", "0 */5 * * *"]
        let start = at("2026-01-01T00:00:00Z"), end = at("2027-01-01T00:00:00Z")
        for zone in zones {
            for text in expressions {
                let c = cron(text)
                let forward = c.ticks(from: start, to: end, in: zone)
                var backward: [Date] = []
                var cursor = end
                while let tick = c.previous(atOrBefore: cursor, in: zone), tick > start {
                    backward.append(tick)
                    cursor = tick.addingTimeInterval(-1)
                }
                let reversed = Array(backward.reversed())
                if forward != reversed {
                    let index = zip(forward, reversed).enumerated().first { $0.element.0 != $0.element.1 }?.offset ?? min(forward.count, reversed.count)
                    XCTFail("\(text) in \(zone.identifier): forward and backward differ at #\(index): "
                        + "\(utc(forward.dropFirst(index).first)) vs \(utc(reversed.dropFirst(index).first))")
                }
                XCTAssertEqual(forward, forward.sorted(), "\(text) in \(zone.identifier)")
                XCTAssertEqual(Set(forward).count, forward.count, "\(text) in \(zone.identifier)")
            }
        }
    }

    /// Against a brute-force minute scan: for a periodic hour field, the DST rules are exactly
    /// "every real instant whose local wall clock matches" — no other rule is involved.
    func testPeriodicMatchesBruteForceAcrossTransitions() {
        for (zone, day) in [(berlin, "2026-03-28T22:00:00Z"), (berlin, "2026-10-24T22:00:00Z"),
                            (newYork, "2026-03-08T04:00:00Z"), (newYork, "2026-11-01T03:00:00Z")] {
            for text in ["*/7 * * * *", "0 */2 * * *", "13,47 * * * *", "*/20 * * * 0"] {
                let c = cron(text)
                let start = at(day), end = start.addingTimeInterval(6 * 3600)
                var expected: [Date] = []
                var minute = start.addingTimeInterval(60)
                while minute <= end {
                    if c.matches(minute, in: zone) { expected.append(minute) }
                    minute.addTimeInterval(60)
                }
                XCTAssertEqual(c.ticks(from: start, to: end, in: zone).map(utc), expected.map(utc), "\(text) \(zone.identifier) \(day)")
            }
        }
    }

    /// A fixed-hour daily entry fires exactly once per local day, every day of the year, in any zone.
    func testFixedDailyFiresOncePerDay() {
        for zone in [berlin, newYork, zone("Australia/Lord_Howe"), zone("America/Santiago")] {
            for text in ["30 2 * * *", "0 2 * * *", "59 1 * * *", "15 0 * * *", "0 0 * * *", "30 23 * * *"] {
                let ticks = cron(text).ticks(from: at("2026-01-01T00:00:00Z"), to: at("2027-01-01T00:00:00Z"), in: zone)
                XCTAssertEqual(ticks.count, 365, "\(text) \(zone.identifier)")
                // Local day numbers of consecutive ticks differ by exactly one: no day missed, none doubled.
                let days = ticks.map { tick -> Int in
                    let instant = Int(tick.timeIntervalSince1970)
                    return (instant + zone.secondsFromGMT(for: tick)) / 86_400
                }
                for (a, b) in zip(days, days.dropFirst()) where b - a != 1 {
                    XCTFail("\(text) \(zone.identifier): local days \(a) then \(b)")
                }
            }
        }
    }

    func testDenseAndRareSearchesAnswer() {
        // A per-second expression over an hour, and one that matches once in decades (how long they take is
        // measured nowhere here: the answers are what the test checks).
        let dense = cron("* * * * * *").ticks(from: at("2026-11-22T00:00:00Z"), to: at("2026-11-22T01:00:00Z"), in: berlin)
        XCTAssertEqual(dense.count, 3600)
        // The next February with five Mondays is 2044 (29 February, midnight in Berlin = 23:00 UTC the day before).
        XCTAssertEqual(cron("0 0 * 2 mon#5").next(after: at("2026-01-01T00:00:00Z"), in: berlin).map(utc),
                       "2044-02-28T23:00:00Z")
    }
}
