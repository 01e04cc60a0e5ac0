import Foundation
import Logging
import Queue
import Storage
import Synchronization

/// How a relay runs (`workerctl relay`, or `--outbox-relay` on `worker` / `run`).
public struct OutboxRelaySettings: Sendable {
    public var databaseURL: String
    public var redisURL: String
    /// Several Redis shards (docs/sharding.md): each row goes to its queue's shard. Nil: `redisURL` alone.
    public var shardMap: ShardMap?
    /// Most rows one transaction moves (one `SELECT … FOR UPDATE SKIP LOCKED`, one Redis pipeline, one UPDATE).
    public var batchSize: Int
    /// Seconds between polls of the table when no NOTIFY came (a lost notification, a relay that
    /// reconnected): the fallback, not the normal path.
    public var pollInterval: Double
    /// The lost-job finder, nil = off.
    public var lostJobs: LostJobSettings?

    public init(databaseURL: String, redisURL: String, batchSize: Int = 500, pollInterval: Double = 1,
                lostJobs: LostJobSettings? = nil, shardMap: ShardMap? = nil) {
        self.databaseURL = databaseURL
        self.redisURL = redisURL
        self.shardMap = shardMap
        self.batchSize = max(1, batchSize)
        self.pollInterval = max(0.01, pollInterval)
        self.lostJobs = lostJobs
    }
}

/// Moves committed `job_outbox` rows to Redis (docs/outbox.md).
///
/// One batch is one PostgreSQL transaction: lock up to `batchSize` unpushed rows in id order
/// (`FOR UPDATE SKIP LOCKED`, so several relays never take the same row), push them in one Redis pipeline
/// (`SADD queues` + `LPUSH queue:Q`, or `ZADD schedule`), mark them `pushed_at`, COMMIT. A crash before the
/// push pushes nothing and the rows stay unpushed; a crash after the push and before the COMMIT leaves them
/// unpushed too, so the next relay pushes them once more with the same jid (for ledger jobs the second
/// delivery applies nothing; a scheduled job's second `ZADD` of identical bytes adds nothing). A row is never
/// marked without its push having succeeded, so no committed job is lost.
///
/// Threading: `start` spawns one thread, `outbox-relay`, which owns its PostgreSQL session (holding
/// `LISTEN workers_outbox`) and its Redis connection; `stop` (any thread) asks it to end and waits.
/// The counters are atomics readable from any thread.
public final class OutboxRelay: Sendable {
    public let settings: OutboxRelaySettings
    private let logger: Logger
    private let stopRequested = Atomic<Bool>(false)
    private let done = DispatchGroup()
    private let pushedTotal = Atomic<Int>(0)
    private let recoveredTotal = Atomic<Int>(0)
    private let testPause: TestPause?

    /// A step at which the test hook `WORKERS_OUTBOX_TEST_PAUSE=before-push|after-push` parks the relay (it
    /// prints `outbox relay paused at STEP` on stderr and sleeps until killed), so the crash tests can
    /// SIGKILL it exactly there. Unset in production: nothing happens.
    enum TestPause: String, Sendable {
        case beforePush = "before-push"
        case afterPush = "after-push"
    }

    public init(settings: OutboxRelaySettings, logger: Logger = Logger(label: "outbox.relay")) {
        self.settings = settings
        self.logger = logger
        testPause = ProcessInfo.processInfo.environment["WORKERS_OUTBOX_TEST_PAUSE"].flatMap(TestPause.init(rawValue:))
    }

    /// Rows this relay has pushed so far.
    public var pushedCount: Int { pushedTotal.load(ordering: .relaxed) }
    /// Jobs the lost-job finder of this relay has pushed again.
    public var recoveredCount: Int { recoveredTotal.load(ordering: .relaxed) }

    public func start() {
        done.enter()
        let thread = Thread { [self] in
            loop()
            done.leave()
        }
        thread.name = "outbox-relay"
        thread.start()
    }

    /// Asks the thread to end (it checks at least every 0.2 s) and waits for it.
    public func stop() {
        stopRequested.store(true, ordering: .releasing)
        done.wait()
    }

    private var shouldStop: Bool { stopRequested.load(ordering: .acquiring) }

    private func loop() {
        var database: PostgresConnection?
        var redis: OutboxShards?
        var finder = settings.lostJobs.map { LostJobFinder(settings: $0, logger: logger) }
        var pollDue = Date()
        var finderDue = Date(timeIntervalSinceNow: (settings.lostJobs?.interval ?? 0) * Double.random(in: 0.1...1))
        var wake = true
        var failures = 0
        logger.info("outbox relay started", metadata: ["batch": "\(settings.batchSize)"])
        while !shouldStop {
            do {
                if database == nil {
                    let connection = try PostgresConnection(url: settings.databaseURL,
                                                            options: .init(applicationName: "workers-outbox-relay"))
                    try connection.listen(Outbox.channel)
                    database = connection
                    wake = true  // rows committed while we were away sent their NOTIFY to nobody
                }
                if redis == nil {
                    redis = try OutboxShards(map: settings.shardMap ?? ShardMap(single: RedisEndpoint(url: settings.redisURL)))
                }
                guard let pg = database, let rc = redis else { continue }
                if wake || Date() >= pollDue {
                    _ = try pg.takeNotifications()  // the batch below sees every row whose NOTIFY we drop here
                    var moved = 0
                    repeat {
                        moved = try relayBatch(database: pg, redis: rc)
                        pushedTotal.add(moved, ordering: .relaxed)
                    } while moved == settings.batchSize && !shouldStop
                    pollDue = Date(timeIntervalSinceNow: settings.pollInterval)
                }
                if finder != nil, Date() >= finderDue, let interval = settings.lostJobs?.interval {
                    let report = try finder!.round(database: pg, redis: rc)
                    recoveredTotal.add(report.pushedAgain, ordering: .relaxed)
                    finderDue = Date(timeIntervalSinceNow: interval)
                }
                if failures > 0 { logger.notice("outbox relay working again", metadata: ["after_failures": "\(failures)"]) }
                failures = 0
                let wait = max(0, min(0.2, pollDue.timeIntervalSinceNow))
                wake = !(try pg.waitForNotifications(timeout: wait)).isEmpty
            } catch {
                failures += 1
                if failures == 1 || failures % 30 == 0 {
                    logger.warning("outbox relay round failed; retrying", metadata: ["error": "\(error)", "failures": "\(failures)"])
                }
                database?.close()
                database = nil
                redis?.close()
                redis = nil
                Thread.sleep(forTimeInterval: min(2, 0.05 * Double(1 << min(failures, 6))))
            }
        }
        database?.close()
        redis?.close()
        logger.info("outbox relay stopped", metadata: ["pushed": "\(pushedCount)", "pushed_again": "\(recoveredCount)"])
    }

    /// Moves one batch: returns the number of rows taken (pushed, or marked with their error).
    func relayBatch(database: PostgresConnection, redis: OutboxShards) throws -> Int {
        try Self.relayBatch(database: database, redis: redis, limit: settings.batchSize, pause: testPause)
    }

    static func relayBatch(database: PostgresConnection, redis: OutboxShards, limit: Int,
                           pause: TestPause? = nil) throws -> Int {
        try database.transaction { connection in
            let rows = try connection.query("""
                SELECT \(OutboxRow.columns) FROM job_outbox WHERE pushed_at IS NULL
                ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED
                """, [limit]).map { try OutboxRow(row: $0) }
            if rows.isEmpty { return 0 }
            if pause == .beforePush { park(.beforePush) }
            let failed = try redis.push(rows, now: Clock.now())
            if pause == .afterPush { park(.afterPush) }
            let failedIDs = Set(failed.map { $0.0.id })
            let pushedIDs = rows.map(\.id).filter { !failedIDs.contains($0) }
            var statements: [PostgresConnection.Statement] = []
            if !pushedIDs.isEmpty {
                statements.append(.init("UPDATE job_outbox SET pushed_at = clock_timestamp() WHERE id = ANY($1::bigint[])",
                                        [pushedIDs]))
            }
            for (row, reason) in failed {
                statements.append(.init("UPDATE job_outbox SET pushed_at = clock_timestamp(), error = $2 WHERE id = $1",
                                        [row.id, String(reason.prefix(1000))]))
            }
            _ = try connection.pipeline(statements)
            return rows.count
        }
    }

    private static func park(_ step: TestPause) -> Never {
        FileHandle.standardError.write(Data("outbox relay paused at \(step.rawValue) (test hook)\n".utf8))
        while true { Thread.sleep(forTimeInterval: 3600) }
    }
}
