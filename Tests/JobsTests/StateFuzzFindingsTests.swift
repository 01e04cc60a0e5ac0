import Foundation
import WorkersQueue
import WorkersScheduler
import WorkersTestServices
import XCTest

/// What the state fuzzer (StateFuzzTests) found, one regression test each, with the seed that found it (with the
/// generators of commit 6df7303; replay:
/// `STATE_FUZZ_SEED=<seed> STATE_FUZZ_ITERATIONS=1 swift test --filter StateFuzzTests/testAnyState`). Database 178.
final class StateFuzzFindingsTests: XCTestCase {
    /// Seed 4839782808629744545: `cancels` held a string; `workerctl jobs cancel` printed "cancelled" and exited 0,
    /// but EXEC had refused the `ZADD` (WRONGTYPE) — no worker ever saw the mark and the job ran on. The cancel now
    /// fails with Redis's message.
    func testACancelWhoseMarkRedisRefusesFailsInsteadOfReportingACancel() throws {
        let redis = try TestRedis(database: 178)
        try redis.command("SET", CancelKeys.set, "1e300")
        let admin = JobAdmin(connection: try redis.connection())
        XCTAssertThrowsError(try admin.cancel(jid: "0123456789abcdef01234567")) { error in
            XCTAssertTrue("\(error)".contains("WRONGTYPE"), "\(error)")
        }
        try redis.command("DEL", CancelKeys.set)
        XCTAssertNoThrow(try admin.cancel(jid: "0123456789abcdef01234567"))
        XCTAssertEqual(try redis.int("ZCARD", CancelKeys.set), 1)
    }
}

extension StateFuzzFindingsTests {
    /// Seed 5833679380957638813: `cron_jobs` (or an entry's `cron_job:NAME`) held another type; `workerctl scheduler`
    /// and `workerctl run` — its workers with it — exited 1 at start on WRONGTYPE, naming no key. The scheduler now
    /// runs on and logs the refused command with its key, as after a reload it could not write.
    func testASchedulerStartedOnACronKeyOfAnotherTypeRunsOnAndNamesTheKey() throws {
        let redis = try TestRedis(database: 178)
        try redis.command("SET", CronKeys.jobs, "\u{1B}[2J")
        let schedule = FileManager.default.temporaryDirectory.appendingPathComponent("fuzz-finding-\(UUID().uuidString).yaml")
        defer { try? FileManager.default.removeItem(at: schedule) }
        try "- name: every-minute\n  cron: \"* * * * *\"\n  class: Noop\n".write(to: schedule, atomically: true, encoding: .utf8)
        let scheduler = try ChildProcess(executable: TestServices.workerctl,
                                         arguments: ["scheduler", "--schedule", schedule.path, "--max-sleep", "0.2"],
                                         environment: ["REDIS_URL": redis.url])
        defer { if scheduler.isRunning { scheduler.signal(SIGKILL) } }
        XCTAssertTrue(eventually(timeout: 20) { scheduler.stderr.contains("schedule not synced") || !scheduler.isRunning }, scheduler.stderr)
        XCTAssertTrue(scheduler.isRunning, "the scheduler ended: \(scheduler.stderr)")
        XCTAssertTrue(scheduler.stderr.contains("SMEMBERS \(CronKeys.jobs)"), "the refused command and key are named: \(scheduler.stderr)")
        scheduler.signal(SIGTERM)
        XCTAssertEqual(scheduler.wait(), 0, scheduler.stderr)
        try redis.command("DEL", CronKeys.jobs)
    }
}
