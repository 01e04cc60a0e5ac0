import Foundation
import WorkersQueue
@testable import WorkersScheduler
import WorkersTestServices
import XCTest

/// The loop against Redis with controlled clocks: restarts, catch-up from the persisted cursor,
/// status reloads, the nightly aggregation's backfill, the loop thread. Database 12.
final class SchedulerRunnerTests: XCTestCase {
    var redis: TestRedis!
    let start = at("2026-03-01T00:00:00Z")

    override func setUpWithError() throws { redis = try TestRedis(database: 12) }

    private func runner(_ entries: [ScheduleEntry], clock: ManualClock, maxSleep: TimeInterval = 1) throws -> SchedulerRunner {
        SchedulerRunner(entries: entries, store: CronStore(connection: try redis.connection()), clock: clock, maxSleep: maxSleep)
    }

    /// Walks `runner` one round per minute over `minutes` (offset `second` s into each minute).
    @discardableResult
    private func walk(_ runner: SchedulerRunner, _ clock: ManualClock, minutes: ClosedRange<Int>, second: Double = 5) throws -> [TickResult] {
        var results: [TickResult] = []
        for minute in minutes {
            clock.set(start.addingTimeInterval(Double(minute) * 60 + second))
            results += try runner.runRound().results
        }
        return results
    }

    /// The tick (minutes from `start`) of each job in `queue`, oldest first.
    private func firedMinutes(queue: String = "cron") throws -> [Int] {
        try redis.queued(queue).compactMap { job -> Int? in
            guard let text = job.fields["args"]?.arrayValue?.last?.objectValue?["time"]?.stringValue else { return nil }
            let tick = ISO8601DateFormatter().date(from: text)!
            return Int(tick.timeIntervalSince(start) / 60)
        }
    }

    // MARK: Restart in the middle of a walk

    /// Scheduler A dies after minute 200; B starts at minute 260 from the cursor A left in Redis.
    func testRestartWithCatchUpAllNeitherSkipsNorDoublesATick() throws {
        let entry = try cronEntry("restart.all", "* * * * *", catchUp: .all(within: 7 * 86_400), tick: .time)
        let clockA = ManualClock(start)
        let a = try runner([entry], clock: clockA)
        try a.sync()
        try walk(a, clockA, minutes: 0...200)
        // A is gone (its connection and state with it). B is a fresh process.
        let clockB = ManualClock(start)
        let b = try runner([entry], clock: clockB)
        try b.sync()
        let first = try walk(b, clockB, minutes: 260...260)
        XCTAssertEqual(first.compactMap { $0.outcome.jid == nil ? nil : Int($0.tick.timeIntervalSince(start) / 60) },
                       Array(201...260), "the first round after the restart backfills the downtime, oldest first")
        try walk(b, clockB, minutes: 261...499)
        XCTAssertEqual(try firedMinutes(), Array(0...499))
    }

    /// With `latest`, the downtime folds into one fire of its most recent tick; with `skip`, ticks
    /// older than the 60 s grace are lost.
    func testRestartWithLatestAndSkipPolicies() throws {
        let latest = try cronEntry("restart.latest", "*/10 * * * *", catchUp: .latest, tick: .time, queue: "latest")
        let skip = try cronEntry("restart.skip", "*/10 * * * *", catchUp: .skip, tick: .time, queue: "skip")
        let clockA = ManualClock(start)
        let a = try runner([latest, skip], clock: clockA)
        try a.sync()
        try walk(a, clockA, minutes: 0...100)
        let clockB = ManualClock(start)
        let b = try runner([latest, skip], clock: clockB)
        try b.sync()
        // B's first round is at minute 165: tick 160 is five minutes old.
        try walk(b, clockB, minutes: 165...200)

        let before = Array(stride(from: 0, through: 100, by: 10))
        XCTAssertEqual(try firedMinutes(queue: "latest"), before + [160, 170, 180, 190, 200],
                       "latest: 110...150 folded into one fire of 160")
        XCTAssertEqual(try firedMinutes(queue: "skip"), before + [170, 180, 190, 200], "skip: 110...160 lost")
    }

    func testSkipLosesTicksOlderThanTheGrace() throws {
        let skip = try cronEntry("skip.grace", "*/10 * * * *", catchUp: .skip, tick: .time)
        let clock = ManualClock(start)
        let r = try runner([skip], clock: clock)
        try r.sync()
        try walk(r, clock, minutes: 0...0)
        try walk(r, clock, minutes: 11...11)   // tick 10 is 65 s old: lost
        try walk(r, clock, minutes: 20...20)
        XCTAssertEqual(try firedMinutes(), [0, 20])
    }

    // MARK: The nightly aggregation (config/schedule.yaml)

    func testNightlyAggregationBackfillsMissedDaysWithTheirOwnDates() throws {
        let file = try ScheduleFile.load(path: TestServices.repositoryRoot.appendingPathComponent("config/schedule.yaml").path)
        let nightly = try XCTUnwrap(file.entry(named: "ad_revenue_aggregation.nightly"))
        let clock = ManualClock(at("2026-05-10T00:15:20Z"))
        let r = SchedulerRunner(entries: [nightly], store: CronStore(connection: try redis.connection()), clock: clock)
        try r.sync()
        XCTAssertEqual(try r.runRound().fired.count, 1)

        // Down from 05-10 00:20 to 05-14 09:00: the ticks of 05-11 ... 05-14 fire on restart, each
        // with the day before its own tick.
        clock.set(at("2026-05-14T09:00:00Z"))
        XCTAssertEqual(try r.runRound().fired.map { utc($0.tick) },
                       ["2026-05-11T00:15:00Z", "2026-05-12T00:15:00Z", "2026-05-13T00:15:00Z", "2026-05-14T00:15:00Z"])
        XCTAssertEqual(try r.runRound().fired.count, 0, "nothing twice")

        // Down for ten days: only the ticks within the 7-day window.
        clock.set(at("2026-05-24T12:00:00Z"))
        let backfilled = try r.runRound().fired.map { utc($0.tick) }
        XCTAssertEqual(backfilled.first, "2026-05-18T00:15:00Z")
        XCTAssertEqual(backfilled.last, "2026-05-24T00:15:00Z")
        XCTAssertEqual(backfilled.count, 7)

        let dates = try redis.queued("default").map { job in
            job.fields["args"]?.arrayValue?.last?.objectValue?["date"]?.stringValue ?? "?"
        }
        XCTAssertEqual(dates, ["2026-05-09", "2026-05-10", "2026-05-11", "2026-05-12", "2026-05-13",
                               "2026-05-17", "2026-05-18", "2026-05-19", "2026-05-20", "2026-05-21", "2026-05-22", "2026-05-23"])
        XCTAssertTrue(try redis.queued("default").allSatisfy { $0.fields["class"] == "AdRevenueNightlyJob" })
    }

    // MARK: Status and definitions from Redis

    func testDisableIsSeenNextRoundAndDisabledTicksAreNotCaughtUp() throws {
        let entry = try cronEntry("toggle", "* * * * *", catchUp: .all(within: 86_400), tick: .time)
        let clock = ManualClock(start)
        let r = try runner([entry], clock: clock)
        try r.sync()
        try walk(r, clock, minutes: 0...9)
        let operatorStore = CronStore(connection: try redis.connection())
        try operatorStore.setStatus(name: "toggle", .disabled, now: start.addingTimeInterval(9 * 60 + 30))
        try walk(r, clock, minutes: 10...19)
        try operatorStore.setStatus(name: "toggle", .enabled, now: start.addingTimeInterval(19 * 60 + 30))
        try walk(r, clock, minutes: 20...24)
        XCTAssertEqual(try firedMinutes(), Array(0...9) + Array(20...24),
                       "ticks 10...19 passed while disabled: not caught up after enable, whatever the policy")
    }

    func testEntryDisabledInTheFileButEnabledByAnOperatorFires() throws {
        let entry = try cronEntry("off", "* * * * *", tick: .time, enabled: false)
        let clock = ManualClock(start)
        let r = try runner([entry], clock: clock)
        try r.sync()
        try walk(r, clock, minutes: 0...2)
        XCTAssertEqual(try firedMinutes(), [])
        try CronStore(connection: try redis.connection()).setStatus(name: "off", .enabled, now: start.addingTimeInterval(150))
        try walk(r, clock, minutes: 3...4)
        XCTAssertEqual(try firedMinutes(), [3, 4])
    }

    func testEntryRemovedByANewerScheduleFileStopsFiringInOldSchedulers() throws {
        let old = try cronEntry("retired", "* * * * *", tick: .time)
        let kept = try cronEntry("kept", "* * * * *", tick: .time, queue: "kept")
        let clock = ManualClock(start)
        let oldRunner = try runner([old, kept], clock: clock)
        try oldRunner.sync()
        try walk(oldRunner, clock, minutes: 0...1)
        // A scheduler with the new file starts (its sync removes `retired`).
        try runner([kept], clock: ManualClock(start)).sync()
        clock.set(start.addingTimeInterval(2 * 60 + 5))
        let report = try oldRunner.runRound()
        XCTAssertEqual(report.missing, ["retired"])
        XCTAssertEqual(report.fired.map(\.entry), ["kept"])
        XCTAssertEqual(try firedMinutes(), [0, 1])
        XCTAssertEqual(try redis.int("EXISTS", "cron_job:retired"), 0, "not re-created by a fire")
    }

    func testOneBrokenEntryDoesNotStopTheOthers() throws {
        let broken = try cronEntry("a.broken", "* * * * *", tick: .time, queue: "broken")
        let healthy = try cronEntry("b.healthy", "* * * * *", tick: .time)
        let clock = ManualClock(start)
        let r = try runner([broken, healthy], clock: clock)
        try r.sync()
        try redis.command("SET", "cron_job:a.broken:enqueued", "wrong type")
        var reports: [RoundReport] = []
        for minute in 0...2 {
            clock.set(start.addingTimeInterval(Double(minute) * 60 + 5))
            reports.append(try r.runRound())
        }
        XCTAssertEqual(reports.map { $0.failures.keys.sorted() }, [["a.broken"], ["a.broken"], ["a.broken"]])
        XCTAssertEqual(try firedMinutes(), [0, 1, 2], "the healthy entry fired every tick")
        XCTAssertEqual(try redis.int("LLEN", "queue:broken"), 0)
        try redis.command("DEL", "cron_job:a.broken:enqueued")
        clock.set(start.addingTimeInterval(3 * 60 + 5))
        XCTAssertEqual(try r.runRound().fired.map(\.entry), ["a.broken", "b.healthy"])
    }

    // MARK: The loop on its own thread

    func testLoopThreadFiresAsTheClockMovesAndStops() throws {
        let entry = try cronEntry("loop", "* * * * *", catchUp: .all(within: 3600), tick: .time)
        let clock = ManualClock(start.addingTimeInterval(1))
        let r = try runner([entry], clock: clock, maxSleep: 0.01)
        try r.sync()
        r.start()
        defer { r.stop(); r.waitUntilStopped(timeout: 30) }
        XCTAssertTrue(try eventually { try redis.int("LLEN", "queue:cron") == 1 })
        for minute in 1...5 {
            clock.set(start.addingTimeInterval(Double(minute) * 60 + 1))
            XCTAssertTrue(try eventually { try redis.int("LLEN", "queue:cron") == minute + 1 }, "minute \(minute)")
        }
        clock.set(start.addingTimeInterval(10 * 60 + 1))  // a jump: 6...10 caught up
        XCTAssertTrue(try eventually { try redis.int("LLEN", "queue:cron") == 11 })
        r.stop()
        XCTAssertTrue(r.waitUntilStopped(timeout: 30), "the loop returns after stop()")
        XCTAssertEqual(try firedMinutes(), Array(0...10))
    }

    func testLoopSurvivesARedisErrorAndContinuesFromTheCursor() throws {
        let entry = try cronEntry("flaky", "* * * * *", catchUp: .all(within: 3600), tick: .time)
        let clock = ManualClock(start.addingTimeInterval(1))
        let r = try runner([entry], clock: clock, maxSleep: 0.01)
        try r.sync()
        try redis.command("SET", "cron_job:flaky:jid_history", "wrong type")  // every fire fails
        r.start()
        defer { r.stop(); r.waitUntilStopped(timeout: 30) }
        clock.set(start.addingTimeInterval(3 * 60 + 1))
        Thread.sleep(forTimeInterval: 0.2)  // let a few rounds fail (no assertion on timing)
        XCTAssertEqual(try redis.int("LLEN", "queue:cron"), 0)
        try redis.command("DEL", "cron_job:flaky:jid_history")
        // The first fire that succeeds is at minute 3 with the cursor still unset ⇒ only the current tick.
        XCTAssertTrue(try eventually { try redis.int("LLEN", "queue:cron") == 1 })
        clock.set(start.addingTimeInterval(6 * 60 + 1))
        XCTAssertTrue(try eventually { try redis.int("LLEN", "queue:cron") == 4 })
        XCTAssertEqual(try firedMinutes(), [3, 4, 5, 6])
    }
}
