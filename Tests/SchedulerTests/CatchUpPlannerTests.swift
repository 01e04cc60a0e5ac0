import Foundation
import WorkersQueue
import XCTest
@testable import WorkersScheduler

final class CatchUpPlannerTests: XCTestCase {
    let planner = CatchUpPlanner()  // grace 60 s, at most 1000 ticks

    func entry(_ cron: String, _ catchUp: CatchUpPolicy, zone: TimeZone = utcZone, enabled: Bool = true) -> ScheduleEntry {
        try! ScheduleEntry(name: "e", cron: CronExpression(cron), className: "E", timeZone: zone, enabled: enabled, catchUp: catchUp)
    }

    func due(_ entry: ScheduleEntry, last: String?, now: String) -> [String] {
        planner.dueTicks(entry: entry, lastFired: last.map { at($0) }, now: at(now)).map(utc)
    }

    // MARK: On time (every policy)

    func testOnTimeTickFiresForEveryPolicy() {
        for policy in [CatchUpPolicy.skip, .latest, .all()] {
            let e = entry("*/15 * * * *", policy)
            XCTAssertEqual(due(e, last: "2026-11-22T09:45:00Z", now: "2026-11-22T10:00:20Z"), ["2026-11-22T10:00:00Z"], "\(policy)")
            // Already fired: nothing, however often the runner asks.
            XCTAssertEqual(due(e, last: "2026-11-22T10:00:00Z", now: "2026-11-22T10:00:40Z"), [], "\(policy)")
            XCTAssertEqual(due(e, last: "2026-11-22T10:00:00Z", now: "2026-11-22T10:14:59Z"), [], "\(policy)")
        }
    }

    func testDisabledEntryNeverFires() {
        let e = entry("* * * * *", .all(), enabled: false)
        XCTAssertEqual(due(e, last: "2026-11-22T09:00:00Z", now: "2026-11-22T10:00:00Z"), [])
        XCTAssertEqual(due(e, last: nil, now: "2026-11-22T10:00:00Z"), [])
    }

    // MARK: First run

    func testFirstRunFiresOnlyAnOnTimeCurrentTick() {
        for policy in [CatchUpPolicy.skip, .latest, .all(within: 7 * 86_400)] {
            let e = entry("15 0 * * *", policy)
            XCTAssertEqual(due(e, last: nil, now: "2026-11-22T00:15:59Z"), ["2026-11-22T00:15:00Z"], "\(policy)")
            XCTAssertEqual(due(e, last: nil, now: "2026-11-22T00:16:01Z"), [], "\(policy)")
            XCTAssertEqual(due(e, last: nil, now: "2026-11-22T07:00:00Z"), [], "\(policy)")
        }
    }

    // MARK: skip

    func testSkipLosesTicksOlderThanGrace() {
        let e = entry("*/15 * * * *", .skip)
        XCTAssertEqual(due(e, last: "2026-11-22T09:45:00Z", now: "2026-11-22T10:01:00Z"), ["2026-11-22T10:00:00Z"])  // exactly 60 s
        XCTAssertEqual(due(e, last: "2026-11-22T09:45:00Z", now: "2026-11-22T10:01:01Z"), [])
        XCTAssertEqual(due(e, last: "2026-11-22T06:00:00Z", now: "2026-11-22T10:07:00Z"), [])  // outage: nothing replayed
        let strict = CatchUpPlanner(grace: 5)
        XCTAssertEqual(strict.dueTicks(entry: e, lastFired: nil, now: at("2026-11-22T10:00:06Z")), [])
    }

    // MARK: latest

    func testLatestFiresTheMostRecentMissedTickOnce() {
        let e = entry("*/15 * * * *", .latest)
        // Down from 06:10 to 10:07: one fire, for the 10:00 tick.
        XCTAssertEqual(due(e, last: "2026-11-22T06:00:00Z", now: "2026-11-22T10:07:00Z"), ["2026-11-22T10:00:00Z"])
        // Daily entry, down for three days: one fire, for the most recent tick.
        let daily = entry("30 3 * * *", .latest)
        XCTAssertEqual(due(daily, last: "2026-11-18T03:30:00Z", now: "2026-11-22T09:00:00Z"), ["2026-11-22T03:30:00Z"])
        XCTAssertEqual(due(daily, last: "2026-11-22T03:30:00Z", now: "2026-11-22T09:00:00Z"), [])
    }

    func testLatestWithWindow() {
        let e = entry("30 3 * * *", .latest(within: 6 * 3600))
        XCTAssertEqual(due(e, last: "2026-11-20T03:30:00Z", now: "2026-11-22T09:30:00Z"), ["2026-11-22T03:30:00Z"])  // 6 h old
        XCTAssertEqual(due(e, last: "2026-11-20T03:30:00Z", now: "2026-11-22T09:30:01Z"), [])
    }

    // MARK: all

    func testAllReplaysEveryMissedTickInOrder() {
        let e = entry("15 0 * * *", .all(within: 7 * 86_400))
        XCTAssertEqual(due(e, last: "2026-11-18T00:15:00Z", now: "2026-11-22T07:00:00Z"),
                       ["2026-11-19T00:15:00Z", "2026-11-20T00:15:00Z", "2026-11-21T00:15:00Z", "2026-11-22T00:15:00Z"])
    }

    func testAllStopsAtTheWindow() {
        let e = entry("15 0 * * *", .all(within: 7 * 86_400))
        // Last fired a month ago: only ticks at most 7 days old (the boundary is inclusive).
        XCTAssertEqual(due(e, last: "2026-10-22T00:15:00Z", now: "2026-11-22T00:15:00Z"),
                       (15...22).map { "2026-11-\($0)T00:15:00Z" })
        // The default window for `all` is 24 h.
        let hourly = entry("0 * * * *", .all())
        XCTAssertEqual(due(hourly, last: "2026-11-01T00:00:00Z", now: "2026-11-22T10:30:00Z").count, 24)
        XCTAssertEqual(due(hourly, last: "2026-11-01T00:00:00Z", now: "2026-11-22T10:30:00Z").first, "2026-11-21T11:00:00Z")
    }

    func testAllIsCappedToTheMostRecentTicks() {
        let e = entry("* * * * * *", .all(within: 86_400))
        let capped = CatchUpPlanner(grace: 60, maxTicks: 10)
        let ticks = capped.dueTicks(entry: e, lastFired: at("2026-11-22T00:00:00Z"), now: at("2026-11-22T10:00:00Z"))
        XCTAssertEqual(ticks.count, 10)
        XCTAssertEqual(utc(ticks.first), "2026-11-22T09:59:51Z")
        XCTAssertEqual(utc(ticks.last), "2026-11-22T10:00:00Z")
    }

    func testAllAcrossSpringForwardInBerlin() {
        // A nightly 02:30 Berlin entry down over the DST weekend: one tick per local day, the Sunday one at 03:00 CEST.
        let e = entry("30 2 * * *", .all(within: 7 * 86_400), zone: berlin)
        XCTAssertEqual(due(e, last: "2026-03-27T01:30:00Z", now: "2026-03-30T08:00:00Z"),
                       ["2026-03-28T01:30:00Z", "2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"])
    }

    func testAllAcrossFallBackInNewYork() {
        // Hourly at :30 keeps its two 01:30s on the fall-back day (periodic hour field).
        let e = entry("30 * * * *", .all(within: 86_400), zone: newYork)
        XCTAssertEqual(due(e, last: "2026-11-01T04:30:00Z", now: "2026-11-01T07:45:00Z"),
                       ["2026-11-01T05:30:00Z", "2026-11-01T06:30:00Z", "2026-11-01T07:30:00Z"])
    }

    // MARK: Runner shape with a controlled clock

    func testRunnerLoopWithManualClockFiresEachTickOnce() throws {
        let file = try ScheduleFile.parse(yaml: """
            - {name: nightly, cron: "15 0 * * *", class: AdRevenueAggregationJob, catch_up: all, catch_up_window: 7d, pass_tick: date_minus_1}
            - {name: sweep, cron: "*/10 * * * *", class: PendingRewardSweepJob, catch_up: latest}
            """)
        let clock = ManualClock(at("2026-11-22T00:00:30Z"))
        var lastFired: [String: Date] = [:]
        var claimed: Set<String> = []  // stands for the Redis ZADD claim
        var enqueued: [String] = []
        func round() {
            for entry in file.entries {
                for tick in planner.dueTicks(entry: entry, lastFired: lastFired[entry.name], clock: clock) {
                    guard claimed.insert("\(entry.name)@\(utc(tick))").inserted else { continue }
                    lastFired[entry.name] = tick
                    enqueued.append("\(entry.name) \(JSONValue.array(entry.arguments(forTick: tick)).serialized())")
                }
            }
        }
        round()  // first run: the sweep's 00:00 tick is 30 s old, the nightly has no tick within grace
        XCTAssertEqual(enqueued, ["sweep []"])
        clock.advance(by: 20)
        round()
        XCTAssertEqual(enqueued.count, 1)
        clock.set(at("2026-11-22T00:15:10Z"))
        round()
        // Entries in file order: the nightly's 00:15 tick, then the sweep's 00:10 tick (latest, 5 min late).
        XCTAssertEqual(enqueued.suffix(2), [#"nightly [{"date":"2026-11-21"}]"#, "sweep []"])
        // Down for two and a half days: the nightly backfills each day with its own date, the sweep fires once.
        clock.set(at("2026-11-24T12:03:00Z"))
        round()
        XCTAssertEqual(enqueued.suffix(3), [#"nightly [{"date":"2026-11-22"}]"#, #"nightly [{"date":"2026-11-23"}]"#, "sweep []"])
        let count = enqueued.count
        round()
        XCTAssertEqual(enqueued.count, count)
    }
}
