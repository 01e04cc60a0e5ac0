import BenchJobs
import Foundation
import Queue
import Storage
import TestSupport
import XCTest

/// Several Redis shards (docs/sharding.md) on private `redis-server` children (`ShardServers`,
/// ports `SHARD_TEST_PORTS`): one `workerctl worker` fetching queues that live on two shards runs
/// every job once and settles it where it came from; a SIGKILLed worker's jobs are recovered on
/// their own shard; `workerctl` shows both shards; the scheduler keeps each cron entry on its queue's shard.
final class ShardWorkerTests: XCTestCase {
    var servers: ShardServers!
    var database: PostgresTestDatabase!
    var pool: PostgresPool!

    override func setUpWithError() throws {
        servers = try ShardServers(count: 2)
        database = try PostgresTestDatabase.create(prefix: "shard_test")
        pool = PostgresPool(url: database.url, maxConnections: 2)
        _ = try Migrator.bundled().migrate(pool: pool)
        try BenchSchema.create(pool: pool)
    }

    override func tearDown() {
        servers?.stop()
        pool?.shutdown()
        database?.drop()
    }

    /// `alpha` on the default shard (server 0), `beta` on shard `b` (server 1).
    var environment: [String: String] {
        ["REDIS_URL": servers.url(0), "REDIS_SHARDS": "b=\(servers.url(1))", "QUEUE_SHARDS": "beta=b",
         "DATABASE_URL": database.url, "LOG_LEVEL": "info"]
    }

    func client() throws -> JobClient {
        JobClient(shards: ShardPools(map: try ShardMap.from(environment: environment, defaultURL: servers.url(0))))
    }

    static let workerArguments = ["worker", "--bench-jobs", "--queue", "alpha", "--queue", "beta",
                                  "--heartbeat-interval", "0.3", "--heartbeat-ttl", "2", "--orphan-sweep-interval", "0.5",
                                  "--poll-interval", "0.5"]

    func testOneWorkerRunsEveryJobOfBothShardsOnceAndWorkerctlShowsBoth() throws {
        let perQueue = 300
        let client = try client()
        let alpha = try client.enqueueMany((0..<perQueue).map { NewJob("ProbeInsert", args: [.string("a\($0)")], queue: "alpha") })
        let beta = try client.enqueueMany((0..<perQueue).map { NewJob("ProbeInsert", args: [.string("b\($0)")], queue: "beta") })
        XCTAssertEqual(try servers.int(0, "LLEN", "queue:alpha"), perQueue)
        XCTAssertEqual(try servers.int(1, "LLEN", "queue:beta"), perQueue)

        let worker = try ChildProcess(executable: TestServices.workerctl,
                                      arguments: Self.workerArguments + ["--concurrency", "4"], environment: environment)
        defer { if worker.isRunning { worker.signal(SIGKILL); worker.wait() } }
        XCTAssertTrue(try eventually(timeout: 60) {
            try servers.int(0, "GET", Keys.statProcessed) == perQueue && servers.int(1, "GET", Keys.statProcessed) == perQueue
        }, "processed \(processedCounts())\n\(worker.stderr)")

        // Exactly once: one effect per jid, on both shards' jobs.
        let counts = try effects()
        XCTAssertEqual(counts.count, 2 * perQueue)
        XCTAssertEqual(Set(counts.keys), Set(alpha + beta))
        XCTAssertEqual(counts.values.filter { $0 != 1 }.count, 0, "a job applied twice")

        // The process is registered on each shard it fetches from (Sidekiq's API on each sees it).
        XCTAssertTrue(try eventually { try servers.int(0, "SCARD", Keys.processes) == 1 && servers.int(1, "SCARD", Keys.processes) == 1 })
        // ... and keeps beating on each (its `beat` moves), not just at registration.
        for shard in 0..<2 {
            let identity = try XCTUnwrap(servers.connection(shard).command("SMEMBERS", Keys.processes).strings.first)
            let first = try servers.connection(shard).command("HGET", identity, "beat").string
            XCTAssertTrue(try eventually { try servers.connection(shard).command("HGET", identity, "beat").string != first },
                          "no heartbeat after registration on shard \(shard)")
        }
        // Sidekiq's own Ruby API (6.4.1), pointed at one shard, sees that shard's queue, the process and its count.
        if RubySidekiq.isAvailable {
            for (index, queue) in [(0, "alpha"), (1, "beta")] {
                let seen = try RubySidekiq.run("""
                    puts Sidekiq::Queue.all.map(&:name).sort.join(","); puts Sidekiq::ProcessSet.new(false).size
                    puts Sidekiq::Stats.new.processed
                    """, redisURL: servers.url(index))
                XCTAssertEqual(seen.status, 0, seen.stderr)
                XCTAssertEqual(seen.stdout, "\(queue)\n1\n\(perQueue)\n", "Sidekiq's API on shard \(index)")
            }
        }
        // Each shard holds only its queues' keys.
        for (index, foreign) in [(0, "beta"), (1, "alpha")] {
            let keys = try servers.keys(index)
            XCTAssertEqual(keys.filter { $0.contains(foreign) }, [], "shard \(index) holds keys of \(foreign): \(keys)")
            XCTAssertEqual(try servers.connection(index).command("SMEMBERS", Keys.queues).strings, [foreign == "beta" ? "alpha" : "beta"])
        }

        // workerctl shows both shards with a SHARD column, and acts on the right one.
        try client.enqueue(NewJob("Noop", queue: "beta"), at: Clock.now() + 3600)
        let queues = try workerctl(["queues", "ls"])
        XCTAssertTrue(queues.hasPrefix("SHARD"), queues)
        XCTAssertTrue(queues.contains(line: ["default", "alpha", "0"]), queues)
        XCTAssertTrue(queues.contains(line: ["b", "beta", "0"]), queues)
        let processes = try workerctl(["workers", "ls"])
        XCTAssertTrue(processes.contains(line: ["default"]) && processes.contains(line: ["b"]), processes)
        let scheduled = try workerctl(["jobs", "ls", "--state", "scheduled"])
        XCTAssertTrue(scheduled.contains(line: ["b"]) && !scheduled.contains(line: ["default"]), scheduled)
        let stats = try workerctl(["stats"])
        XCTAssertTrue(stats.contains(line: ["default", "\(perQueue)", "0"]) && stats.contains(line: ["b", "\(perQueue)", "0"]), stats)
        let top = try workerctl(["top", "--once"])
        XCTAssertTrue(top.contains("shard default 127.0.0.1:\(servers.ports[0])/0")
                      && top.contains("shard b 127.0.0.1:\(servers.ports[1])/0"), top)
        XCTAssertEqual(try workerctl(["queues", "pause", "beta"]), "paused beta\n")
        XCTAssertEqual(try servers.connection(1).command("SMEMBERS", Keys.paused).strings, ["beta"])
        XCTAssertEqual(try servers.connection(0).command("SMEMBERS", Keys.paused).strings, [])
        // The same map from the config file (redis_shards / queue_shards), the environment's left empty.
        let config = FileManager.default.temporaryDirectory.appendingPathComponent("shard-config-\(UUID().uuidString).yaml")
        try "redis_url: \(servers.url(0))\nredis_shards:\n  b: \(servers.url(1))\nqueue_shards:\n  beta: b\n"
            .write(to: config, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: config) }
        let fromFile = try workerctl(["queues", "ls", "--config", config.path],
                                     environment: ["REDIS_URL": "", "REDIS_SHARDS": "", "QUEUE_SHARDS": ""])
        XCTAssertTrue(fromFile.contains(line: ["b", "beta", "0"]) && fromFile.contains(line: ["default", "alpha", "0"]), fromFile)
        // ... and routes by it: beta (paused above, on shard b) is resumed there.
        XCTAssertEqual(try workerctl(["queues", "resume", "beta", "--config", config.path],
                                     environment: ["REDIS_URL": "", "REDIS_SHARDS": "", "QUEUE_SHARDS": ""]), "resumed beta\n")
        // One shard configured: the output is what it always was (no SHARD column).
        let single = try workerctl(["queues", "ls"], environment: ["REDIS_URL": servers.url(1), "REDIS_SHARDS": "", "QUEUE_SHARDS": ""])
        XCTAssertTrue(single.hasPrefix("QUEUE"), single)

        worker.signal(SIGTERM)
        XCTAssertEqual(worker.wait(), 0, worker.stderr)
        XCTAssertEqual(try servers.int(0, "SCARD", Keys.processes) + servers.int(1, "SCARD", Keys.processes), 0)
    }

    func testAKilledWorkersJobsAreRecoveredOnTheirOwnShard() throws {
        let client = try client()
        try client.enqueueMany((0..<3).map { _ in NewJob("Sleep", args: [1500], queue: "alpha") }
                               + (0..<3).map { _ in NewJob("Sleep", args: [1500], queue: "beta") })
        let first = try ChildProcess(executable: TestServices.workerctl,
                                     arguments: Self.workerArguments + ["--concurrency", "6"], environment: environment)
        func inFlight(_ shard: Int) throws -> Int {
            try servers.connection(shard).command("KEYS", "working:*").strings.reduce(0) { $0 + (try servers.int(shard, "LLEN", $1)) }
        }
        XCTAssertTrue(try eventually { try inFlight(0) == 3 && inFlight(1) == 3 }, first.stderr)
        first.signal(SIGKILL)
        first.wait()
        XCTAssertEqual(try servers.int(0, "GET", Keys.statProcessed) + servers.int(1, "GET", Keys.statProcessed), 0,
                       "nothing finished before the kill")

        let second = try ChildProcess(executable: TestServices.workerctl,
                                      arguments: Self.workerArguments + ["--concurrency", "6"], environment: environment)
        defer { second.signal(SIGTERM); second.wait() }
        XCTAssertTrue(try eventually(timeout: 30) {
            try servers.int(0, "GET", Keys.statProcessed) == 3 && servers.int(1, "GET", Keys.statProcessed) == 3
        }, second.stderr)
        XCTAssertTrue(second.stderr.contains("recovered in-flight jobs of dead processes"), second.stderr)
        for shard in 0..<2 {
            XCTAssertTrue(try eventually { try inFlight(shard) == 0 }, "shard \(shard) still has jobs in flight")
            XCTAssertEqual(try servers.int(shard, "ZCARD", Keys.dead) + servers.int(shard, "ZCARD", Keys.retry), 0)
        }
        XCTAssertEqual(try servers.int(0, "LLEN", "queue:alpha") + servers.int(1, "LLEN", "queue:beta"), 0)
        XCTAssertEqual(try servers.keys(0).filter { $0.contains("beta") }, [])
        XCTAssertEqual(try servers.keys(1).filter { $0.contains("alpha") }, [])
    }

    func testTheSchedulerKeepsEachCronEntryOnItsQueuesShard() throws {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("shard-schedule-\(UUID().uuidString).yaml")
        try """
            - name: on_alpha
              cron: "0 3 * * *"
              class: Noop
              queue: alpha
            - name: on_beta
              cron: "0 4 * * *"
              class: Noop
              queue: beta
            """.write(to: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: file) }
        let scheduler = try ChildProcess(executable: TestServices.workerctl, arguments: ["scheduler", "--schedule", file.path],
                                         environment: environment)
        XCTAssertTrue(try eventually {
            try servers.connection(0).command("SMEMBERS", "cron_jobs").strings == ["cron_job:on_alpha"]
                && servers.connection(1).command("SMEMBERS", "cron_jobs").strings == ["cron_job:on_beta"]
        }, "keys: \((try? servers.keys(0)) ?? []) / \((try? servers.keys(1)) ?? [])\n\(scheduler.stderr)")
        scheduler.signal(SIGTERM)
        XCTAssertEqual(scheduler.wait(), 0, scheduler.stderr)
    }

    // MARK: Helpers

    /// `stat:processed` of each shard, for failure messages.
    private func processedCounts() -> [Int] {
        (0..<2).map { (try? servers.int($0, "GET", Keys.statProcessed)) ?? -1 }
    }

    /// Runs `workerctl ARGS` with this test's shard environment; its stdout (fails the test on a non-zero exit).
    private func workerctl(_ arguments: [String], environment extra: [String: String] = [:]) throws -> String {
        let result = try ChildProcess.run(TestServices.workerctl, arguments, environment: environment.merging(extra) { $1 })
        XCTAssertEqual(result.status, 0, "workerctl \(arguments.joined(separator: " ")): \(result.stderr)")
        return result.stdout
    }

    /// Rows in `probe_rows` per jid.
    private func effects() throws -> [String: Int] {
        try pool.withConnection { connection in
            var result: [String: Int] = [:]
            for row in try connection.query("SELECT jid, count(*)::bigint AS n FROM probe_rows GROUP BY jid") {
                result[try row.string("jid")] = Int(try row.int64("n"))
            }
            return result
        }
    }
}

private extension String {
    /// True when some line starts with `cells` as its first whitespace-separated fields.
    func contains(line cells: [String]) -> Bool {
        split(separator: "\n").contains { line in
            let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init)
            return fields.count >= cells.count && Array(fields.prefix(cells.count)) == cells
        }
    }
}
