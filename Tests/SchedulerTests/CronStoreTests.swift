import Foundation
import WorkersQueue
@testable import WorkersScheduler
import WorkersTestServices
import XCTest

/// The Redis layer: sidekiq-cron's layout, the atomic fire script, operator actions. Database 10.
final class CronStoreTests: XCTestCase {
    var redis: TestRedis!
    var store: CronStore!

    override func setUpWithError() throws {
        redis = try TestRedis(database: 10)
        store = CronStore(connection: try redis.connection(), historySize: 3)
    }

    // MARK: Sync

    func testSyncWritesSidekiqCronLayout() throws {
        let nightly = try cronEntry("nightly", "15 0 * * *", catchUp: .all(within: 7 * 86_400), tick: .date(daysBefore: 1),
                                    zone: berlin, args: ["x", 2])
        let report = try store.sync([nightly, try cronEntry("sweep", "*/15 * * * *", enabled: false)])
        XCTAssertEqual(report.created, ["nightly", "sweep"])

        XCTAssertEqual(Set(try redis.command("SMEMBERS", "cron_jobs").strings), ["cron_job:nightly", "cron_job:sweep"])
        let fields = CronStore.hash(try redis.command("HGETALL", "cron_job:nightly"))
        XCTAssertEqual(fields["name"], "nightly")
        XCTAssertEqual(fields["klass"], "CronProbe")
        XCTAssertEqual(fields["cron"], "15 0 * * * Europe/Berlin")  // fugit reads the trailing zone
        XCTAssertEqual(fields["args"], #"["x",2]"#)
        XCTAssertEqual(fields["message"], #"{"queue":"cron","class":"CronProbe","args":["x",2]}"#)
        XCTAssertEqual(fields["status"], "enabled")
        XCTAssertEqual(fields["date_as_argument"], "false")
        XCTAssertEqual(fields["active_job"], "false")
        XCTAssertEqual(fields["last_enqueue_time"], "")
        XCTAssertEqual(fields["timezone"], "Europe/Berlin")
        XCTAssertEqual(fields["catch_up"], "all within 7d")
        XCTAssertEqual(fields["pass_tick"], "date_minus_1")
        XCTAssertEqual(fields["source"], "swift-scheduler")
        XCTAssertEqual(try redis.hashField("cron_job:sweep", "status"), "disabled", "enabled: false applies at creation")

        let record = try XCTUnwrap(try store.record(named: "nightly"))
        XCTAssertEqual(record.cron, "15 0 * * *")
        XCTAssertEqual(record.timezone, "Europe/Berlin")
        XCTAssertEqual(record.args, ["x", 2])
    }

    func testResyncKeepsOperatorStatusAndRemovesOnlyOurStaleEntries() throws {
        try store.sync([try cronEntry("a", "* * * * *"), try cronEntry("b", "* * * * *")])
        try store.setStatus(name: "a", .disabled, now: Date())
        // An entry written by another tool (sidekiq-cron's own loader): no `source`.
        try redis.command("SADD", "cron_jobs", "cron_job:ruby")
        try redis.command("HSET", "cron_job:ruby", "name", "ruby", "klass", "RubyJob", "cron", "0 * * * *", "status", "enabled")

        let report = try store.sync([try cronEntry("a", "*/5 * * * *")])
        XCTAssertEqual(report.updated, ["a"])
        XCTAssertEqual(report.removed, ["b"])
        XCTAssertEqual(try redis.hashField("cron_job:a", "status"), "disabled", "an operator's status survives a sync")
        XCTAssertEqual(try redis.hashField("cron_job:a", "cron"), "*/5 * * * *", "the definition is updated")
        XCTAssertEqual(try redis.int("EXISTS", "cron_job:b"), 0)
        XCTAssertEqual(Set(try redis.command("SMEMBERS", "cron_jobs").strings), ["cron_job:a", "cron_job:ruby"])
    }

    // MARK: Fire

    func testFireClaimsTickEnqueuesSidekiqJobAndRecordsEverything() throws {
        let entry = try cronEntry("daily", "15 0 * * *", tick: .date(daysBefore: 1), args: ["keep"])
        try store.sync([entry])
        let tick = at("2026-05-10T00:15:00Z"), now = at("2026-05-10T00:15:07Z")

        let outcome = try store.fire(entry, tick: tick, now: now)
        let expectedJID = CronJobID.jid(entry: "daily", tick: tick)
        XCTAssertEqual(outcome, .fired(jid: expectedJID))
        XCTAssertTrue(Identifiers.isValidJID(expectedJID))

        let jobs = try redis.queued()
        XCTAssertEqual(jobs.count, 1)
        let job = try XCTUnwrap(jobs.first)
        XCTAssertEqual(job.fields["class"], "CronProbe")
        XCTAssertEqual(job.fields["queue"], "cron")
        XCTAssertEqual(job.fields["retry"], true)
        XCTAssertEqual(job.fields["jid"], .string(expectedJID))
        XCTAssertEqual(job.fields["args"], ["keep", .object(["date": "2026-05-09"])])
        XCTAssertEqual(job.fields["created_at"]?.doubleValue, now.timeIntervalSince1970)
        XCTAssertEqual(job.fields["enqueued_at"]?.doubleValue, now.timeIntervalSince1970)
        XCTAssertEqual(try redis.command("SMEMBERS", "queues").strings, ["cron"])

        XCTAssertEqual(try redis.command("ZSCORE", "cron_job:daily:enqueued", "2026-05-10T00:15:00Z").integer,
                       Int64(tick.timeIntervalSince1970))
        XCTAssertEqual(try redis.hashField("cron_job:daily", "last_tick"), "2026-05-10T00:15:00Z")
        XCTAssertEqual(try redis.hashField("cron_job:daily", "last_enqueue_time"), "2026-05-10 00:15:07 +0000")
        let history = try store.history(name: "daily")
        XCTAssertEqual(history.map(\.jid), [expectedJID])
        XCTAssertEqual(history.first?.tick, "2026-05-10T00:15:00Z")
        XCTAssertEqual(history.first?.enqueued, "2026-05-10 00:15:07 +0000")

        // However often it is asked again, by this or another store: nothing more.
        XCTAssertEqual(try store.fire(entry, tick: tick, now: now), .stale)
        let other = CronStore(connection: try redis.connection())
        XCTAssertEqual(try other.fire(entry, tick: tick, now: now.addingTimeInterval(30)), .stale)
        XCTAssertEqual(try other.fire(entry, tick: tick.addingTimeInterval(-86_400), now: now), .stale, "never goes back")
        XCTAssertEqual(try redis.queued().count, 1)
    }

    func testTickClaimedInTheZsetByAnotherSchedulerIsNotFiredAgain() throws {
        let entry = try cronEntry("minutely", "* * * * *")
        try store.sync([entry])
        let tick = at("2026-05-10T08:00:00Z")
        // What sidekiq-cron's poller does before it enqueues (§12.4 step 4).
        try redis.command("ZADD", "cron_job:minutely:enqueued", "1778400000.0", "2026-05-10T08:00:00Z")

        XCTAssertEqual(try store.fire(entry, tick: tick, now: tick.addingTimeInterval(3)), .taken)
        XCTAssertEqual(try redis.queued().count, 0)
        XCTAssertEqual(try redis.hashField("cron_job:minutely", "last_tick"), "2026-05-10T08:00:00Z",
                       "the cursor moves up to the tick someone else fired")
        XCTAssertEqual(try store.fire(entry, tick: tick.addingTimeInterval(60), now: tick.addingTimeInterval(63)).jid,
                       CronJobID.jid(entry: "minutely", tick: tick.addingTimeInterval(60)))
    }

    func testFailingFireWritesNothingAndTheTickFiresLater() throws {
        let entry = try cronEntry("fragile", "* * * * *")
        try store.sync([entry])
        let tick = at("2026-05-10T08:00:00Z")
        // A key of the wrong type makes a write fail; the script checks before writing anything.
        try redis.command("SET", "cron_job:fragile:jid_history", "not a list")

        XCTAssertThrowsError(try store.fire(entry, tick: tick, now: tick)) { error in
            XCTAssertTrue("\(error)".contains("WRONGTYPE"), "\(error)")
        }
        XCTAssertEqual(try redis.int("LLEN", "queue:cron"), 0, "no job without its claim")
        XCTAssertEqual(try redis.int("EXISTS", "cron_job:fragile:enqueued"), 0, "no claim without its job")
        XCTAssertNil(try redis.hashField("cron_job:fragile", "last_tick"))

        try redis.command("DEL", "cron_job:fragile:jid_history")
        XCTAssertNotNil(try store.fire(entry, tick: tick, now: tick.addingTimeInterval(1)).jid)
        XCTAssertEqual(try redis.int("LLEN", "queue:cron"), 1)
    }

    func testDisabledAndMissingEntriesAreNotFired() throws {
        let entry = try cronEntry("paused", "* * * * *")
        try store.sync([entry])
        try store.setStatus(name: "paused", .disabled, now: Date())
        let tick = at("2026-05-10T08:00:00Z")
        XCTAssertEqual(try store.fire(entry, tick: tick, now: tick), .disabled)
        XCTAssertEqual(try store.fire(try cronEntry("ghost", "* * * * *"), tick: tick, now: tick), .missing)
        XCTAssertEqual(try redis.int("LLEN", "queue:cron"), 0)
        XCTAssertEqual(try redis.int("EXISTS", "cron_job:ghost"), 0, "a missing entry is not created by a fire")
    }

    func testHistoryKeepsTheNewestFires() throws {
        let entry = try cronEntry("often", "* * * * *")
        try store.sync([entry])
        let ticks = minuteTicks(from: at("2026-05-10T08:00:00Z"), count: 5)
        for tick in ticks { _ = try store.fire(entry, tick: tick, now: tick) }
        XCTAssertEqual(try store.history(name: "often").map(\.tick), ticks.suffix(3).reversed().map(TickFormat.iso8601UTC))
        XCTAssertThrowsError(try store.history(name: "nope")) { XCTAssertEqual($0 as? CronStoreError, .notFound("nope")) }
    }

    func testRunNowEnqueuesWithoutTouchingTheCursor() throws {
        let entry = try cronEntry("manual", "15 0 * * *", tick: .date(daysBefore: 1), args: [1])
        try store.sync([entry])
        let tick = at("2026-05-10T00:15:00Z")
        _ = try store.fire(entry, tick: tick, now: tick)
        try store.setStatus(name: "manual", .disabled, now: Date())

        let jid = try store.runNow(name: "manual", now: at("2026-05-10T09:00:00Z"))
        XCTAssertNotEqual(jid, CronJobID.jid(entry: "manual", tick: tick))
        let jobs = try redis.queued()
        XCTAssertEqual(jobs.count, 2)
        XCTAssertEqual(jobs.last?.fields["jid"], .string(jid))
        XCTAssertEqual(jobs.last?.fields["args"], [1], "no tick argument: the job's default applies")
        XCTAssertEqual(try redis.hashField("cron_job:manual", "last_tick"), "2026-05-10T00:15:00Z")
        XCTAssertEqual(try redis.hashField("cron_job:manual", "last_enqueue_time"), "2026-05-10 09:00:00 +0000")
        let history = try store.history(name: "manual")
        XCTAssertEqual(history.first?.jid, jid)
        XCTAssertEqual(history.first?.manual, true)
        XCTAssertNil(history.first?.tick)
        XCTAssertThrowsError(try store.runNow(name: "nope", now: Date())) { XCTAssertEqual($0 as? CronStoreError, .notFound("nope")) }
    }

    func testSetStatusReportsPreviousAndRecordsEnableTime() throws {
        try store.sync([try cronEntry("toggle", "* * * * *")])
        XCTAssertEqual(try store.setStatus(name: "toggle", .disabled, now: Date()), .enabled)
        XCTAssertEqual(try store.setStatus(name: "toggle", .disabled, now: Date()), .disabled)
        XCTAssertEqual(try store.setStatus(name: "toggle", .enabled, now: at("2026-05-10T08:00:30Z")), .disabled)
        XCTAssertEqual(try store.states(for: ["toggle"])["toggle"]?.enabledAt, at("2026-05-10T08:00:30Z"))
        XCTAssertThrowsError(try store.setStatus(name: "nope", .enabled, now: Date())) {
            XCTAssertEqual($0 as? CronStoreError, .notFound("nope"))
        }
    }

    func testDerivedJIDsAreStableAndDistinct() {
        let tick = at("2026-05-10T00:15:00Z")
        XCTAssertEqual(CronJobID.jid(entry: "a", tick: tick), CronJobID.jid(entry: "a", tick: tick))
        var seen = Set<String>()
        for minute in 0..<10_000 { seen.insert(CronJobID.jid(entry: "a", tick: tick.addingTimeInterval(Double(minute) * 60))) }
        seen.insert(CronJobID.jid(entry: "b", tick: tick))
        XCTAssertEqual(seen.count, 10_001)
        XCTAssertTrue(seen.allSatisfy(Identifiers.isValidJID))
    }

    // MARK: sidekiq-cron interop (Ruby 1.8.0, when installed)

    func testSidekiqCronLoadsOurEntriesAndRespectsOurClaims() throws {
        guard RubySidekiq.isAvailable else { throw XCTSkip("ruby is not installed") }
        let entry = try cronEntry("interop", "* * * * *", zone: berlin, args: ["a"])
        try store.sync([entry])
        let tick = Date(timeIntervalSince1970: (Date().timeIntervalSince1970 / 60).rounded(.down) * 60)
        XCTAssertNotNil(try store.fire(entry, tick: tick, now: tick.addingTimeInterval(1)).jid)

        // Ruby sees a valid, enabled job and its poller's test for this tick (20 s later) does not enqueue.
        let result = try RubySidekiq.run("""
            require "sidekiq/cron/job"
            job = Sidekiq::Cron::Job.all.find { |j| j.name == "interop" }
            job.test_and_enque_for_time!(Time.at(\(Int(tick.timeIntervalSince1970) + 20)).utc)
            puts JSON.generate({"valid" => job.valid?, "status" => job.status, "klass" => job.klass, "args" => job.args,
                                "queue" => Sidekiq::Queue.new("cron").size})
            """, redisURL: redis.url)
        XCTAssertEqual(result.status, 0, result.stderr)
        let object = try JSONValue.parse(result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)).objectValue
        XCTAssertEqual(object?["valid"], true)
        XCTAssertEqual(object?["status"], "enabled")
        XCTAssertEqual(object?["klass"], "CronProbe")
        XCTAssertEqual(object?["args"], ["a"])
        XCTAssertEqual(object?["queue"], 1, "sidekiq-cron did not fire the tick we had fired")

        // And the other way round: a tick Ruby fired is not fired by us.
        let next = tick.addingTimeInterval(60)
        let ruby = try RubySidekiq.run("""
            require "sidekiq/cron/job"
            Sidekiq::Cron::Job.find("interop").test_and_enque_for_time!(Time.at(\(Int(next.timeIntervalSince1970) + 2)).utc)
            puts Sidekiq::Queue.new("cron").size
            """, redisURL: redis.url)
        XCTAssertEqual(ruby.stdout.trimmingCharacters(in: .whitespacesAndNewlines), "2", ruby.stderr)
        XCTAssertEqual(try store.fire(entry, tick: next, now: next.addingTimeInterval(5)), .taken)
        XCTAssertEqual(try redis.int("LLEN", "queue:cron"), 2)
    }
}
