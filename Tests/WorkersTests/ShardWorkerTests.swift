import WorkersBenchJobs
import Foundation
import WorkersQueue
import WorkersStorage
import WorkersTestServices
import XCTest

/// Several Redis shards (docs/sharding.md) on private `redis-server` children (`ShardServers`,
/// ports `SHARD_TEST_PORTS`): one `workerctl worker` fetching queues that live on two shards runs
/// every job once and settles it where it came from; a SIGKILLed worker's jobs are recovered on
/// their own shard; `workerctl` shows both shards; the scheduler keeps each cron entry on its queue's shard;
/// `workerctl unique|batches|cron` list every shard and act on the shard holding the lock, batch or entry.
final class ShardWorkerTests: XCTestCase {
    var servers: ShardServers!
    var database: PostgresTestDatabase!
    var pool: PostgresPool!

    override func setUpWithError() throws {
        servers = try ShardServers(count: 2)
        database = try PostgresTestDatabase.create(prefix: "shard_test")
        pool = PostgresPool(url: database.url, maxConnections: 2)
        _ = try BundledSchema.migrate(pool: pool)
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

        // workerctl cron: ls reads both shards (SHARD column, "shard" in JSON); the commands naming an
        // entry act on the shard holding it (b for on_beta), where its job is pushed.
        let listed = try workerctl(["cron", "ls"])
        XCTAssertTrue(listed.hasPrefix("SHARD"), listed)
        XCTAssertTrue(listed.contains(line: ["default", "on_alpha"]) && listed.contains(line: ["b", "on_beta"]), listed)
        XCTAssertEqual(try jsonShards(workerctl(["cron", "ls", "--json"]), list: "entries", key: "name"),
                       ["on_alpha": "default", "on_beta": "b"])
        XCTAssertEqual(try workerctl(["cron", "disable", "on_beta"]), "disabled on_beta\n")
        XCTAssertEqual(try servers.connection(1).command("HGET", "cron_job:on_beta", "status").string, "disabled")
        XCTAssertEqual(try workerctl(["cron", "enable", "on_beta"]), "enabled on_beta\n")
        XCTAssertEqual(try servers.connection(1).command("HGET", "cron_job:on_beta", "status").string, "enabled")
        let ran = try workerctl(["cron", "run", "on_beta"])
        XCTAssertTrue(ran.hasPrefix("enqueued on_beta as "), ran)
        XCTAssertEqual(try servers.int(1, "LLEN", "queue:beta"), 1, "cron run pushes on the entry's (queue's) shard")
        XCTAssertEqual(try servers.int(0, "EXISTS", "queue:beta"), 0)
        let jid = String(ran.dropFirst("enqueued on_beta as ".count).dropLast())
        XCTAssertTrue(try workerctl(["cron", "history", "on_beta"]).contains(jid))
        scheduler.signal(SIGTERM)
        XCTAssertEqual(scheduler.wait(), 0, scheduler.stderr)
        XCTAssertEqual(try workerctl(["cron", "delete", "on_beta"]), "deleted on_beta\n")
        XCTAssertEqual(try servers.int(1, "EXISTS", "cron_job:on_beta"), 0)
        XCTAssertEqual(try servers.int(0, "EXISTS", "cron_job:on_alpha"), 1)
        let missing = try ChildProcess.run(TestServices.workerctl, ["cron", "disable", "on_beta"], environment: environment)
        XCTAssertEqual(missing.status, 1, "no shard holds it any more")
        XCTAssertTrue(missing.stderr.contains("no cron entry named 'on_beta'"), missing.stderr)
    }

    /// A unique lock and a batch whose queue (`beta`) lives on shard b, and one of each on the default
    /// shard (`alpha`): `workerctl unique ls` / `batches ls` list both shards' (SHARD column, `"shard"`
    /// in JSON); `unique show|release` and `batches show` find b's on b and act there.
    func testUniqueLocksAndBatchesOfEachShardAreListedAndActedOnThere() throws {
        let client = try client()
        let policy = UniquePolicy(for: .seconds(600))
        guard case .enqueued(let betaJid) = try client.enqueueUnique(NewJob("Noop", args: [1], queue: "beta"), policy: policy),
              case .enqueued(let alphaJid) = try client.enqueueUnique(NewJob("Noop", args: [2], queue: "alpha"), policy: policy) else {
            return XCTFail("both unique pushes must enqueue")
        }
        let betaLock = try XCTUnwrap(UniqueAdmin(connection: servers.connection(1)).list().first?.lock.redisKey)
        let alphaLock = try XCTUnwrap(UniqueAdmin(connection: servers.connection(0)).list().first?.lock.redisKey)

        let locks = try workerctl(["unique", "ls"])
        XCTAssertTrue(locks.hasPrefix("SHARD"), locks)
        XCTAssertTrue(locks.contains(line: ["b", String(betaLock.prefix(23)) + "…", betaJid]), locks)
        XCTAssertTrue(locks.contains(line: ["default", String(alphaLock.prefix(23)) + "…", alphaJid]), locks)
        XCTAssertEqual(try jsonShards(workerctl(["unique", "ls", "--json"]), list: "locks", key: "jid"), [betaJid: "b", alphaJid: "default"])
        for name in [betaJid, betaLock] {
            let shown = try workerctl(["unique", "show", name])
            XCTAssertTrue(shown.contains("lock      \(betaLock)") && shown.contains("job       queue beta"), shown)
        }
        XCTAssertEqual(try workerctl(["unique", "release", betaLock]), "released \(betaLock) (held by \(betaJid))\n")
        XCTAssertEqual(try servers.int(1, "EXISTS", betaLock), 0, "released on shard b")
        XCTAssertEqual(try servers.int(0, "EXISTS", alphaLock), 1, "the default shard's lock is kept")
        let gone = try ChildProcess.run(TestServices.workerctl, ["unique", "show", betaLock], environment: environment)
        XCTAssertEqual(gone.status, 1)
        XCTAssertTrue(gone.stderr.contains("\(betaLock) is not held"), gone.stderr)

        let onBeta = try client.createBatch(NewBatch(description: "on beta", jobs: [NewJob("Noop", queue: "beta")]))
        let onAlpha = try client.createBatch(NewBatch(description: "on alpha", jobs: [NewJob("Noop", queue: "alpha")]))
        let batches = try workerctl(["batches", "ls"])
        XCTAssertTrue(batches.hasPrefix("SHARD"), batches)
        XCTAssertTrue(batches.contains(line: ["b", onBeta.bid, "running", "1", "1"]), batches)
        XCTAssertTrue(batches.contains(line: ["default", onAlpha.bid, "running", "1", "1"]), batches)
        XCTAssertEqual(try jsonShards(workerctl(["batches", "ls", "--json"]), list: "batches", key: "bid"),
                       [onBeta.bid: "b", onAlpha.bid: "default"])
        let shown = try workerctl(["batches", "show", onBeta.bid])
        XCTAssertTrue(shown.hasPrefix("Batch \(onBeta.bid) (on beta): running"), shown)
        let unknown = try ChildProcess.run(TestServices.workerctl, ["batches", "show", "nosuchbatch"], environment: environment)
        XCTAssertEqual(unknown.status, 1)
        XCTAssertTrue(unknown.stderr.contains("no batch nosuchbatch"), unknown.stderr)

        // One shard configured: the outputs are what they always were (no SHARD column, no "shard").
        let single = ["REDIS_URL": servers.url(1), "REDIS_SHARDS": "", "QUEUE_SHARDS": ""]
        XCTAssertTrue(try workerctl(["batches", "ls"], environment: single).hasPrefix("BID"))
        XCTAssertFalse(try workerctl(["batches", "ls", "--json"], environment: single).contains("\"shard\""))
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

    /// `{LIST: [{KEY: …, "shard": …}, …]}` (a `--json` listing) → KEY's value → its `"shard"`.
    private func jsonShards(_ text: String, list: String, key: String) throws -> [String: String] {
        let items = try XCTUnwrap(JSONValue.parse(text).objectValue?[list]?.arrayValue, text)
        var shards: [String: String] = [:]
        for item in items {
            let object = try XCTUnwrap(item.objectValue, text)
            shards[try XCTUnwrap(object[key]?.stringValue, text)] = try XCTUnwrap(object["shard"]?.stringValue, "no shard in \(text)")
        }
        return shards
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
