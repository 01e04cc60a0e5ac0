import Foundation
import Logging
@testable import WorkersOutbox
import WorkersQueue
import WorkersStorage
import WorkersTestServices
import XCTest

/// The outbox under faults (issue 32; docs/outbox.md): a shard that refuses or is down, retention with the finder
/// off, payload size limits, runtime-owned fields, a row locked by another transaction, a ledger row committed
/// while the finder looks, the operators' queries, relay liveness. Real PostgreSQL and Redis; relay rounds are
/// run in process (`@testable`) so that each test decides exactly how many run. Timeouts are hang guards only.
/// Redis databases 103–108 of the test Redis; shard tests use `ShardServers` (SHARD_TEST_PORTS).
final class OutboxFaultTests: XCTestCase {
    var database: PostgresTestDatabase!
    var connection: PostgresConnection!
    let logger = Logger(label: "outbox.test")

    override func setUpWithError() throws {
        database = try PostgresTestDatabase.create(prefix: "outbox_fault_test")
        connection = try database.connect()
        try BundledSchema.migrate(on: connection)
    }

    override func tearDown() {
        connection?.close()
        database?.drop()
    }

    func count(_ sql: String, _ parameters: [(any PostgresBindable)?] = []) throws -> Int {
        try XCTUnwrap(connection.queryFirst("SELECT (\(sql))::int AS n", parameters)).int("n")
    }

    func shards(_ servers: ShardServers, queues: [(String, String)]) throws -> ShardMap {
        try ShardMap(defaultURL: servers.url(0), shards: [(name: "b", url: servers.url(1))],
                     queues: queues.map { (queue: $0.0, shard: $0.1) })
    }

    /// Every jid of `list` on `connection`'s Redis (one per payload).
    func jids(_ redis: RedisConnection, _ list: String) throws -> [String] {
        try redis.command("LRANGE", list, 0, -1).strings.map { try XCTUnwrap(JobPayload(parsing: $0).jid) }
    }

    // MARK: H2, M8: one shard refusing or down

    /// Shard b refuses every write (`maxmemory 1`): ten relay rounds, each with fresh connections (so each tries b
    /// again), push each healthy row exactly once; b's row waits, and goes once b accepts writes again.
    func testAShardRefusingWritesNeverMakesTheRelayPushAHealthyShardsRowsAgain() throws {
        let servers = try ShardServers(count: 2)
        defer { servers.stop() }
        let map = try shards(servers, queues: [("bq", "b")])
        let healthy = try (0..<3).map { _ in try XCTUnwrap(connection.queryFirst("SELECT workers_enqueue('Noop') AS jid")).string("jid") }
        let waiting = try XCTUnwrap(connection.queryFirst("SELECT workers_enqueue('Noop', queue => 'bq') AS jid")).string("jid")
        try servers.connection(1).command("CONFIG", "SET", "maxmemory", 1).checked()
        for _ in 0..<10 {
            let redis = OutboxShards(map: map, logger: logger)
            defer { redis.close() }
            _ = try? OutboxRelay.relayBatch(database: connection, redis: redis, limit: 500)  // a round may fail; none may repeat
        }
        XCTAssertEqual(try jids(servers.connection(0), "queue:default").sorted(), healthy.sorted(),
                       "each healthy row pushed exactly once while shard b refuses")
        XCTAssertEqual(try count("SELECT count(*) FROM job_outbox WHERE pushed_at IS NULL"), 1)
        XCTAssertEqual(try count("SELECT count(*) FROM job_outbox WHERE pushed_at IS NULL AND jid = $1", [waiting]), 1)

        try servers.connection(1).command("CONFIG", "SET", "maxmemory", 0).checked()
        let redis = OutboxShards(map: map, logger: logger)
        defer { redis.close() }
        _ = try OutboxRelay.relayBatch(database: connection, redis: redis, limit: 500)
        XCTAssertEqual(try jids(servers.connection(1), "queue:bq"), [waiting])
        XCTAssertEqual(try jids(servers.connection(0), "queue:default").count, 3)
        XCTAssertEqual(try count("SELECT count(*) FROM job_outbox WHERE pushed_at IS NULL OR error IS NOT NULL"), 0)
    }

    /// The relay's open connection to shard b is killed (`CLIENT KILL`) between two rounds: the round whose pipeline
    /// meets the dead link marks nothing pushed, and once the shard's back-off has passed the row is pushed, exactly
    /// once (mutation sample 2026-12-07, survivor 6: the `catch` after the pipeline must not mark its rows pushed).
    func testAConnectionKilledUnderTheRelayMarksNoRowPushedAndTheRowGoesOnceLater() throws {
        let servers = try ShardServers(count: 2)
        defer { servers.stop() }
        let map = try shards(servers, queues: [("bq", "b")])
        let redis = OutboxShards(map: map, logger: logger)  // one for every round: its connection to b stays open
        defer { redis.close() }
        let first = try XCTUnwrap(connection.queryFirst("SELECT workers_enqueue('Noop', queue => 'bq') AS jid")).string("jid")
        XCTAssertEqual(try OutboxRelay.relayBatch(database: connection, redis: redis, limit: 500).taken, 1)
        XCTAssertEqual(try jids(servers.connection(1), "queue:bq"), [first])

        try servers.connection(1).command("CLIENT", "KILL", "TYPE", "normal").checked()
        let second = try XCTUnwrap(connection.queryFirst("SELECT workers_enqueue('Noop', queue => 'bq') AS jid")).string("jid")
        _ = try OutboxRelay.relayBatch(database: connection, redis: redis, limit: 500)
        XCTAssertEqual(try count("SELECT count(*) FROM job_outbox WHERE pushed_at IS NULL AND jid = $1", [second]), 1,
                       "a pipeline on a dead link marks nothing pushed")

        XCTAssertTrue(try eventually(timeout: 10) {
            _ = try OutboxRelay.relayBatch(database: connection, redis: redis, limit: 500)
            return try count("SELECT count(*) FROM job_outbox WHERE pushed_at IS NULL") == 0
        }, "pushed once the shard's back-off has passed")
        XCTAssertEqual(try jids(servers.connection(1), "queue:bq"), [second, first], "each row once")
    }

    /// Shard b is stopped: a running relay still moves the default shard's rows, batch after batch (more rows than
    /// one batch holds, b's rows first in id order), and leaves b's rows waiting.
    func testOneShardDownDoesNotStopTheRelayForTheOthers() throws {
        let servers = try ShardServers(count: 2)
        defer { servers.stop() }
        _ = try? servers.connection(1).command("SHUTDOWN", "NOSAVE")
        XCTAssertTrue(eventually { (try? servers.connection(1)) == nil }, "shard b is down")
        try connection.execute("SELECT workers_enqueue('Noop', queue => 'bq') FROM generate_series(1, 30)")
        try connection.execute("SELECT workers_enqueue('Noop') FROM generate_series(1, 25)")
        let map = try shards(servers, queues: [("bq", "b")])
        let relay = OutboxRelay(settings: OutboxRelaySettings(databaseURL: database.url, redisURL: servers.url(0),
                                                              batchSize: 10, pollInterval: .milliseconds(50), shardMap: map),
                                logger: logger)
        relay.start()
        defer { relay.stop() }
        XCTAssertTrue(try eventually { try count("SELECT count(*) FROM job_outbox WHERE pushed_at IS NOT NULL") == 25 })
        XCTAssertEqual(try servers.int(0, "LLEN", "queue:default"), 25)
        XCTAssertEqual(try count("SELECT count(*) FROM job_outbox WHERE pushed_at IS NULL AND queue = 'bq'"), 30)
    }

    // MARK: H3: retention

    /// With the finder off, one retention pass deletes 35,000 expired rows (more than three batches) and the
    /// ledger rows past its window; younger rows of both tables stay.
    func testRetentionRunsWithTheFinderOffAndDeletesEveryExpiredRowInOnePass() throws {
        let redis = try TestRedis(database: 103)
        try connection.execute("""
            INSERT INTO job_outbox (jid, class, args, queue, retry, created_at, pushed_at)
            SELECT lpad(to_hex(i), 24, '0'), 'Noop', '[]', 'default', 'true', now() - interval '8 days', now() - interval '8 days'
            FROM generate_series(1, 35000) i
            """)
        try connection.execute("""
            INSERT INTO job_outbox (jid, class, args, queue, retry, pushed_at)
            SELECT lpad(to_hex(i), 24, '0'), 'Noop', '[]', 'default', 'true', now() - interval '1 day'
            FROM generate_series(100001, 100010) i
            """)
        try connection.execute("""
            INSERT INTO job_ledger (jid, job_class, queue, started_at, finished_at)
            SELECT 'old' || i, 'ProbeInsert', 'default', now() - interval '40 days', now() - interval '40 days' FROM generate_series(1, 7) i
            UNION ALL
            SELECT 'young' || i, 'ProbeInsert', 'default', now() - interval '8 days', now() - interval '8 days' FROM generate_series(1, 5) i
            UNION ALL
            SELECT 'running', 'ProbeInsert', 'default', now() - interval '40 days', NULL
            """)
        let retention = OutboxRetentionSettings(interval: .seconds(3600), outboxRetention: .seconds(7 * 86_400),
                                                ledgerRetention: .seconds(30 * 86_400), timeBudget: .seconds(600))
        let relay = OutboxRelay(settings: OutboxRelaySettings(databaseURL: database.url, redisURL: redis.url,
                                                              lostJobs: nil, retention: retention), logger: logger)
        relay.start()
        defer { relay.stop() }
        XCTAssertTrue(eventually(timeout: 120) { relay.retentionPasses >= 1 }, "a retention pass ran (finder off)")
        XCTAssertEqual(try count("SELECT count(*) FROM job_outbox"), 10, "every expired row gone after one pass")
        XCTAssertEqual(try count("SELECT count(*) FROM job_ledger WHERE jid LIKE 'old%'"), 0)
        XCTAssertEqual(try count("SELECT count(*) FROM job_ledger WHERE jid LIKE 'young%' OR jid = 'running'"), 6,
                       "ledger rows inside their window, and unfinished ones, are kept")
    }

    func testTheLedgerWindowIsNeverShorterThanTheOutboxWindow() {
        let settings = OutboxRetentionSettings(outboxRetention: .seconds(40 * 86_400), ledgerRetention: .seconds(86_400))
        XCTAssertEqual(settings.ledgerRetention, .seconds(40 * 86_400))
        XCTAssertEqual(OutboxRetentionSettings(outboxRetention: .seconds(Int64.max)).outboxRetention, OutboxRetentionSettings.maxRetention)
    }

    // MARK: M10: payload size

    func testWorkersEnqueueRefusesAJobOverTheConfiguredSize() throws {
        XCTAssertEqual(try count("SELECT workers_max_payload_bytes()"), 1_048_576, "1 MiB by default")
        try connection.execute("SET workers.max_payload_bytes = '2048'")
        XCTAssertThrowsError(try connection.query("SELECT workers_enqueue('Noop', jsonb_build_array(repeat('x', 3000)))")) { error in
            XCTAssertEqual((error as? PostgresError)?.sqlState, "54000", "\(error)")
            XCTAssertFalse("\(error)".contains("xxxx"), "the error names sizes, never the content")
        }
        XCTAssertThrowsError(try connection.query(
            "SELECT workers_enqueue('Noop', '[1]', extra => jsonb_build_object('tags', jsonb_build_array(repeat('y', 3000))))")) { error in
            XCTAssertEqual((error as? PostgresError)?.sqlState, "54000", "the whole row counts, not only args: \(error)")
        }
        XCTAssertNoThrow(try connection.query("SELECT workers_enqueue('Noop', jsonb_build_array(repeat('x', 1000)))"))
        XCTAssertEqual(try count("SELECT count(*) FROM job_outbox"), 1)
    }

    /// Rows inserted without `workers_enqueue`: one too large is marked `error` (a reason with sizes only) in the
    /// same batch that pushes the others; a byte budget smaller than the rows splits them over several batches.
    func testTheRelayMarksAnOversizedRowAndKeepsBatchesWithinTheirByteBudget() throws {
        let redis = try TestRedis(database: 180)
        try redis.flush()
        try connection.execute("""
            INSERT INTO job_outbox (jid, class, args, queue, retry)
            SELECT lpad(to_hex(i), 24, '0'), 'Noop', jsonb_build_array(repeat('a', CASE WHEN i = 3 THEN 9000 ELSE 1000 END)),
                   'default', 'true'
            FROM generate_series(1, 6) i
            """)
        let shards = OutboxShards(map: ShardMap(single: try RedisEndpoint(url: redis.url)), logger: logger)
        defer { shards.close() }
        let first = try OutboxRelay.relayBatch(database: connection, redis: shards, limit: 500, maxBatchBytes: 2500,
                                               maxPayloadBytes: 4096)
        XCTAssertEqual(first.taken, 3, "two rows within 2,500 bytes, and the oversized one marked")
        XCTAssertTrue(first.full)
        XCTAssertEqual(try count("SELECT count(*) FROM job_outbox WHERE error LIKE '%9006 bytes, over the limit of 4096%'"), 1)
        while try OutboxRelay.relayBatch(database: connection, redis: shards, limit: 500, maxBatchBytes: 2500,
                                         maxPayloadBytes: 4096).taken > 0 {}
        XCTAssertEqual(try redis.int("LLEN", "queue:default"), 5)
        XCTAssertEqual(try count("SELECT count(*) FROM job_outbox WHERE pushed_at IS NULL"), 0)
        XCTAssertFalse(try redis.command("LRANGE", "queue:default", 0, -1).strings.contains { $0.contains(String(repeating: "a", count: 9000)) })
    }

    // MARK: H1 (outbox part): runtime-owned fields

    func testWorkersEnqueueStripsRuntimeOwnedFieldsAndClampsClientOnes() throws {
        let redis = try TestRedis(database: 22)
        try redis.flush()
        let jid = try XCTUnwrap(connection.queryFirst("""
            SELECT workers_enqueue('Noop', '[]', extra => '{"retry_count":9223372036854775807,"interrupted_count":9223372036854775807,
              "unique_key":"k","bid":"b","error_message":"m","error_class":"C","error_backtrace":["x"],"failed_at":1,"retried_at":1,
              "overrated_at":1,"unique_for":1e300,"unique_until":"start","retry_for":60,"tags":["t"]}') AS jid
            """)).string("jid")
        let later = try XCTUnwrap(connection.queryFirst("SELECT workers_enqueue('Noop', at => 'infinity') AS jid")).string("jid")
        let shards = OutboxShards(map: ShardMap(single: try RedisEndpoint(url: redis.url)), logger: logger)
        defer { shards.close() }
        XCTAssertEqual(try OutboxRelay.relayBatch(database: connection, redis: shards, limit: 500).taken, 2)
        let payload = try XCTUnwrap(redis.payloads(list: "queue:default").first)
        XCTAssertEqual(payload.jid, jid)
        for field in ["retry_count", "interrupted_count", "unique_key", "bid", "error_message", "error_class",
                      "error_backtrace", "failed_at", "retried_at", "overrated_at"] {
            XCTAssertNil(payload.fields[field], "\(field) is the runtime's, stripped at enqueue")
        }
        XCTAssertEqual(payload.fields["unique_for"], .int(31_536_000), "unique_for clamped to one year")
        XCTAssertEqual(payload.fields["unique_until"], .string("start"))
        XCTAssertEqual(payload.fields["tags"], .array([.string("t")]))
        let scheduled = try redis.command("ZRANGE", Keys.schedule, 0, -1, "WITHSCORES").strings
        XCTAssertEqual(try JobPayload(parsing: scheduled[0]).jid, later)
        XCTAssertEqual(try XCTUnwrap(Double(scheduled[1])), Bounded.maxEpochSeconds, "at => infinity clamped to 9999-12-31")
    }

    // MARK: mutation-sample guards

    /// Another transaction holds the oldest row's lock: a relay round pushes every other row meanwhile
    /// (`FOR UPDATE SKIP LOCKED`); with a plain `FOR UPDATE` it would wait for that lock.
    func testARowLockedByAnotherTransactionDoesNotHoldUpTheOthers() throws {
        let redis = try TestRedis(database: 23)
        try redis.flush()
        try connection.execute("SELECT workers_enqueue('Noop') FROM generate_series(1, 5)")
        let holder = try database.connect()
        defer { holder.close() }
        try holder.execute("BEGIN")
        let locked = try XCTUnwrap(holder.queryFirst("SELECT jid FROM job_outbox ORDER BY id LIMIT 1 FOR UPDATE")).string("jid")
        let relayConnection = try database.connect()
        defer { relayConnection.close() }
        let shards = OutboxShards(map: ShardMap(single: try RedisEndpoint(url: redis.url)), logger: logger)
        defer { shards.close() }
        let round = Unchecked((connection: relayConnection, shards: shards))
        let result = Shared<Result<OutboxRelay.BatchResult, any Error>?>(nil)
        let thread = Thread {
            let outcome = Result { try OutboxRelay.relayBatch(database: round.value.connection, redis: round.value.shards, limit: 500) }
            result.withLock { $0 = outcome }
        }
        thread.start()
        let finished = eventually(timeout: 30) { result.withLock { $0 != nil } }
        try holder.execute("ROLLBACK")  // lets a blocked (mutated) relay go on
        XCTAssertTrue(finished || eventually { result.withLock { $0 != nil } })
        XCTAssertTrue(finished, "the relay round waited for the locked row")
        XCTAssertEqual(try result.withLock { try $0?.get().taken }, 4)
        XCTAssertEqual(Set(try redis.payloads(list: "queue:default").compactMap(\.jid)).count, 4)
        XCTAssertFalse(try redis.payloads(list: "queue:default").contains { $0.jid == locked })
    }

    /// A job finishes (its ledger row commits) between the finder's candidate query and its Redis search: the
    /// finder's second ledger read sees it and leaves it alone; a candidate still undone is pushed again.
    func testAJobThatFinishesWhileTheFinderLooksIsNotPushedAgain() throws {
        let redis = try TestRedis(database: 24)
        try redis.flush()
        try connection.execute("""
            INSERT INTO job_outbox (jid, class, args, queue, retry, created_at, pushed_at)
            VALUES ('aaaaaaaaaaaaaaaaaaaaaaa1', 'ProbeInsert', '["done"]', 'default', 'true', now() - interval '1 hour', now() - interval '1 hour'),
                   ('aaaaaaaaaaaaaaaaaaaaaaa2', 'ProbeInsert', '["lost"]', 'default', 'true', now() - interval '1 hour', now() - interval '1 hour')
            """)
        let other = try database.connect()
        defer { other.close() }
        var finder = LostJobFinder(settings: LostJobSettings(interval: .milliseconds(50), ledgerClasses: ["ProbeInsert"]), logger: logger)
        var seen: [String] = []
        finder.afterCandidates = { jids in
            seen = jids
            _ = try? other.execute("""
                INSERT INTO job_ledger (jid, job_class, queue, finished_at) VALUES ('aaaaaaaaaaaaaaaaaaaaaaa1', 'ProbeInsert', 'default', clock_timestamp())
                """)
        }
        let shards = OutboxShards(map: ShardMap(single: try RedisEndpoint(url: redis.url)), logger: logger)
        defer { shards.close() }
        let report = try finder.round(database: connection, redis: shards)
        XCTAssertEqual(Set(seen), ["aaaaaaaaaaaaaaaaaaaaaaa1", "aaaaaaaaaaaaaaaaaaaaaaa2"], "both were candidates")
        XCTAssertEqual(report.pushedAgain, 1)
        XCTAssertEqual(try redis.payloads(list: "queue:default").compactMap(\.jid), ["aaaaaaaaaaaaaaaaaaaaaaa2"],
                       "the job done meanwhile is not pushed again")
        XCTAssertEqual(try count("SELECT recovered_count FROM job_outbox WHERE jid = 'aaaaaaaaaaaaaaaaaaaaaaa1'"), 0)
    }

    // MARK: M7, relay liveness

    /// The summary and the lists read indexes, never the whole table (`pg_stat_xact_user_tables` of the same
    /// transaction counts the sequential scans).
    func testTheOperatorsQueriesDoNotScanTheWholeTable() throws {
        try connection.execute("""
            INSERT INTO job_outbox (jid, class, args, queue, retry, pushed_at, error, recovered_count)
            SELECT lpad(to_hex(i), 24, '0'), 'Noop', '[]', 'default', 'true',
                   CASE WHEN i % 1000 = 0 THEN NULL ELSE now() - interval '2 hours' END,
                   CASE WHEN i % 997 = 0 THEN 'bad' END, CASE WHEN i % 991 = 0 THEN 1 ELSE 0 END
            FROM generate_series(1, 30000) i
            """)
        try connection.execute("ANALYZE job_outbox")
        // pg_stat_xact_user_tables also holds this backend's counts not yet flushed to the shared statistics (since
        // PostgreSQL 15 they are flushed at most once a second), e.g. the migration's: the queries' own scans are the
        // difference across them.
        let scans = try connection.transaction { conn -> Int in
            func seqScans() throws -> Int {
                try XCTUnwrap(conn.queryFirst("SELECT seq_scan::int AS n FROM pg_stat_xact_user_tables WHERE relname = 'job_outbox'")).int("n")
            }
            let before = try seqScans()
            let summary = try OutboxAdmin.summary(conn)
            XCTAssertEqual(summary.pending, 30)
            XCTAssertEqual(summary.errored, 30)
            for kind in OutboxEntryKind.allCases { _ = try OutboxAdmin.entries(conn, kind) }
            return try seqScans() - before
        }
        XCTAssertEqual(scans, 0, "no sequential scan of job_outbox")
    }

    /// Rows wait and no relay runs: the summary (and so `workerctl outbox status` and /outbox) says so. A running
    /// relay's heartbeat makes it live; a stopped relay removes its row.
    func testWaitingRowsWithoutALiveRelayAreReported() throws {
        let redis = try TestRedis(database: 181)
        try redis.flush()
        try connection.execute("SELECT workers_enqueue('Noop')")
        let before = try OutboxAdmin.summary(connection)
        XCTAssertEqual(before.liveRelays, 0)
        XCTAssertTrue(try XCTUnwrap(before.noRelayWarning).hasPrefix("1 rows waiting, oldest"), "\(before)")
        XCTAssertTrue(try XCTUnwrap(before.noRelayWarning).contains("no live relay"))
        let status = try ChildProcess.run(TestServices.workerctl, ["outbox", "status"], environment: ["DATABASE_URL": database.url])
        XCTAssertTrue(status.stdout.contains("WARNING: 1 rows waiting"), status.stdout + status.stderr)

        let relay = OutboxRelay(settings: OutboxRelaySettings(databaseURL: database.url, redisURL: redis.url), logger: logger)
        relay.start()
        XCTAssertTrue(try eventually { try OutboxAdmin.summary(connection).liveRelays == 1 })
        XCTAssertTrue(try eventually { try OutboxAdmin.summary(connection).pending == 0 })
        XCTAssertNil(try OutboxAdmin.summary(connection).noRelayWarning)
        relay.stop()
        XCTAssertEqual(try OutboxAdmin.summary(connection).liveRelays, 0, "a stopped relay removes its heartbeat row")
    }
}

/// A value two threads share under a lock.
final class Shared<T>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: T
    init(_ value: T) { self.value = value }
    func withLock<R>(_ body: (inout T) throws -> R) rethrows -> R {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}

/// Hands a non-Sendable value to one other thread, which alone uses it until the test reads the result.
struct Unchecked<T>: @unchecked Sendable {
    let value: T
    init(_ value: T) { self.value = value }
}
