import Foundation
import WorkersQueue
@testable import WorkersScheduler
import WorkersTestServices
import XCTest

/// SIGHUP makes a running `workerctl scheduler` / `workerctl run` read its schedule file again:
/// added, changed and removed entries reach Redis (sidekiq-cron's layout) and the firing loop; an
/// invalid file keeps the previous schedule and is logged once. Real processes, real Redis; every
/// wait is a bounded poll. Database 54.
final class ScheduleReloadTests: XCTestCase {
    var redis: TestRedis!
    var scratch: URL!

    override func setUpWithError() throws {
        redis = try TestRedis(database: 54)
        scratch = FileManager.default.temporaryDirectory.appendingPathComponent("reload-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
    }

    override func tearDownWithError() throws { try? FileManager.default.removeItem(at: scratch) }

    private var schedulePath: String { scratch.appendingPathComponent("schedule.yaml").path }

    private func writeSchedule(_ yaml: String) throws {
        try yaml.write(toFile: schedulePath, atomically: true, encoding: .utf8)
    }

    private func members() throws -> Set<String> { Set(try redis.command("SMEMBERS", "cron_jobs").strings) }

    /// Before: `keep` (every second → queue reload_a) and `gone` (hourly).
    private let before = """
        - name: keep
          cron: "* * * * * *"
          class: Noop
          queue: reload_a
        - name: gone
          cron: "0 * * * *"
          class: GoneJob
        """

    /// After: `keep` now goes to queue reload_b with another class, `gone` is removed, `added` is new.
    private let after = """
        - name: keep
          cron: "* * * * * *"
          class: KeptJob
          queue: reload_b
        - name: added
          cron: "* * * * * *"
          class: AddedJob
          queue: reload_c
          pass_tick: time
        """

    func testSIGHUPReloadsAddedChangedAndRemovedEntriesAndKeepsTheOldOnesOnAnInvalidFile() throws {
        try writeSchedule(before)
        let child = try ChildProcess(executable: TestServices.workerctl,
                                     arguments: ["scheduler", "--schedule", schedulePath, "--max-sleep", "0.1"],
                                     environment: ["REDIS_URL": redis.url])
        defer { if child.isRunning { child.signal(SIGKILL) } }
        // The first fire happens after the signal handlers are installed.
        XCTAssertTrue(try eventually { try redis.int("LLEN", "queue:reload_a") >= 1 }, child.stderr)
        XCTAssertEqual(try members(), ["cron_job:keep", "cron_job:gone"])

        try writeSchedule(after)
        child.signal(SIGHUP)
        XCTAssertTrue(try eventually { try members() == ["cron_job:keep", "cron_job:added"] }, child.stderr)
        XCTAssertEqual(try redis.int("EXISTS", "cron_job:gone"), 0, "the removed entry's hash is gone")
        XCTAssertEqual(try redis.hashField("cron_job:added", "klass"), "AddedJob")
        XCTAssertEqual(try redis.hashField("cron_job:added", "cron"), "* * * * * *")
        XCTAssertEqual(try redis.hashField("cron_job:added", "status"), "enabled")
        let message = try JSONValue.parse(try XCTUnwrap(try redis.hashField("cron_job:added", "message")))
        XCTAssertEqual(message.objectValue?["queue"], "reload_c")
        XCTAssertEqual(try redis.hashField("cron_job:keep", "klass"), "KeptJob")
        // The loop fires the new table, not only Redis: the added entry and the changed queue get jobs.
        XCTAssertTrue(try eventually { try redis.int("LLEN", "queue:reload_c") >= 1 }, child.stderr)
        XCTAssertTrue(try eventually { try redis.int("LLEN", "queue:reload_b") >= 1 }, child.stderr)
        XCTAssertEqual(try redis.queued("reload_b").first?.fields["class"], "KeptJob")
        XCTAssertTrue(child.stderr.contains("schedule reloaded"), child.stderr)

        try writeSchedule("""
            - name: keep
              cron: "* * * * * *"
              class: KeptJob
              queue: reload_b
            - name: broken
              cron: "61 * * * *"
              class: BrokenJob
            """)
        child.signal(SIGHUP)
        XCTAssertTrue(eventually { child.stderr.contains("schedule file not reloaded") }, child.stderr)
        XCTAssertTrue(child.stderr.contains("entry 'broken': cron:"), child.stderr)
        // Still running on the previous schedule: both entries keep firing, none is added or removed.
        let fired = try redis.int("LLEN", "queue:reload_c")
        XCTAssertTrue(try eventually { try redis.int("LLEN", "queue:reload_c") >= fired + 2 }, child.stderr)
        XCTAssertEqual(try members(), ["cron_job:keep", "cron_job:added"])
        XCTAssertEqual(try redis.int("EXISTS", "cron_job:broken"), 0)
        XCTAssertEqual(child.stderr.components(separatedBy: "schedule file not reloaded").count - 1, 1,
                       "logged once for one SIGHUP, not every round")

        child.signal(SIGTERM)
        XCTAssertEqual(child.wait(timeout: 30), 0, child.stderr)
    }

    func testSIGHUPReloadsTheScheduleInsideWorkerctlRun() throws {
        try writeSchedule(before)
        let child = try ChildProcess(
            executable: TestServices.workerctl,
            arguments: ["run", "--no-database", "--schedule", schedulePath, "--max-sleep", "0.1", "--queue", "reload_idle",
                        "--shutdown-timeout", "5"],
            environment: ["REDIS_URL": redis.url])
        defer { if child.isRunning { child.signal(SIGKILL) } }
        XCTAssertTrue(try eventually { try redis.int("LLEN", "queue:reload_a") >= 1 }, child.stderr)

        try writeSchedule(after)
        child.signal(SIGHUP)
        XCTAssertTrue(try eventually { try members() == ["cron_job:keep", "cron_job:added"] }, child.stderr)
        XCTAssertTrue(try eventually { try redis.int("LLEN", "queue:reload_c") >= 1 }, child.stderr)
        XCTAssertEqual(try redis.int("SCARD", "processes"), 1, "the worker still runs (SIGHUP did not end the process)")

        child.signal(SIGTERM)
        XCTAssertEqual(child.wait(timeout: 30), 0, child.stderr)
        XCTAssertEqual(try redis.int("SCARD", "processes"), 0)
    }
}
