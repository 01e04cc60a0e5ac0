import Foundation
import WorkersQueue
import WorkersTestServices
import XCTest

/// The `workerctl` binary's operator surface: exit codes, JSON shapes and messages (database 41).
final class CLITests: XCTestCase {
    var redis: TestRedis!
    var ctl: WorkerctlRunner!

    override func setUpWithError() throws {
        redis = try TestRedis(database: 41)
        ctl = WorkerctlRunner(redisURL: redis.url)
    }

    func retryEntry(_ jid: String, retryCount: Int64 = 2, queue: String = "default") -> String {
        JSONValue.object(["retry": true, "queue": .string(queue), "class": "Flaky", "args": [1], "jid": .string(jid),
                          "created_at": 1_700_000_000.0, "enqueued_at": 1_700_000_000.0, "error_message": "boom",
                          "error_class": "RuntimeError", "failed_at": 1_700_000_001.0, "retry_count": .int(retryCount),
                          "error_backtrace": .string(InflateTests.fixedBlock)]).serialized()
    }

    func assertKeys(_ object: JSONObject?, _ keys: [String], file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertEqual(object?.keys, keys, file: file, line: line)
    }

    static let summaryKeys = ["jid", "state", "queue", "class", "display_class", "args", "score", "at", "created_at",
                              "enqueued_at", "retry_count", "error_class", "error_message", "failed_at", "retried_at",
                              "process", "thread", "run_at", "valid", "invalid_reason"]

    func testStatsJSONShapeAndNumbers() throws {
        try redis.client.enqueueMany([NewJob("A"), NewJob("B"), NewJob("C", queue: "low")])
        try redis.command("ZADD", Keys.retry, 1, retryEntry(String(repeating: "a", count: 24)))
        try redis.command("SET", Keys.statProcessed, 12)
        try redis.command("SET", Keys.statProcessed(day: Clock.utcDay(Clock.now())), 5)
        let result = try ctl.run("stats", "--json")
        XCTAssertEqual(result.status, 0, result.stderr)
        let stats = try XCTUnwrap(result.object, result.stdout)
        assertKeys(stats, ["processed", "failed", "today", "enqueued", "scheduled", "retry", "dead", "processes", "busy", "queues", "redis"])
        XCTAssertEqual(stats["processed"], 12)
        XCTAssertEqual(stats["failed"], 0)
        XCTAssertEqual(stats["today"]?.objectValue?["processed"], 5)
        XCTAssertEqual(stats["today"]?.objectValue?["date"]?.stringValue, Clock.utcDay(Clock.now()))
        XCTAssertEqual(stats["enqueued"], 3)
        XCTAssertEqual(stats["retry"], 1)
        let queues = try XCTUnwrap(stats["queues"]?.arrayValue?.compactMap(\.objectValue))
        XCTAssertEqual(queues.map { $0["name"] }, ["default", "low"])
        XCTAssertEqual(queues.map { $0["size"] }, [2, 1])
        assertKeys(queues.first, ["name", "size", "latency", "paused"])
        assertKeys(stats["redis"]?.objectValue, ["version", "used_memory", "used_memory_human", "connected_clients", "uptime_in_seconds"])

        let human = try ctl.run("stats")
        XCTAssertEqual(human.status, 0)
        XCTAssertTrue(human.stdout.contains("Processed  12"), human.stdout)
        XCTAssertTrue(human.stdout.contains("low"), human.stdout)
    }

    func testStatsClassesReadsSidekiqsMetricsLayoutForTheLastHourAndRefusesAnUnknownPeriod() throws {
        // What a worker's heartbeat writes (ClassMetricsRecorder; Sidekiq 8's j| hashes, our u32 hx| histogram).
        let minute = ClassMetricsLayout.Minute(epochSeconds: Clock.now())
        for bucket in [minute.minute, minute.tenMinutes] {
            try redis.command("HSET", "j|" + bucket, "Mailer|p", 7, "Mailer|f", 2, "Mailer|ms", 500)
        }
        try redis.command("BITFIELD", "hx|Mailer|" + minute.minute, "INCRBY", "u32", "#3", 4, "INCRBY", "u32", "#9", 1)
        try redis.command("HSET", "j|" + ClassMetricsLayout.Minute(epochSeconds: Clock.now() - 7_200).minute, "Mailer|p", 100)
        let result = try ctl.run("stats", "--classes", "--json")
        XCTAssertEqual(result.status, 0, result.stderr)
        let object = try XCTUnwrap(result.object, result.stdout)
        XCTAssertEqual(object["period"], "hour")
        let mailer = try XCTUnwrap(object["classes"]?.arrayValue?.first?.objectValue, result.stdout)
        assertKeys(mailer, ["class", "runs", "failed", "total_ms", "p50_ms", "p95_ms", "p50_slow", "p95_slow"])
        XCTAssertEqual(mailer["class"], "Mailer")
        XCTAssertEqual(mailer["runs"], 7, "two hours ago is outside the hour")
        XCTAssertEqual(mailer["failed"], 2)
        XCTAssertEqual(mailer["total_ms"], 500)
        XCTAssertEqual(mailer["p50_ms"], 65, "4 of 5 successful runs in the 45–65 ms bucket")
        XCTAssertEqual(mailer["p95_ms"], 750)
        let human = try ctl.run("stats", "--classes", "--period", "day")
        XCTAssertEqual(human.status, 0, human.stderr)
        XCTAssertTrue(human.stdout.contains("Mailer"), human.stdout)
        let refused = try ctl.run("stats", "--classes", "--period", "<week>")
        XCTAssertNotEqual(refused.status, 0)
        XCTAssertTrue(refused.stderr.contains("hour or day"), refused.stderr)
    }

    func testQueuesCommands() throws {
        try redis.client.enqueueMany((1...3).map { NewJob("Work", args: [.int(Int64($0))], queue: "mail") })
        XCTAssertEqual(try ctl.run("queues", "pause", "mail").stdout, "paused mail\n")
        let list = try ctl.run("queues", "ls", "--json")
        XCTAssertEqual(list.status, 0, list.stderr)
        let queues = try XCTUnwrap(list.object?["queues"]?.arrayValue)
        XCTAssertEqual(queues.first?.objectValue?["name"], "mail")
        XCTAssertEqual(queues.first?.objectValue?["paused"], true)
        XCTAssertEqual(try redis.int("SISMEMBER", Keys.paused, "mail"), 1)
        XCTAssertTrue(try ctl.run("queues", "pause", "--help").stdout.contains("Ruby Sidekiq OSS processes IGNORE it"))

        let inspect = try ctl.run("queues", "inspect", "mail", "--size", "2", "--page", "2", "--json")
        XCTAssertEqual(inspect.status, 0, inspect.stderr)
        let page = try XCTUnwrap(inspect.object)
        assertKeys(page, ["queue", "page", "per_page", "total", "pages", "jobs"])
        XCTAssertEqual(page["total"], 3)
        XCTAssertEqual(page["pages"], 2)
        XCTAssertEqual(page["jobs"]?.arrayValue?.count, 1)
        // Page 2 of newest-first is the oldest job (args [1]).
        XCTAssertEqual(page["jobs"]?.arrayValue?.first?.objectValue?["args"], [1])
        assertKeys(page["jobs"]?.arrayValue?.first?.objectValue, Self.summaryKeys)

        XCTAssertEqual(try ctl.run("queues", "resume", "mail").stdout, "resumed mail\n")
        XCTAssertEqual(try redis.int("SISMEMBER", Keys.paused, "mail"), 0)

        // clear is bulk-destructive: refused without a terminal or --yes, nothing deleted.
        let refused = try ctl.run("queues", "clear", "mail")
        XCTAssertEqual(refused.status, 2)
        XCTAssertTrue(refused.stderr.contains("pass --yes"), refused.stderr)
        XCTAssertEqual(try redis.int("LLEN", "queue:mail"), 3)
        let cleared = try ctl.run("queues", "clear", "mail", "--yes")
        XCTAssertEqual(cleared.status, 0, cleared.stderr)
        XCTAssertEqual(cleared.stdout, "cleared mail: 3 jobs deleted\n")
        XCTAssertEqual(try redis.int("EXISTS", "queue:mail"), 0)
        XCTAssertEqual(try redis.int("SISMEMBER", Keys.queues, "mail"), 0)

        XCTAssertEqual(try ctl.run("queues", "pause", "bad*name").status, 2)
    }

    func testJobsListShowAndActions() throws {
        let jid = "0123456789abcdef01234567"
        try redis.command("ZADD", Keys.retry, 1_800_000_000, retryEntry(jid))
        let list = try ctl.run("jobs", "ls", "--state", "retry", "--json")
        XCTAssertEqual(list.status, 0, list.stderr)
        let page = try XCTUnwrap(list.object)
        assertKeys(page, ["state", "filter", "page", "per_page", "total", "pages", "jobs"])
        let job = try XCTUnwrap(page["jobs"]?.arrayValue?.first?.objectValue)
        assertKeys(job, Self.summaryKeys)
        XCTAssertEqual(job["jid"]?.stringValue, jid)
        XCTAssertEqual(job["score"], 1_800_000_000.0)
        XCTAssertEqual(job["at"], "2027-01-15T08:00:00.000Z")
        XCTAssertEqual(job["retry_count"], 2)

        let show = try ctl.run("jobs", "show", jid, "--json")
        XCTAssertEqual(show.status, 0, show.stderr)
        let detail = try XCTUnwrap(show.object)
        assertKeys(detail, Self.summaryKeys + ["payload", "raw", "error_backtrace", "backtrace_error", "status"])
        XCTAssertEqual(detail["status"]?.objectValue?["reason"], "retry")
        XCTAssertEqual(detail["error_backtrace"], ["a.rb:1", "b.rb:2"])
        XCTAssertEqual(detail["raw"]?.stringValue, retryEntry(jid))
        let human = try ctl.run("jobs", "show", jid)
        XCTAssertTrue(human.stdout.contains("RuntimeError: boom"), human.stdout)
        XCTAssertTrue(human.stdout.contains("  a.rb:1\n  b.rb:2\n"), human.stdout)

        let retry = try ctl.run("jobs", "retry", jid, "--json")
        XCTAssertEqual(retry.status, 0, retry.stderr)
        XCTAssertEqual(retry.object?["from"], "retry")
        XCTAssertEqual(try redis.payloads(list: "queue:default").first?.retryCount, 1)
        XCTAssertEqual(try redis.int("ZCARD", Keys.retry), 0)

        let kill = try ctl.run("jobs", "kill", jid)
        XCTAssertEqual(kill.status, 0, kill.stderr)
        XCTAssertTrue(kill.stdout.contains("queue default → dead"), kill.stdout)
        let delete = try ctl.run("jobs", "delete", jid)
        XCTAssertEqual(delete.status, 0, delete.stderr)
        XCTAssertEqual(try redis.int("ZCARD", Keys.dead), 0)
        let run = try ctl.run("jobs", "run", try redis.client.enqueue(NewJob("Later"), in: 600))
        XCTAssertEqual(run.status, 0, run.stderr)
        XCTAssertEqual(try redis.payloads(list: "queue:default").first?.className, "Later")
    }

    func testBulkActionsNeedStateAndConfirmation() throws {
        for n in 1...3 { try redis.command("ZADD", Keys.dead, n, retryEntry(String(format: "%024x", n), queue: n == 3 ? "low" : "default")) }
        let refused = try ctl.run("jobs", "retry", "--all", "--state", "dead")
        XCTAssertEqual(refused.status, 2)
        XCTAssertTrue(refused.stderr.contains("refusing to retry 3 dead jobs without confirmation"), refused.stderr)
        XCTAssertEqual(try redis.int("ZCARD", Keys.dead), 3)
        XCTAssertEqual(try ctl.run("jobs", "retry", "--all").status, 2)
        XCTAssertEqual(try ctl.run("jobs", "run", "--all", "--state", "dead", "--yes").status, 2)

        let filtered = try ctl.run("jobs", "retry", "--all", "--state", "dead", "--queue", "low", "--yes", "--json")
        XCTAssertEqual(filtered.status, 0, filtered.stderr)
        assertKeys(filtered.object, ["action", "state", "filter", "matched", "done", "gone", "invalid"])
        XCTAssertEqual(filtered.object?["done"], 1)
        XCTAssertEqual(try redis.int("LLEN", "queue:low"), 1)
        let all = try ctl.run("jobs", "delete", "--all", "--state", "dead", "--yes")
        XCTAssertEqual(all.stdout, "deleted 2 of 2 dead jobs\n")
        XCTAssertEqual(try redis.int("ZCARD", Keys.dead), 0)
    }

    /// Adds dead jobs `jids` with `score(index)` and `queue(index)` (ZADD in chunks of 1000).
    func addDead(_ jids: [String], score: (Int) -> Int, queue: (Int) -> String) throws {
        var index = 0
        while index < jids.count {
            var arguments: [any RedisArgument] = ["ZADD", Keys.dead]
            for n in index..<min(index + 1000, jids.count) {
                arguments += [score(n), JSONValue.object(["retry": true, "queue": .string(queue(n)), "class": "Flaky",
                                                          "args": [.int(Int64(n))], "jid": .string(jids[n]),
                                                          "retry_count": 3]).serialized()]
            }
            _ = try redis.pool.withConnection { try $0.send(arguments).checked() }
            index += 1000
        }
    }

    func testBulkRetryStreamsTwentyThousandDeadJobsEachMovedOnce() throws {
        // Pages of 1000 over 20,000 entries; 6,000 share one score, so pages cut through ties.
        let count = 20_000
        let jids = (0..<count).map { String(format: "%024x", $0) }
        try addDead(jids, score: { $0 < 6_000 ? 1_000 : 1_000 + $0 }, queue: { _ in "default" })
        // Under GNU time when it is installed (its figure goes to a file, so stderr is the command's own).
        let rssFile = FileManager.default.temporaryDirectory.appendingPathComponent("bulk-retry-rss-\(getpid())").path
        let command = ["jobs", "retry", "--all", "--state", "dead", "--yes"]
        let result = FileManager.default.isExecutableFile(atPath: "/usr/bin/time")
            ? try ChildProcess.run(URL(fileURLWithPath: "/usr/bin/time"), ["-f", "%M", "-o", rssFile, TestServices.workerctl.path] + command,
                                   environment: ["REDIS_URL": redis.url], timeout: 600)
            : try ChildProcess.run(TestServices.workerctl, command, environment: ["REDIS_URL": redis.url], timeout: 600)
        XCTAssertEqual(result.status, 0, result.stderr)
        // Information only, never asserted: the peak RSS of `workerctl` for this run.
        let rss = (try? String(contentsOfFile: rssFile, encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines)
        print("info: workerctl jobs retry --all over \(count) dead jobs: peak RSS \(rss ?? "?") kB")
        try? FileManager.default.removeItem(atPath: rssFile)
        XCTAssertEqual(result.stdout, "retried 20000 of 20000 dead jobs\n")
        XCTAssertEqual(result.stderr, "", "no progress line when stderr is not a terminal")
        XCTAssertEqual(try redis.int("ZCARD", Keys.dead), 0)
        let queued = try redis.payloads(list: "queue:default")
        XCTAssertEqual(queued.count, count)
        XCTAssertEqual(Set(queued.compactMap(\.jid)), Set(jids), "every job moved exactly once")
        XCTAssertEqual(Set(queued.map(\.retryCount)), [2], "each retried once (retry_count − 1)")
        // Oldest first: the tail (next to run) is the lowest score.
        XCTAssertEqual(queued.last?.jid, jids[0])
        XCTAssertEqual(queued.first?.jid, jids[count - 1])
    }

    func testBulkRetryWithAFilterLeavesTheOthersAcrossPages() throws {
        // 2,500 entries at one score: the kept (non-matching) ones must not make the walk skip or repeat.
        let count = 2_500
        let jids = (0..<count).map { String(format: "%024x", $0) }
        try addDead(jids, score: { _ in 5 }, queue: { $0 % 3 == 0 ? "low" : "default" })
        let result = try ctl.run(["jobs", "retry", "--all", "--state", "dead", "--queue", "low", "--yes"], timeout: 120)
        XCTAssertEqual(result.status, 0, result.stderr)
        let low = (0..<count).filter { $0 % 3 == 0 }.map { jids[$0] }
        XCTAssertEqual(result.stdout, "retried \(low.count) of \(low.count) dead jobs\n")
        let queued = try redis.payloads(list: "queue:low").compactMap(\.jid)
        XCTAssertEqual(queued.count, low.count)
        XCTAssertEqual(Set(queued), Set(low))
        XCTAssertEqual(try redis.int("ZCARD", Keys.dead), count - low.count)

        // --class and --grep filter the same walk: no class matches, then one job's own jid.
        let none = try ctl.run(["jobs", "delete", "--all", "--state", "dead", "--class", "Steady", "--yes"], timeout: 120)
        XCTAssertEqual(none.stdout, "deleted 0 of 0 dead jobs\n", none.stderr)
        let one = try ctl.run(["jobs", "delete", "--all", "--state", "dead", "--class", "Flaky", "--grep", jids[2_201], "--yes"],
                              timeout: 120)
        XCTAssertEqual(one.stdout, "deleted 1 of 1 dead jobs\n", one.stderr)
        XCTAssertEqual(try redis.int("ZCARD", Keys.dead), count - low.count - 1)
        XCTAssertEqual(try JobAdmin(connection: redis.connection()).find(jid: jids[2_201], in: [.dead]).count, 0)
    }

    func testBulkActionsAskOnATerminal() throws {
        try XCTSkipUnless(PseudoTerminal.isAvailable, "util-linux script is not installed")
        for n in 1...2 { try redis.command("ZADD", Keys.dead, n, retryEntry(String(format: "%024x", n))) }
        let command = [TestServices.workerctl.path, "jobs", "delete", "--all", "--state", "dead"]
        let declined = try PseudoTerminal.run(command, environment: ["REDIS_URL": redis.url], waitFor: "[y/N]", input: "n\n")
        XCTAssertTrue(declined.output.contains("About to delete 2 dead jobs. Continue? [y/N]"), declined.output)
        XCTAssertEqual(declined.status, 1, declined.output)
        XCTAssertEqual(try redis.int("ZCARD", Keys.dead), 2)
        let accepted = try PseudoTerminal.run(command, environment: ["REDIS_URL": redis.url], waitFor: "[y/N]", input: "y\n")
        XCTAssertEqual(accepted.status, 0, accepted.output)
        XCTAssertTrue(accepted.output.contains("deleted 2 of 2 dead jobs"), accepted.output)
        // On a terminal the progress line is written (stderr), then cleared before the summary.
        XCTAssertTrue(accepted.output.contains("\rdeleted 2 of ~2 dead jobs…"), accepted.output)
        XCTAssertEqual(try redis.int("ZCARD", Keys.dead), 0)
    }

    func testBadArgumentsExitTwoWithOneLine() throws {
        let cases: [[String]] = [
            ["jobs", "ls", "--state", "sideways"],
            ["jobs", "ls"],
            ["jobs", "show"],
            ["jobs", "retry"],
            ["jobs", "show", "abc*"],
            ["jobs", "ls", "--state", "retry", "--size", "0"],
            ["jobs", "delete", "0123456789abcdef01234567", "--all", "--state", "dead"],
            ["jobs", "kill", "0123456789abcdef01234567", "--class", "X"],
            ["queues", "inspect"],
            ["top", "--interval", "0"],
            ["stats", "--redis-url", "http://nope"],
            ["stats", "--config", "/nonexistent/workers.yaml"],
            ["jobs", "frobnicate"],
            ["worker", "--commit-batch", "0"],
            ["worker", "--commit-batch", "65"],
            ["worker", "--commit-window", "-1"],
            ["enqueue", "Noop", "--in", "5", "--round-trips", "/tmp/never-written"],
        ]
        for arguments in cases {
            let result = try ctl.run(arguments)
            XCTAssertEqual(result.status, 2, "\(arguments): \(result.stdout) \(result.stderr)")
            XCTAssertFalse(result.stderr.isEmpty, "\(arguments)")
            XCTAssertFalse(result.stderr.contains("Fatal error"), "\(arguments): \(result.stderr)")
        }
        let state = try ctl.run("jobs", "ls", "--state", "sideways")
        XCTAssertEqual(state.stderr, "workerctl: unknown state 'sideways': expected one of enqueued, scheduled, retry, dead, busy\n")
    }

    /// `enqueue --round-trips` (bench/throughput.sh's floor): one exact sample per round trip, all jobs pushed.
    func testEnqueueWritesOneRoundTripSamplePerPush() throws {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("round-trips-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: file) }
        let result = try ctl.run("enqueue", "Noop", "--count", "5", "--batch", "2", "--round-trips", file.path)
        XCTAssertEqual(result.status, 0, result.stderr)
        let samples = try String(contentsOf: file, encoding: .utf8).split(separator: "\n").map { Double($0) }
        XCTAssertEqual(samples.count, 3, "5 jobs in batches of 2: three round trips")
        XCTAssertTrue(samples.allSatisfy { ($0 ?? -1) >= 0 && ($0 ?? 99) < 60 }, "\(samples)")
        XCTAssertEqual(try redis.payloads(list: "queue:default").count, 5)
    }

    func testUnknownJidExitsOne() throws {
        let result = try ctl.run("jobs", "show", "ffffffffffffffffffffffff")
        XCTAssertEqual(result.status, 1)
        XCTAssertEqual(result.stderr, "workerctl: no job with jid ffffffffffffffffffffffff in retry, scheduled, dead, enqueued, busy\n")
        XCTAssertEqual(try ctl.run("jobs", "retry", "ffffffffffffffffffffffff").status, 1)
        XCTAssertEqual(try ctl.run("workers", "quiet", "nohost:1:abc").status, 1)
    }

    func testRedisUnreachableNamesTheAddressAndExitsOne() throws {
        for arguments in [["stats"], ["queues", "ls"], ["jobs", "ls", "--state", "dead"], ["workers", "ls"], ["top"]] {
            let result = try ctl.run(arguments + ["--redis-url", "redis://127.0.0.1:1/3"])
            XCTAssertEqual(result.status, 1, "\(arguments)")
            XCTAssertTrue(result.stderr.hasPrefix("workerctl: cannot connect to Redis at 127.0.0.1:1/3: "), result.stderr)
            XCTAssertEqual(result.stderr.split(separator: "\n").count, 1, result.stderr)
        }
    }

    func testConnectionFromEnvironmentFlagAndConfigFile() throws {
        try redis.client.enqueue(NewJob("A", queue: "fromconfig"))
        let config = FileManager.default.temporaryDirectory.appendingPathComponent("workerctl-\(UUID().uuidString).yaml")
        try "redis_url: \(redis.url)\n".write(to: config, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: config) }
        // REDIS_URL empty (= unset): the config file decides.
        let fromConfig = try ChildProcess.run(TestServices.workerctl, ["queues", "ls", "--config", config.path],
                                              environment: ["REDIS_URL": ""])
        XCTAssertEqual(fromConfig.status, 0, fromConfig.stderr)
        XCTAssertTrue(fromConfig.stdout.contains("fromconfig"), fromConfig.stdout)
        // --redis-url wins over REDIS_URL.
        let flag = try WorkerctlRunner(redisURL: "redis://127.0.0.1:1/0").run("queues", "ls", "--redis-url", redis.url)
        XCTAssertEqual(flag.status, 0, flag.stderr)
        XCTAssertTrue(flag.stdout.contains("fromconfig"))
    }
}
