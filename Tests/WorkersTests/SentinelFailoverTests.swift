import WorkersBenchJobs
import Foundation
import WorkersQueue
import WorkersStorage
import WorkersTestServices
import Workers
import XCTest

/// Redis Sentinel failover with jobs flowing (issue 18): a `workerctl worker` child given a
/// `redis+sentinel://` URL runs 5,000 ledger jobs (`ProbeInsert`, one `probe_rows` row each, through
/// the real runner) while the master is failed over (`SENTINEL FAILOVER`) or SIGKILLed. Every job's
/// effect must be in PostgreSQL exactly once; the worker pauses, finds the new master, resumes and
/// logs the outage at most once. The private deployment is `SentinelTopology` (ports 6440/6441 and
/// 26440–26442, overridable by environment).
///
/// All jobs are enqueued and confirmed on the replica (`WAIT`) before the run, so replication can
/// only lose the run's own writes (fetch moves, acknowledgements, heartbeats): those make jobs run
/// again, never vanish, and the ledger keeps their effect single. Jobs that no longer exist on the
/// new master ("lost") are counted and reported; none are expected.
final class SentinelFailoverTests: XCTestCase {
    static let jobCount = 5000
    var database: PostgresTestDatabase!
    var pool: PostgresPool!
    var topology: SentinelTopology!

    override func setUpWithError() throws {
        database = try PostgresTestDatabase.create(prefix: "sentinel_test")
        pool = PostgresPool(url: database.url, maxConnections: 2)
        _ = try BundledSchema.migrate(pool: pool)
        try BenchSchema.create(pool: pool)
        topology = try SentinelTopology()
        try topology.waitUntilReady()
    }

    override func tearDown() {
        topology?.stop()
        pool?.shutdown()
        database?.drop()
    }

    func testSentinelFailoverMidRunAppliesEveryJobOnce() throws {
        let outcome = try runThroughFailover {
            // The spec allows -INPROG / -NOGOODSLAVE while Sentinels still settle: ask again.
            XCTAssertTrue(eventually {
                (try? self.topology.sentinel().command("SENTINEL", "FAILOVER", SentinelTopology.masterName)) != nil
            }, "SENTINEL FAILOVER was refused")
        }
        XCTAssertEqual(outcome.lost, 0, "a manual failover waits for the replica: nothing may be lost")
    }

    func testMasterKilledMidRunAppliesEveryJobOnce() throws {
        let outcome = try runThroughFailover { self.topology.killMaster() }
        // Allowed in principle for a crash (asynchronous replication); every job was on the
        // replica before the run, so none is expected here. Reported, not asserted.
        print("SentinelFailoverTests: master SIGKILL lost \(outcome.lost) of \(Self.jobCount) jobs")
    }

    /// `workerctl enqueue` and `workerctl scheduler` given the Sentinel URL write to the master the
    /// Sentinels name (the same connect path serves the worker, `RedisPool` and `WorkersClient`).
    func testEnqueueAndSchedulerFindTheMasterThroughTheSentinels() throws {
        let environment = ["REDIS_URL": topology.url(), "LOG_LEVEL": "info"]
        let enqueue = try ChildProcess.run(TestServices.workerctl, ["enqueue", "Noop", "--count", "3"], environment: environment)
        XCTAssertEqual(enqueue.status, 0, enqueue.stderr)
        let master = try RedisConnection(url: "redis://127.0.0.1:\(topology.masterPort)/0")
        XCTAssertEqual(try master.command("LLEN", "queue:default").integer, 3)

        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("sentinel-schedule-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let schedule = directory.appendingPathComponent("schedule.yaml")
        try """
            - name: every_second
              cron: "* * * * * *"
              class: Noop
              catch_up: skip
            """.write(to: schedule, atomically: true, encoding: .utf8)
        let scheduler = try ChildProcess(executable: TestServices.workerctl, arguments: ["scheduler", "--schedule", schedule.path],
                                         environment: environment)
        defer { scheduler.signal(SIGTERM); scheduler.wait() }
        XCTAssertTrue(try eventually { try master.command("LLEN", "queue:default").integer ?? 0 > 3 }, scheduler.stderr)
    }

    /// A write answered `-READONLY` (the server we were talking to became a replica while our link
    /// stayed up) closes the link, so the next command asks the Sentinels again and checks `ROLE`:
    /// here the Sentinels still name the demoted server, so that reconnect must refuse it.
    func testReadOnlyReplyMakesTheNextCommandAskTheSentinelsAgain() throws {
        let connection = try RedisConnection(url: topology.url())
        try connection.command("SET", "probe", "1")
        // Swap the roles by hand, without the client kill Sentinel's own reconfiguration sends.
        let replica = try RedisConnection(url: "redis://127.0.0.1:\(topology.replicaPort)/0")
        try replica.command("REPLICAOF", "NO", "ONE")
        let master = try RedisConnection(url: "redis://127.0.0.1:\(topology.masterPort)/0")
        try master.command("REPLICAOF", "127.0.0.1", topology.replicaPort)

        XCTAssertThrowsError(try connection.command("SET", "probe", "2")) { error in
            XCTAssertEqual((error as? RedisError).map { "\($0)".contains("READONLY") }, true, "\(error)")
        }
        XCTAssertFalse(connection.isConnected, "a READONLY reply must drop the link")
        XCTAssertThrowsError(try connection.command("SET", "probe", "3")) { error in
            guard case .connectionFailed(_, let reason)? = error as? RedisError else { return XCTFail("\(error)") }
            XCTAssertTrue(reason.contains("is a slave, not the master"), reason)
        }
    }

    /// `REDIS_WAIT_REPLICAS`: an enqueue the replica confirmed passes; with the replica gone it
    /// throws `unconfirmed` (the job is on the master), and a worker acknowledging with the option on
    /// logs the unconfirmed acknowledgements once and keeps working.
    func testReplicaWaitConfirmsEnqueueAndAcknowledgement() throws {
        let url = topology.url()
        let wait = ReplicaWait(replicas: 1, timeoutMilliseconds: 200)
        let client = JobClient(pool: try RedisPool(url: url, maxConnections: 1), replicaWait: wait)
        try client.enqueueMany((0..<50).map { NewJob("ProbeInsert", args: [.string("confirmed-\($0)")]) })

        topology.killReplica()
        XCTAssertThrowsError(try client.enqueue(NewJob("ProbeInsert", args: ["unconfirmed"]))) { error in
            guard case .unconfirmed(let confirmed, let wanted, 200, _)? = error as? ReplicaWaitError else { return XCTFail("\(error)") }
            XCTAssertEqual([confirmed, wanted], [0, 1])
        }
        let master = try RedisConnection(url: "redis://127.0.0.1:\(topology.masterPort)/0")
        XCTAssertEqual(try master.command("LLEN", "queue:default").integer, 51, "the unconfirmed job is on the master")

        let worker = try ChildProcess(executable: TestServices.workerctl, arguments: [
            "worker", "--bench-jobs", "--concurrency", "2", "--poll-interval", "0.5"],
            environment: ["REDIS_URL": url, "DATABASE_URL": database.url, "LOG_LEVEL": "info",
                          "REDIS_WAIT_REPLICAS": "1", "REDIS_WAIT_TIMEOUT_MS": "50"])
        defer { worker.signal(SIGTERM); worker.wait() }
        XCTAssertTrue(try eventually(timeout: 60) { try effects().count == 51 && master.command("LLEN", "queue:default").integer == 0 },
                      worker.stderr)
        XCTAssertTrue(eventually { worker.stderr.contains("Redis replica unreachable") }, worker.stderr)
        XCTAssertEqual(worker.stderr.components(separatedBy: "Redis replica unreachable").count - 1, 1, worker.stderr)
        XCTAssertTrue(worker.isRunning, worker.stderr)
    }

    /// Enqueues the jobs through the Sentinel URL, starts a worker, calls `failover` once a fifth of
    /// the effects are in, waits for the run to drain on the new master and checks the effects.
    private func runThroughFailover(_ failover: () throws -> Void) throws -> (lost: Int, runs: Int) {
        let url = topology.url()
        let client = JobClient(pool: try RedisPool(url: url, maxConnections: 1))
        // args[1]: each job holds its transaction 3 ms, so the run outlasts the failover on any machine.
        let jids = try client.enqueueMany((0..<Self.jobCount).map { NewJob("ProbeInsert", args: [.string("n\($0)"), 3]) })
        XCTAssertEqual(try RedisConnection(url: url).command("WAIT", 1, 10_000).integer, 1, "the replica did not confirm the enqueue")

        let worker = try ChildProcess(executable: TestServices.workerctl, arguments: [
            "worker", "--bench-jobs", "--concurrency", "4", "--heartbeat-interval", "0.5", "--heartbeat-ttl", "3",
            "--orphan-sweep-interval", "1", "--poll-interval", "0.5"],
            environment: ["REDIS_URL": url, "DATABASE_URL": database.url, "LOG_LEVEL": "info"])
        defer { worker.signal(SIGTERM); worker.wait() }
        XCTAssertTrue(try eventually(timeout: 60) { try effects().count >= Self.jobCount / 5 }, worker.stderr)

        try failover()
        XCTAssertTrue(eventually(timeout: 60) {
            topology.sentinelPorts.indices.allSatisfy { topology.masterPortNamed(by: $0) == topology.replicaPort }
        }, "the Sentinels did not promote the replica")
        XCTAssertLessThan(try effects().count, Self.jobCount, "the failover came after the run: it proves nothing")

        // Drained on the new master: nothing queued, in flight, waiting to retry or dead.
        let newMaster = try RedisConnection(url: "redis://127.0.0.1:\(topology.replicaPort)/0", commandTimeout: .seconds(2))
        func drained() throws -> Bool {
            let working = try newMaster.command("KEYS", "working:*").strings
            let inFlight = try working.reduce(0) { try $0 + Int(newMaster.command("LLEN", $1).integer ?? 0) }
            return try newMaster.command("LLEN", "queue:default").integer == 0 && inFlight == 0
                && newMaster.command("ZCARD", Keys.retry).integer == 0
                && newMaster.command("ZCARD", Keys.schedule).integer == 0
        }
        XCTAssertTrue(try eventually(timeout: 90) { try effects().count == Self.jobCount || drained() },
                      "the run did not resume on the new master\n" + worker.stderr)
        XCTAssertTrue(try eventually(timeout: 60) { try drained() }, "jobs stuck on the new master\n" + worker.stderr)

        let counted = try effects()
        XCTAssertEqual(counted.filter { $0.value != 1 }.keys.sorted(), [], "effects applied more than once")
        let lost = Set(jids).subtracting(counted.keys)
        XCTAssertTrue(Set(counted.keys).isSubset(of: Set(jids)))
        XCTAssertEqual(try newMaster.command("ZCARD", Keys.dead).integer, 0, worker.stderr)
        XCTAssertTrue(worker.isRunning, "the worker died in the failover\n" + worker.stderr)
        let log = worker.stderr
        XCTAssertLessThanOrEqual(log.components(separatedBy: "Redis unreachable").count - 1, 1, log)
        let runs = Int(try newMaster.command("GET", Keys.statProcessed).integer ?? 0)
        for line in log.split(separator: "\n") where line.contains("Redis") || line.contains("put back") {
            print("SentinelFailoverTests worker: \(line.prefix(300))")
        }
        print("SentinelFailoverTests: \(counted.count) effects, \(lost.count) lost, processed counter \(runs) on the new master")
        return (lost.count, runs)
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
