import Foundation
import WorkersQueue
@testable import WorkersScheduler
import WorkersTestServices
import XCTest

/// The real `workerctl` binary: `cron ls/history/enable/disable/run`, `scheduler` and `run`
/// start-up and shutdown. Database 13.
final class CronCLITests: XCTestCase {
    var redis: TestRedis!
    var cli: WorkerctlRunner!
    var scratch: URL!

    override func setUpWithError() throws {
        redis = try TestRedis(database: 13)
        cli = WorkerctlRunner(redisURL: redis.url)
        scratch = FileManager.default.temporaryDirectory.appendingPathComponent("cron-cli-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
    }

    override func tearDownWithError() throws { try? FileManager.default.removeItem(at: scratch) }

    private func scheduleFile(_ yaml: String) throws -> String {
        let url = scratch.appendingPathComponent("schedule-\(UUID().uuidString).yaml")
        try yaml.write(to: url, atomically: true, encoding: .utf8)
        return url.path
    }

    private func seed() throws -> CronStore {
        let store = CronStore(connection: try redis.connection())
        try store.sync([try cronEntry("nightly", "15 0 * * *", catchUp: .all(within: 7 * 86_400), tick: .date(daysBefore: 1),
                                      zone: berlin, args: ["x"]),
                        try cronEntry("sweep", "*/15 * * * *", catchUp: .latest)])
        let tick = at("2026-05-09T22:15:00Z")
        _ = try store.fire(try cronEntry("nightly", "15 0 * * *", tick: .date(daysBefore: 1), zone: berlin, args: ["x"]),
                           tick: tick, now: tick.addingTimeInterval(4))
        return store
    }

    // MARK: cron

    func testCronLsShowsEntriesAsTableAndJSON() throws {
        _ = try seed()
        let json = try cli.run("cron", "ls", "--json")
        XCTAssertEqual(json.status, 0, json.stderr)
        let entries = try XCTUnwrap(json.object?["entries"]?.arrayValue)
        XCTAssertEqual(entries.compactMap { $0.objectValue?["name"]?.stringValue }, ["nightly", "sweep"])
        let nightly = try XCTUnwrap(entries.first?.objectValue)
        XCTAssertEqual(nightly["status"], "enabled")
        XCTAssertEqual(nightly["cron"], "15 0 * * *")
        XCTAssertEqual(nightly["timezone"], "Europe/Berlin")
        XCTAssertEqual(nightly["class"], "CronProbe")
        XCTAssertEqual(nightly["queue"], "cron")
        XCTAssertEqual(nightly["args"], ["x"])
        XCTAssertEqual(nightly["catch_up"], "all within 7d")
        XCTAssertEqual(nightly["pass_tick"], "date_minus_1")
        XCTAssertEqual(nightly["last_tick"], "2026-05-09T22:15:00Z")
        XCTAssertEqual(nightly["last_enqueue_time"], "2026-05-09 22:15:04 +0000")
        XCTAssertEqual(nightly["managed"], true)
        // 00:15 Berlin is 22:15 or 23:15 UTC.
        let next = try XCTUnwrap(nightly["next_tick"]?.stringValue)
        XCTAssertTrue(next.hasSuffix("T22:15:00Z") || next.hasSuffix("T23:15:00Z"), next)
        XCTAssertEqual(entries.last?.objectValue?["last_tick"], .null)

        let table = try cli.run("cron", "ls")
        XCTAssertEqual(table.status, 0, table.stderr)
        XCTAssertTrue(table.stdout.contains("NAME"), table.stdout)
        XCTAssertTrue(table.stdout.contains("nightly") && table.stdout.contains("sweep"), table.stdout)

        try redis.flush()
        let empty = try cli.run("cron", "ls", "--json")
        XCTAssertEqual(empty.object?["entries"], .array([]))
    }

    func testCronHistoryAndRun() throws {
        _ = try seed()
        let run = try cli.run("cron", "run", "nightly")
        XCTAssertEqual(run.status, 0, run.stderr)
        let jid = try XCTUnwrap(run.stdout.split(separator: " ").last.map { $0.trimmingCharacters(in: .whitespacesAndNewlines) })
        XCTAssertTrue(Identifiers.isValidJID(jid), run.stdout)
        let jobs = try redis.queued()
        XCTAssertEqual(jobs.count, 2)
        XCTAssertEqual(jobs.last?.fields["jid"], .string(jid))
        XCTAssertEqual(jobs.last?.fields["args"], ["x"])
        XCTAssertEqual(try redis.hashField("cron_job:nightly", "last_tick"), "2026-05-09T22:15:00Z", "cron run is not a tick")

        let history = try cli.run("cron", "history", "nightly", "--json")
        XCTAssertEqual(history.status, 0, history.stderr)
        XCTAssertEqual(history.object?["name"], "nightly")
        let items = try XCTUnwrap(history.object?["history"]?.arrayValue).compactMap(\.objectValue)
        XCTAssertEqual(items.count, 2)
        XCTAssertEqual(items[0]["jid"], .string(jid))
        XCTAssertEqual(items[0]["manual"], true)
        XCTAssertEqual(items[0]["tick"], .null)
        XCTAssertEqual(items[1]["tick"], "2026-05-09T22:15:00Z")
        XCTAssertEqual(items[1]["manual"], false)
        XCTAssertEqual(items[1]["jid"], .string(CronJobID.jid(entry: "nightly", tick: at("2026-05-09T22:15:00Z"))))

        let text = try cli.run("cron", "history", "nightly")
        XCTAssertEqual(text.status, 0, text.stderr)
        XCTAssertTrue(text.stdout.contains("(cron run)") && text.stdout.contains("2026-05-09T22:15:00Z"), text.stdout)
        let none = try cli.run("cron", "history", "sweep")
        XCTAssertEqual(none.status, 0)
        XCTAssertTrue(none.stdout.contains("no fires"), none.stdout)
    }

    func testCronEnableDisable() throws {
        _ = try seed()
        let disable = try cli.run("cron", "disable", "sweep")
        XCTAssertEqual(disable.status, 0, disable.stderr)
        XCTAssertEqual(disable.stdout.trimmingCharacters(in: .whitespacesAndNewlines), "disabled sweep")
        XCTAssertEqual(try redis.hashField("cron_job:sweep", "status"), "disabled")
        XCTAssertEqual(try cli.run("cron", "disable", "sweep").stdout.trimmingCharacters(in: .whitespacesAndNewlines),
                       "sweep was already disabled")
        let listed = try cli.run("cron", "ls", "--json").object?["entries"]?.arrayValue?.last?.objectValue
        XCTAssertEqual(listed?["status"], "disabled")

        let enable = try cli.run("cron", "enable", "sweep")
        XCTAssertEqual(enable.status, 0, enable.stderr)
        XCTAssertEqual(try redis.hashField("cron_job:sweep", "status"), "enabled")
        XCTAssertNotNil(try redis.hashField("cron_job:sweep", "enabled_at_epoch"))
    }

    func testCronDeleteRemovesTheEntryAndItsBookkeeping() throws {
        _ = try seed()
        let deleted = try cli.run("cron", "delete", "nightly")
        XCTAssertEqual(deleted.status, 0, deleted.stderr)
        XCTAssertEqual(deleted.stdout.trimmingCharacters(in: .whitespacesAndNewlines), "deleted nightly")
        XCTAssertEqual(try redis.command("SMEMBERS", "cron_jobs").strings, ["cron_job:sweep"])
        XCTAssertEqual(try redis.int("EXISTS", "cron_job:nightly", "cron_job:nightly:enqueued", "cron_job:nightly:jid_history"), 0)
        let names = try cli.run("cron", "ls", "--json").object?["entries"]?.arrayValue?.compactMap { $0.objectValue?["name"]?.stringValue }
        XCTAssertEqual(names, ["sweep"])
        XCTAssertEqual(try redis.int("LLEN", "queue:cron"), 1, "jobs already enqueued stay")
        let again = try cli.run("cron", "delete", "nightly")
        XCTAssertEqual(again.status, 1, again.stderr)
        XCTAssertTrue(again.stderr.contains("no cron entry named 'nightly'"), again.stderr)
    }

    func testCronErrorsAndExitCodes() throws {
        _ = try seed()
        for arguments in [["cron", "enable", "nope"], ["cron", "disable", "nope"], ["cron", "run", "nope"], ["cron", "history", "nope"],
                          ["cron", "delete", "nope"]] {
            let result = try cli.run(arguments)
            XCTAssertEqual(result.status, 1, "\(arguments): \(result.stderr)")
            XCTAssertTrue(result.stderr.contains("no cron entry named 'nope'"), result.stderr)
        }
        XCTAssertEqual(try cli.run("cron", "history").status, 2, "missing argument")
        XCTAssertEqual(try cli.run("cron", "enable", "").status, 2, "empty name")
        XCTAssertEqual(try cli.run("cron", "delete", "two words").status, 2, "name with a space")
        XCTAssertEqual(try cli.run("cron", "frobnicate").status, 2)
        let down = try cli.run(["cron", "ls", "--redis-url", "redis://127.0.0.1:1/0"])
        XCTAssertEqual(down.status, 1, down.stderr)
        XCTAssertEqual(try redis.int("LLEN", "queue:cron"), 1, "nothing enqueued by failed commands")
    }

    // MARK: scheduler start-up

    func testSchedulerRefusesAnInvalidScheduleFileNamingEntryAndReason() throws {
        let path = try scheduleFile("""
            - name: fine
              cron: "0 * * * *"
              class: FineJob
            - name: broken
              cron: "61 * * * *"
              class: BrokenJob
            - name: typo
              cron: "0 * * * *"
              class: TypoJob
              catchup: all
            """)
        for command in [["scheduler"], ["run", "--no-database"]] {
            let result = try cli.run(command + ["--schedule", path])
            XCTAssertEqual(result.status, 2, "\(command): \(result.stderr)")
            XCTAssertTrue(result.stderr.contains("entry 'broken': cron:"), result.stderr)
            XCTAssertTrue(result.stderr.contains("61"), result.stderr)
            XCTAssertTrue(result.stderr.contains("entry 'typo': catchup: unknown key"), result.stderr)
        }
        XCTAssertEqual(try redis.int("EXISTS", "cron_jobs"), 0, "nothing synced from a refused file")
        XCTAssertEqual(try redis.int("SCARD", "processes"), 0, "no worker started")

        let missing = try cli.run("scheduler", "--schedule", scratch.appendingPathComponent("absent.yaml").path)
        XCTAssertEqual(missing.status, 2)
        XCTAssertTrue(missing.stderr.contains("cannot read"), missing.stderr)
        XCTAssertEqual(try cli.run("scheduler", "--history-size", "0").status, 2)
    }

    func testSchedulerWithUnreachableRedisFailsWithExitOne() throws {
        let path = try scheduleFile("- {name: a, cron: \"0 * * * *\", class: AJob}\n")
        let result = try cli.run(["scheduler", "--schedule", path, "--redis-url", "redis://127.0.0.1:1/0"])
        XCTAssertEqual(result.status, 1, result.stderr)
        XCTAssertTrue(result.stderr.contains("127.0.0.1:1"), result.stderr)
    }

    func testSchedulerCheckValidatesTheRepositorySchedule() throws {
        let path = TestServices.repositoryRoot.appendingPathComponent("config/schedule.yaml").path
        let result = try cli.run("scheduler", "--check", "--schedule", path)
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertTrue(result.stdout.contains("ad_revenue_aggregation.nightly"), result.stdout)
        XCTAssertTrue(result.stdout.contains("10 entries, OK"), result.stdout)
        XCTAssertEqual(try redis.int("EXISTS", "cron_jobs"), 0, "--check does not touch Redis")
    }

    // MARK: scheduler and run processes

    /// An every-second entry, so that a real process fires within moments (no minute waits).
    private func everySecond(queue: String, className: String = "Noop") throws -> String {
        try scheduleFile("""
            - name: heartbeat.\(queue)
              cron: "* * * * * *"
              class: \(className)
              queue: \(queue)
            """)
    }

    func testSchedulerProcessSyncsFiresAndStopsOnSIGTERM() throws {
        let path = try everySecond(queue: "cronproc")
        let child = try ChildProcess(executable: TestServices.workerctl, arguments: ["scheduler", "--schedule", path],
                                     environment: ["REDIS_URL": redis.url])
        defer { if child.isRunning { child.signal(SIGKILL) } }
        XCTAssertTrue(try eventually { try redis.int("LLEN", "queue:cronproc") >= 2 }, child.stderr)
        XCTAssertEqual(try redis.command("SMEMBERS", "cron_jobs").strings, ["cron_job:heartbeat.cronproc"])
        child.signal(SIGTERM)
        XCTAssertEqual(child.wait(timeout: 30), 0, child.stderr)
        // Each job in the queue is a distinct tick.
        let jids = try redis.queued("cronproc").compactMap { $0.fields["jid"]?.stringValue }
        XCTAssertEqual(Set(jids).count, jids.count)
    }

    func testTwoSchedulerProcessesFireEachTickOnce() throws {
        let path = try everySecond(queue: "crontwo")
        let children = try (0..<2).map { _ in
            try ChildProcess(executable: TestServices.workerctl, arguments: ["scheduler", "--schedule", path, "--max-sleep", "0.05"],
                             environment: ["REDIS_URL": redis.url])
        }
        defer { for child in children where child.isRunning { child.signal(SIGKILL) } }
        XCTAssertTrue(try eventually { try redis.int("LLEN", "queue:crontwo") >= 4 })
        for child in children { child.signal(SIGTERM) }
        for child in children { XCTAssertEqual(child.wait(timeout: 30), 0, child.stderr) }
        let history = try CronStore(connection: try redis.connection()).history(name: "heartbeat.crontwo")
        let tickTexts = history.compactMap(\.tick)
        XCTAssertEqual(Set(tickTexts).count, tickTexts.count, "no tick twice in the history")
        let jids = try redis.queued("crontwo").compactMap { $0.fields["jid"]?.stringValue }
        XCTAssertEqual(Set(jids).count, jids.count, "no tick enqueued twice (jids derive from the tick)")
    }

    /// A scheduler process SIGKILLed mid-run and a new one started: every second's tick is in the
    /// queue exactly once, in order (catch-up `all` fills the seconds nobody was running).
    func testSchedulerKilledAndRestartedNeitherSkipsNorDoublesATick() throws {
        let path = try scheduleFile("""
            - name: killed
              cron: "* * * * * *"
              class: Noop
              queue: cronkill
              catch_up: all
              catch_up_window: 1h
              pass_tick: time
            """)
        let url = redis.url
        func start() throws -> ChildProcess {
            try ChildProcess(executable: TestServices.workerctl, arguments: ["scheduler", "--schedule", path, "--max-sleep", "0.05"],
                             environment: ["REDIS_URL": url])
        }
        let first = try start()
        defer { if first.isRunning { first.signal(SIGKILL) } }
        XCTAssertTrue(try eventually { try redis.int("LLEN", "queue:cronkill") >= 3 }, first.stderr)
        first.signal(SIGKILL)
        first.wait()
        let afterKill = try redis.int("LLEN", "queue:cronkill")

        let second = try start()
        defer { if second.isRunning { second.signal(SIGKILL) } }
        XCTAssertTrue(try eventually { try redis.int("LLEN", "queue:cronkill") >= afterKill + 3 }, second.stderr)
        second.signal(SIGTERM)
        XCTAssertEqual(second.wait(timeout: 30), 0, second.stderr)

        let formatter = ISO8601DateFormatter()
        let seconds = try redis.queued("cronkill").compactMap { job in
            job.fields["args"]?.arrayValue?.last?.objectValue?["time"]?.stringValue
                .flatMap { formatter.date(from: $0) }.map { Int($0.timeIntervalSince1970) }
        }
        XCTAssertGreaterThanOrEqual(seconds.count, afterKill + 3)
        XCTAssertEqual(seconds, Array(seconds[0]...seconds[seconds.count - 1]), "consecutive ticks, none twice, none missing")
    }

    func testRunCommandRunsWorkersAndSchedulerAndSIGTERMStopsBoth() throws {
        let path = try everySecond(queue: "cronrun")
        let child = try ChildProcess(
            executable: TestServices.workerctl,
            arguments: ["run", "--no-database", "--schedule", path, "--queue", "cronrun", "--concurrency", "2",
                        "--shutdown-timeout", "5"],
            environment: ["REDIS_URL": redis.url])
        defer { if child.isRunning { child.signal(SIGKILL) } }
        // The scheduler enqueues Noop every second and the worker in the same process runs them.
        XCTAssertTrue(try eventually(timeout: 30) { try redis.processed() >= 2 }, child.stderr)
        XCTAssertEqual(try redis.int("SCARD", "processes"), 1)
        child.signal(SIGTERM)
        XCTAssertEqual(child.wait(timeout: 30), 0, child.stderr)
        XCTAssertEqual(try redis.int("SCARD", "processes"), 0, "the worker deregistered")
        // (Had the scheduler thread not stopped, `run` would not have exited: it waits for it.)
    }
}
