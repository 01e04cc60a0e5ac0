import Foundation
import WorkersQueue
@testable import WorkersScheduler
import WorkersTestServices
import XCTest

/// `workerctl cron run NAME --tick T` and `CronStore.backfill`: a past tick fired by hand exactly
/// once, with the scheduler's jid, claim and tick argument. Database 53.
final class CronBackfillTests: XCTestCase {
    var redis: TestRedis!
    var cli: WorkerctlRunner!

    override func setUpWithError() throws {
        redis = try TestRedis(database: 53)
        cli = WorkerctlRunner(redisURL: redis.url)
    }

    /// `nightly`: 00:15 Berlin, `pass_tick: date_minus_1`, args ["x"].
    private func nightly() throws -> ScheduleEntry {
        try cronEntry("nightly", "15 0 * * *", catchUp: .skip, tick: .date(daysBefore: 1), zone: berlin, args: ["x"])
    }

    private func store() throws -> CronStore {
        let store = CronStore(connection: try redis.connection())
        try store.sync([try nightly()])
        return store
    }

    /// The most recent 00:15 Berlin tick at least an hour ago (within the 24 h claim record).
    private func recentTick() throws -> Date {
        try XCTUnwrap(try nightly().previousTick(atOrBefore: Date().addingTimeInterval(-3600)))
    }

    func testBackfillUsesTheSchedulersJidClaimAndTickArgument() throws {
        let store = try store()
        // 2026-11-20T00:15 Berlin = 2026-11-19T23:15Z; date_minus_1 ⇒ 2026-11-19.
        let tick = at("2026-11-19T23:15:00Z")
        let now = tick.addingTimeInterval(3600)
        XCTAssertEqual(try store.backfill(name: "nightly", tick: tick, now: now),
                       .fired(jid: CronJobID.jid(entry: "nightly", tick: tick)))
        let job = try XCTUnwrap(try redis.queued().first)
        XCTAssertEqual(job.fields["jid"], .string(CronJobID.jid(entry: "nightly", tick: tick)))
        XCTAssertEqual(job.fields["class"], "CronProbe")
        XCTAssertEqual(job.fields["args"], ["x", .object(["date": "2026-11-19"])])
        XCTAssertEqual(try nightly().arguments(forTick: tick), job.fields["args"]?.arrayValue, "what the scheduler would pass")
        XCTAssertEqual(try redis.command("ZSCORE", "cron_job:nightly:enqueued", "2026-11-19T23:15:00Z").string,
                       String(Int(tick.timeIntervalSince1970)), "the scheduler's claim")
        XCTAssertNil(try redis.hashField("cron_job:nightly", "last_tick"), "the cursor does not move")
        let history = try store.history(name: "nightly")
        XCTAssertEqual(history.first?.tick, "2026-11-19T23:15:00Z")
        XCTAssertEqual(history.first?.backfill, true)

        // A scheduler reaching the same tick afterwards finds the claim: nothing enqueued twice.
        XCTAssertEqual(try store.fire(try nightly(), tick: tick, now: now), .taken)
        XCTAssertEqual(try redis.int("LLEN", "queue:cron"), 1)
        // And a second backfill too.
        XCTAssertEqual(try store.backfill(name: "nightly", tick: tick, now: now), .alreadyFired(jid: CronJobID.jid(entry: "nightly", tick: tick)))
        XCTAssertEqual(try redis.int("LLEN", "queue:cron"), 1)
    }

    func testBackfillOfATickTheSchedulerFiredEnqueuesNothing() throws {
        let store = try store()
        let tick = at("2026-11-19T23:15:00Z")
        XCTAssertEqual(try store.fire(try nightly(), tick: tick, now: tick), .fired(jid: CronJobID.jid(entry: "nightly", tick: tick)))
        XCTAssertEqual(try store.backfill(name: "nightly", tick: tick, now: tick.addingTimeInterval(3600)),
                       .alreadyFired(jid: CronJobID.jid(entry: "nightly", tick: tick)))
        XCTAssertEqual(try redis.int("LLEN", "queue:cron"), 1)
    }

    /// A tick the scheduler passed over (`skip` during an outage: behind the cursor, never claimed) fires.
    func testBackfillOfAMissedTickBehindTheCursorFires() throws {
        let store = CronStore(connection: try redis.connection())
        let hourly = try cronEntry("hourly", "15 * * * *", catchUp: .skip, tick: .time)
        try store.sync([hourly])
        let missed = at("2026-11-19T21:15:00Z"), fired = at("2026-11-19T23:15:00Z")
        XCTAssertEqual(try store.fire(hourly, tick: fired, now: fired), .fired(jid: CronJobID.jid(entry: "hourly", tick: fired)))
        XCTAssertEqual(try store.backfill(name: "hourly", tick: missed, now: fired.addingTimeInterval(60)),
                       .fired(jid: CronJobID.jid(entry: "hourly", tick: missed)))
        XCTAssertEqual(try redis.hashField("cron_job:hourly", "last_tick"), "2026-11-19T23:15:00Z", "cursor unchanged")
        XCTAssertEqual(try redis.queued().last?.fields["args"], [.object(["time": "2026-11-19T21:15:00Z"])])
        XCTAssertEqual(try store.backfill(name: "hourly", tick: missed, now: fired.addingTimeInterval(120)),
                       .alreadyFired(jid: CronJobID.jid(entry: "hourly", tick: missed)))
        XCTAssertEqual(try redis.int("LLEN", "queue:cron"), 2)
    }

    /// A backfilled tick after the cursor keeps its claim however old it gets, so a catching-up
    /// scheduler never fires it again (the fire's pruning stops at the tick it fired).
    func testClaimOfABackfilledTickAfterTheCursorOutlivesTheRetention() throws {
        let store = try store()
        let catchUp = try cronEntry("nightly", "15 0 * * *", catchUp: .all(within: 7 * 86_400), tick: .date(daysBefore: 1),
                                    zone: berlin, args: ["x"])
        try store.sync([catchUp])
        let early = at("2026-11-15T23:15:00Z"), backfilled = at("2026-11-17T23:15:00Z")
        XCTAssertEqual(try store.fire(catchUp, tick: early, now: early), .fired(jid: CronJobID.jid(entry: "nightly", tick: early)))
        XCTAssertEqual(try store.backfill(name: "nightly", tick: backfilled, now: backfilled.addingTimeInterval(60)),
                       .fired(jid: CronJobID.jid(entry: "nightly", tick: backfilled)))
        // Three days later a scheduler catches up: the 16th fires (pruning claims older than 24 h, but
        // not the 17th's, which is after the cursor), then the 17th is found taken.
        let later = at("2026-11-20T23:20:00Z")
        let sixteenth = at("2026-11-16T23:15:00Z")
        XCTAssertEqual(try store.fire(catchUp, tick: sixteenth, now: later), .fired(jid: CronJobID.jid(entry: "nightly", tick: sixteenth)))
        XCTAssertEqual(try store.fire(catchUp, tick: backfilled, now: later), .taken)
        XCTAssertEqual(try redis.int("LLEN", "queue:cron"), 3, "early, backfilled, sixteenth: each once")
    }

    func testBackfillRefusesWhatItCannotFireExactlyOnce() throws {
        let store = try store()
        let now = at("2026-11-25T12:00:00Z")
        // Not a tick: 00:15 UTC is 01:15 Berlin.
        XCTAssertThrowsError(try store.backfill(name: "nightly", tick: at("2026-11-20T00:15:00Z"), now: now)) { error in
            guard case CronBackfillError.notATick(_, _, _, _, let previous, let next)? = error as? CronBackfillError else {
                return XCTFail("expected notATick, got \(error)")
            }
            XCTAssertEqual(previous, "2026-11-19T23:15:00Z")
            XCTAssertEqual(next, "2026-11-20T23:15:00Z")
        }
        XCTAssertThrowsError(try store.backfill(name: "nightly", tick: at("2026-11-26T23:15:00Z"), now: now)) { error in
            XCTAssertEqual(error as? CronBackfillError, .future(entry: "nightly", tick: "2026-11-26T23:15:00Z"))
        }
        // At or before the cursor and older than the 24 h claim record: unknowable, refused.
        let cursor = at("2026-11-24T23:15:00Z")
        XCTAssertEqual(try store.fire(try nightly(), tick: cursor, now: cursor), .fired(jid: CronJobID.jid(entry: "nightly", tick: cursor)))
        XCTAssertThrowsError(try store.backfill(name: "nightly", tick: at("2026-11-19T23:15:00Z"), now: now)) { error in
            XCTAssertEqual(error as? CronBackfillError, .forgotten(entry: "nightly", tick: "2026-11-19T23:15:00Z",
                                                                   lastTick: "2026-11-24T23:15:00Z", retentionHours: 24))
        }
        XCTAssertThrowsError(try store.backfill(name: "nope", tick: cursor, now: now)) { error in
            XCTAssertEqual(error as? CronStoreError, .notFound("nope"))
        }
        XCTAssertEqual(try redis.int("LLEN", "queue:cron"), 1, "only the scheduler's fire")
    }

    // MARK: workerctl cron run --tick

    func testCLIFiresATickOnceAndTheSecondRunSaysSo() throws {
        _ = try store()
        let tick = try recentTick()
        let text = TickFormat.iso8601UTC(tick)
        let first = try cli.run("cron", "run", "nightly", "--tick", text)
        XCTAssertEqual(first.status, 0, first.stderr)
        let jid = CronJobID.jid(entry: "nightly", tick: tick)
        XCTAssertEqual(first.stdout.trimmingCharacters(in: .whitespacesAndNewlines), "enqueued nightly tick \(text) as \(jid)")
        let second = try cli.run("cron", "run", "nightly", "--tick", text)
        XCTAssertEqual(second.status, 0, second.stderr)
        XCTAssertTrue(second.stdout.contains("was already fired"), second.stdout)
        XCTAssertEqual(try redis.queued().map { $0.fields["jid"] }, [.string(jid)], "enqueued once")
        let history = try cli.run("cron", "history", "nightly", "--json")
        let item = try XCTUnwrap(history.object?["history"]?.arrayValue?.first?.objectValue)
        XCTAssertEqual(item["backfill"], true)
        XCTAssertEqual(item["tick"], .string(text))
    }

    func testCLIAcceptsAnOffsetAndRefusesWhatIsNotATickWithExitTwo() throws {
        _ = try store()
        let tick = try recentTick()
        // The same instant written in Berlin's offset.
        let formatter = ISO8601DateFormatter()
        formatter.timeZone = berlin
        formatter.formatOptions = [.withInternetDateTime]
        let local = formatter.string(from: tick)
        XCTAssertFalse(local.hasSuffix("Z"), local)
        let run = try cli.run("cron", "run", "nightly", "--tick", local)
        XCTAssertEqual(run.status, 0, run.stderr)
        XCTAssertEqual(try redis.queued().first?.fields["jid"], .string(CronJobID.jid(entry: "nightly", tick: tick)))

        for (tickText, expected) in [(TickFormat.iso8601UTC(tick.addingTimeInterval(60)), "is not a tick of 'nightly'"),
                                     ("2026-11-20 00:15", "is not an ISO-8601 time"),
                                     (TickFormat.iso8601UTC(try XCTUnwrap(try nightly().nextTick(after: Date()))), "is in the future")] {
            let refused = try cli.run("cron", "run", "nightly", "--tick", tickText)
            XCTAssertEqual(refused.status, 2, "\(tickText): \(refused.stderr)")
            XCTAssertTrue(refused.stderr.contains(expected), refused.stderr)
            XCTAssertEqual(refused.stderr.trimmingCharacters(in: .whitespacesAndNewlines).split(separator: "\n").count, 1,
                           "one line: \(refused.stderr)")
        }
        let missing = try cli.run("cron", "run", "nope", "--tick", TickFormat.iso8601UTC(tick))
        XCTAssertEqual(missing.status, 1, missing.stderr)
        XCTAssertEqual(try redis.int("LLEN", "queue:cron"), 1, "nothing enqueued by refused runs")
    }
}
