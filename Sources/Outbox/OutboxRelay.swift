import Foundation
import Logging
import WorkersQueue
import WorkersStorage
import Synchronization

/// How a relay runs (`workerctl relay`, or `--outbox-relay` on `worker` / `run`).
public struct OutboxRelaySettings: Sendable {
    /// The default largest payload the relay pushes (1 MiB), the same as `workers_max_payload_bytes()`'s.
    public static let defaultMaxPayloadBytes = 1 << 20
    /// The default byte budget of one batch (16 MiB of args and extra).
    public static let defaultMaxBatchBytes = 16 << 20
    /// The largest `maxPayloadBytes` / `maxBatchBytes` accepted (512 MiB, Redis' default bulk string limit).
    public static let maxBytes = 512 << 20

    public var databaseURL: String
    public var redisURL: String
    /// Several Redis shards (docs/sharding.md): each row goes to its queue's shard. Nil: `redisURL` alone.
    public var shardMap: ShardMap?
    /// Most rows one transaction moves (one `SELECT … FOR UPDATE SKIP LOCKED`, one Redis pipeline per shard, one
    /// UPDATE).
    public var batchSize: Int
    /// Most bytes of `args` + `extra` one batch carries (at least one row is always taken): bounds the relay's
    /// memory and each Redis command, whatever size the rows are.
    public var maxBatchBytes: Int
    /// A row whose payload is larger is marked `error` (never pushed, never blocks its batch).
    public var maxPayloadBytes: Int
    /// Time between polls of the table when no NOTIFY came (a lost notification, a relay that
    /// reconnected): the fallback, not the normal path. At least 10 ms.
    public var pollInterval: Duration
    /// The lost-job finder, nil = off.
    public var lostJobs: LostJobSettings?
    /// The retention loop (its own thread), nil = off (tests only: every command runs it).
    public var retention: OutboxRetentionSettings?
    /// Applied to each row's job, in order, before its payload is built, as `JobClient` applies its middleware:
    /// `SubjectArgumentsSealer` here encrypts the personal arguments of rows written in clear, on the way to Redis
    /// (docs/jobs-privacy.md). A middleware that fails (its key store unreachable) holds the batch back: it is
    /// retried, never pushed without it. An `EnqueueError` marks the row `error`.
    public var middleware: [any EnqueueMiddleware]

    public init(databaseURL: String, redisURL: String, batchSize: Int = 500, pollInterval: Duration = .seconds(1),
                lostJobs: LostJobSettings? = nil, shardMap: ShardMap? = nil,
                retention: OutboxRetentionSettings? = nil,
                maxPayloadBytes: Int = OutboxRelaySettings.defaultMaxPayloadBytes,
                maxBatchBytes: Int = OutboxRelaySettings.defaultMaxBatchBytes,
                middleware: [any EnqueueMiddleware] = []) {
        self.databaseURL = databaseURL
        self.middleware = middleware
        self.redisURL = redisURL
        self.shardMap = shardMap
        self.batchSize = max(1, batchSize)
        self.pollInterval = max(.milliseconds(10), pollInterval)
        self.lostJobs = lostJobs
        self.retention = retention
        self.maxPayloadBytes = Bounded.int(maxPayloadBytes, in: 1...Self.maxBytes)
        self.maxBatchBytes = Bounded.int(maxBatchBytes, in: 1...Self.maxBytes)
    }
}

/// Moves committed `job_outbox` rows to Redis (docs/outbox.md).
///
/// One batch is one PostgreSQL transaction: lock up to `batchSize` unpushed rows in id order
/// (`FOR UPDATE SKIP LOCKED`, so several relays never take the same row), leaving out the queues of shards that
/// are down and cutting at `maxBatchBytes`; push them, one Redis pipeline per shard (`SADD queues` +
/// `LPUSH queue:Q`, or `ZADD schedule`); mark `pushed_at` on exactly the rows whose command a shard acknowledged
/// (and `error` on rows that cannot become a payload or are too large); COMMIT. A shard that is down or refuses
/// writes costs only its own rows, which stay unpushed: a healthy shard's rows are marked in the same commit as
/// ever and never pushed again because of another shard. A crash before the push pushes nothing; a crash (or a
/// PostgreSQL error) after the push and before the COMMIT leaves the rows unpushed, so the next relay pushes them
/// once more with the same jid (for ledger jobs the second delivery applies nothing; a scheduled job's second
/// `ZADD` of identical bytes adds nothing). A row is never marked without its push having succeeded, so no
/// committed job is lost.
///
/// Threading: `start` spawns the thread `outbox-relay`, which owns its PostgreSQL session (holding
/// `LISTEN workers_outbox`, and writing this relay's heartbeat row in `job_outbox_relays`), its Redis connections
/// and the lost-job finder; and, when `settings.retention` is set, the thread `outbox-retention` with a session
/// of its own. `stop` (any thread) asks both to end and waits. The counters are atomics readable from any thread.
public final class OutboxRelay: Sendable {
    public let settings: OutboxRelaySettings
    /// This relay's row in `job_outbox_relays` (host:pid:random).
    public let relayID: String
    private let logger: Logger
    private let stopRequested = Atomic<Bool>(false)
    private let done = DispatchGroup()
    private let pushedTotal = Atomic<Int>(0)
    private let recoveredTotal = Atomic<Int>(0)
    private let retentionPassesTotal = Atomic<Int>(0)
    private let testPause: TestPause?

    /// Seconds between heartbeats; a relay not seen for `liveSeconds` is not live (OutboxAdmin).
    static let heartbeatSeconds: Double = 5

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
        relayID = Identifiers.processIdentity()
        testPause = ProcessInfo.processInfo.environment["WORKERS_OUTBOX_TEST_PAUSE"].flatMap(TestPause.init(rawValue:))
    }

    /// Rows this relay has pushed so far.
    public var pushedCount: Int { pushedTotal.load(ordering: .relaxed) }
    /// Jobs the lost-job finder of this relay has pushed again.
    public var recoveredCount: Int { recoveredTotal.load(ordering: .relaxed) }
    /// Retention passes this relay's retention thread has completed (run, or skipped for another's lock).
    public var retentionPasses: Int { retentionPassesTotal.load(ordering: .acquiring) }

    public func start() {
        done.enter()
        let thread = Thread { [self] in
            loop()
            done.leave()
        }
        thread.name = "outbox-relay"
        thread.start()
        if let retention = settings.retention {
            done.enter()
            let cleaner = Thread { [self] in
                retentionLoop(OutboxRetention(settings: retention, logger: logger))
                done.leave()
            }
            cleaner.name = "outbox-retention"
            cleaner.start()
        }
    }

    /// Asks the threads to end (each checks at least every 0.2 s, the retention thread between batches) and
    /// waits for them.
    public func stop() {
        stopRequested.store(true, ordering: .releasing)
        done.wait()
    }

    private var shouldStop: Bool { stopRequested.load(ordering: .acquiring) }

    private func loop() {
        var database: PostgresConnection?
        var shards: OutboxShards?
        var finder = settings.lostJobs.map { LostJobFinder(settings: $0, logger: logger) }
        var pollDue = Date()
        var heartbeatDue = Date()
        var finderDue = Date(timeIntervalSinceNow: (settings.lostJobs?.interval.inSeconds ?? 0) * Double.random(in: 0.1...1))
        var wake = true
        var failures = 0
        var backoff = ReconnectBackoff(cap: 2)
        logger.info("outbox relay started", metadata: ["batch": "\(settings.batchSize)", "relay": "\(relayID)"])
        while !shouldStop {
            do {
                if database == nil {
                    let connection = try PostgresConnection(url: settings.databaseURL,
                                                            options: .init(applicationName: "workers-outbox-relay"))
                    try connection.listen(Outbox.channel)
                    database = connection
                    wake = true  // rows committed while we were away sent their NOTIFY to nobody
                }
                if shards == nil {
                    let map = try settings.shardMap ?? ShardMap(single: RedisEndpoint(url: settings.redisURL))
                    for warning in map.shards.flatMap(\.endpoint.warnings) { logger.warning("\(warning)") }
                    shards = OutboxShards(map: map, middleware: settings.middleware, logger: logger)
                }
                guard let pg = database, let redis = shards else { continue }
                if Date() >= heartbeatDue {
                    try Self.heartbeat(relayID, on: pg)
                    heartbeatDue = Date(timeIntervalSinceNow: Self.heartbeatSeconds)
                }
                if wake || Date() >= pollDue {
                    _ = try pg.takeNotifications()  // the batch below sees every row whose NOTIFY we drop here
                    var result = BatchResult()
                    repeat {
                        result = try relayBatch(database: pg, redis: redis)
                        pushedTotal.add(result.taken, ordering: .relaxed)
                        if result.refused > 0 {
                            // Each such row is marked with its reason (`job_outbox.error`; `workerctl outbox status`).
                            logger.error("outbox rows refused: marked with their error, never pushed; the batch went on", metadata: [
                                "alert": "outbox_row_refused", "rows": "\(result.refused)"])
                        }
                    } while result.full && !shouldStop
                    pollDue = Date(timeIntervalSinceNow: settings.pollInterval.inSeconds)
                }
                if finder != nil, Date() >= finderDue, let interval = settings.lostJobs?.interval {
                    let report = try finder!.round(database: pg, redis: redis, maxPayloadBytes: settings.maxPayloadBytes)
                    recoveredTotal.add(report.pushedAgain, ordering: .relaxed)
                    finderDue = Date(timeIntervalSinceNow: interval.inSeconds)
                }
                if failures > 0 { logger.notice("outbox relay working again", metadata: ["after_failures": "\(failures)"]) }
                failures = 0
                backoff.reset()
                let wait = max(0, min(0.2, pollDue.timeIntervalSinceNow))
                wake = !(try pg.waitForNotifications(timeout: .seconds(wait))).isEmpty
            } catch {
                failures += 1
                if failures == 1 || failures % 30 == 0 {
                    logger.warning("outbox relay round failed; retrying", metadata: ["error": "\(error)", "failures": "\(failures)"])
                }
                database?.close()
                database = nil
                backoff.wait { !shouldStop }
            }
        }
        if let database {
            _ = try? database.execute("DELETE FROM job_outbox_relays WHERE relay = $1", [relayID])
            database.close()
        }
        shards?.close()
        logger.info("outbox relay stopped", metadata: ["pushed": "\(pushedCount)", "pushed_again": "\(recoveredCount)"])
    }

    /// Writes (or refreshes) relay `id`'s row in `job_outbox_relays`.
    static func heartbeat(_ id: String, on connection: PostgresConnection) throws {
        try connection.execute("""
            INSERT INTO job_outbox_relays (relay) VALUES ($1)
            ON CONFLICT (relay) DO UPDATE SET seen_at = clock_timestamp()
            """, [id])
    }

    /// The retention thread: a pass, then the next after `interval` (at once when the pass ran out of time).
    private func retentionLoop(_ retention: OutboxRetention) {
        var database: PostgresConnection?
        var failures = 0
        while !shouldStop {
            var wait = retention.settings.interval.inSeconds
            do {
                if database == nil {
                    database = try PostgresConnection(url: settings.databaseURL,
                                                      options: .init(applicationName: "workers-outbox-retention"))
                }
                let report = try retention.pass(on: database!)
                retentionPassesTotal.add(1, ordering: .releasing)
                if report.ran && !report.finished { wait = 0.05 }
                failures = 0
            } catch {
                failures += 1
                if failures == 1 || failures % 30 == 0 {
                    logger.warning("outbox retention pass failed; retrying", metadata: ["error": "\(error)", "failures": "\(failures)"])
                }
                database?.close()
                database = nil
                wait = min(max(wait, 0.05), min(30, 0.05 * Double(1 << min(failures, 10))))
            }
            let until = Date(timeIntervalSinceNow: wait)
            while !shouldStop && Date() < until { Thread.sleep(forTimeInterval: min(0.2, max(0, until.timeIntervalSinceNow))) }
        }
        database?.close()
    }

    /// What one batch did.
    struct BatchResult: Equatable {
        /// Rows taken and settled (pushed, or marked with their error).
        var taken = 0
        /// Rows left unpushed because their shard is down or refused.
        var skipped = 0
        /// Rows marked with their own error (not a job, refused by a middleware — a damaged subject key —, too large).
        var refused = 0
        /// True when more rows may be waiting right now (the batch hit its row or byte limit).
        var full = false
    }

    /// Moves one batch.
    func relayBatch(database: PostgresConnection, redis: OutboxShards) throws -> BatchResult {
        try Self.relayBatch(database: database, redis: redis, limit: settings.batchSize,
                            maxBatchBytes: settings.maxBatchBytes, maxPayloadBytes: settings.maxPayloadBytes,
                            pause: testPause)
    }

    static func relayBatch(database: PostgresConnection, redis: OutboxShards, limit: Int,
                           maxBatchBytes: Int = OutboxRelaySettings.defaultMaxBatchBytes,
                           maxPayloadBytes: Int = OutboxRelaySettings.defaultMaxPayloadBytes,
                           pause: TestPause? = nil) throws -> BatchResult {
        let down = redis.unavailable()
        if down.count == redis.map.shards.count { return BatchResult() }  // every shard down: nothing can move
        let filter = redis.filter(down: down)
        return try database.transaction { connection in
            // Lock ids and sizes only; fetch the rows that fit the byte budget.
            let locked = try connection.query("""
                SELECT id, octet_length(args::text) + octet_length(extra::text) AS bytes FROM job_outbox
                WHERE pushed_at IS NULL AND queue <> ALL($2::text[]) AND ($3::bool OR queue = ANY($4::text[]))
                ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED
                """, [limit, filter.excludeQueues, filter.onlyQueues == nil, filter.onlyQueues ?? []])
                .map { (id: try $0.int("id"), bytes: try $0.int("bytes")) }
            if locked.isEmpty { return BatchResult() }
            var result = BatchResult(full: locked.count == limit)
            var chosen: [Int] = []
            var tooLarge: [(id: Int, bytes: Int)] = []
            var budget = maxBatchBytes
            for row in locked {
                if row.bytes > maxPayloadBytes { tooLarge.append(row); continue }
                if row.bytes > budget && !chosen.isEmpty { result.full = true; break }
                budget -= row.bytes
                chosen.append(row.id)
            }
            let rows = chosen.isEmpty ? [] : try connection.query(
                "SELECT \(OutboxRow.columns) FROM job_outbox WHERE id = ANY($1::bigint[]) ORDER BY id", [chosen])
                .map { try OutboxRow(row: $0) }
            if pause == .beforePush { park(.beforePush) }
            let outcome = try redis.push(rows, now: Clock.now(), maxPayloadBytes: maxPayloadBytes)
            if pause == .afterPush { park(.afterPush) }
            var statements: [PostgresConnection.Statement] = []
            if !outcome.pushed.isEmpty {
                statements.append(.init("UPDATE job_outbox SET pushed_at = clock_timestamp() WHERE id = ANY($1::bigint[])",
                                        [outcome.pushed.map(\.id)]))
            }
            var errors = outcome.refused.map { (id: $0.0.id, reason: $0.1) }
            errors += tooLarge.map { ($0.id, BoundaryError(field: "job", problem: .tooLarge(bytes: $0.bytes, limit: maxPayloadBytes)).description) }
            for (id, reason) in errors {
                statements.append(.init("UPDATE job_outbox SET pushed_at = clock_timestamp(), error = $2 WHERE id = $1",
                                        [id, String(reason.prefix(1000))]))
            }
            if !statements.isEmpty { _ = try connection.pipeline(statements) }
            result.taken = outcome.pushed.count + errors.count
            result.refused = errors.count
            result.skipped = outcome.skipped.count
            if result.skipped > 0 { result.full = false }  // the next batch would meet the same down shard first
            return result
        }
    }

    private static func park(_ step: TestPause) -> Never {
        FileHandle.standardError.write(Data("outbox relay paused at \(step.rawValue) (test hook)\n".utf8))
        while true { Thread.sleep(forTimeInterval: 3600) }
    }
}
