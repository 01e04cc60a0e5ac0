import Foundation
import WorkersTestServices
import XCTest

@testable import WorkersStorage

/// Migrations: file naming, ordering, exactly-once under concurrency, status, checksums, rollback.
/// Every test uses a database of its own (a migration test needs an empty schema).
final class MigratorTests: XCTestCase {
    private var databases: [PostgresTestDatabase] = []

    override func tearDown() {
        databases.forEach { $0.drop() }
        databases.removeAll()
    }

    private func freshDatabase() throws -> PostgresTestDatabase {
        let database = try PostgresTestDatabase.create(prefix: "storage_test_migr")
        databases.append(database)
        return database
    }

    func testFileNameParsing() {
        XCTAssertEqual(Migration.parseFileName("0001_ledger.sql")?.version, 1)
        XCTAssertEqual(Migration.parseFileName("0002_domain.sql")?.name, "domain")
        XCTAssertEqual(Migration.parseFileName("0010_add_index_x.sql")?.name, "add_index_x")
        XCTAssertNil(Migration.parseFileName("README.md"))
        XCTAssertNil(Migration.parseFileName("0001.sql"))
        XCTAssertNil(Migration.parseFileName("abcd_x.sql"))
        XCTAssertNil(Migration.parseFileName("0000_zero.sql"))
    }

    func testBundledMigrationsAreOrderedAndNamed() throws {
        let migrations = try Migration.bundled()
        XCTAssertGreaterThanOrEqual(migrations.count, 2)
        // Strictly increasing from 1; gaps are allowed (areas reserve their own numbers, e.g. 0010_receipts).
        // The app's line starts at 2 (0001_ledger is the runtime's, WorkersSchema).
        XCTAssertEqual(migrations.first?.version, 2)
        XCTAssertEqual(migrations.map(\.version), migrations.map(\.version).sorted())
        XCTAssertEqual(Set(migrations.map(\.version)).count, migrations.count, "versions are unique")
        XCTAssertEqual(migrations.first?.name, "domain")
        XCTAssertEqual(migrations.first?.checksum.count, 64)
        let runtime = try WorkersSchema.migrations()
        XCTAssertEqual(runtime.first?.name, "ledger")
        XCTAssertEqual(Set(runtime.map(\.version)).intersection(migrations.map(\.version)), [], "the lines share no number")
    }

    func testDuplicateVersionsAreRejected() {
        XCTAssertThrowsError(try Migrator(migrations: [Migration(version: 1, name: "a", sql: "SELECT 1"),
                                                       Migration(version: 1, name: "b", sql: "SELECT 2")])) {
            XCTAssertEqual(($0 as? PostgresError)?.category, .migration)
        }
    }

    func testStatusBeforeAndAfterMigrating() throws {
        let database = try freshDatabase()
        let conn = try database.connect()
        defer { conn.close() }
        let migrator = try Migrator.bundled()

        let before = try migrator.status(on: conn)
        XCTAssertTrue(before.applied.isEmpty)
        XCTAssertEqual(before.pending.map(\.version), migrator.migrations.map(\.version))
        XCTAssertFalse(before.isUpToDate)
        XCTAssertFalse(try migrator.isUpToDate(on: conn))

        XCTAssertThrowsError(try migrator.requireUpToDate(on: conn)) { error in
            XCTAssertEqual((error as? PostgresError)?.category, .migration)
            XCTAssertTrue("\(error)".contains("0002_domain"), "\(error)")
        }

        let applied = try migrator.migrate(on: conn)
        XCTAssertEqual(applied.map(\.version), migrator.migrations.map(\.version))

        let after = try migrator.status(on: conn)
        XCTAssertEqual(after.applied.map(\.version), migrator.migrations.map(\.version))
        XCTAssertEqual(after.applied.map(\.checksum), migrator.migrations.map(\.checksum))
        XCTAssertTrue(after.pending.isEmpty)
        XCTAssertTrue(after.modified.isEmpty)
        XCTAssertTrue(after.isUpToDate)
        XCTAssertNoThrow(try migrator.requireUpToDate(on: conn))

        XCTAssertEqual(try migrator.migrate(on: conn), [], "a second run applies nothing")
        XCTAssertEqual(try conn.queryFirst("SELECT count(*) AS n FROM schema_migrations")?.int("n"), migrator.migrations.count)
    }

    func testTenConcurrentMigratorsApplyEachMigrationOnce() throws {
        let database = try freshDatabase()
        let migrator = try Migrator.bundled()
        let url = database.url
        let outcomes = runOnThreads(10) { _ in
            ThreadOutcome { () -> [Int] in
                let conn = try PostgresConnection(url: url)   // one session per "process"
                defer { conn.close() }
                return try migrator.migrate(on: conn).map(\.version)
            }
        }
        let perThread = outcomes.compactMap(\.value)
        XCTAssertEqual(perThread.count, 10, "every migrator succeeded: \(outcomes)")
        XCTAssertEqual(perThread.flatMap { $0 }.sorted(), migrator.migrations.map(\.version), "each applied exactly once in total")
        let conn = try database.connect()
        defer { conn.close() }
        let versions = try conn.query("SELECT version FROM schema_migrations ORDER BY version").map { try $0.int("version") }
        XCTAssertEqual(versions, migrator.migrations.map(\.version))
        XCTAssertTrue(try migrator.isUpToDate(on: conn))
    }

    func testMigrationsApplyInVersionOrderAndStatusShowsLaterOnesPending() throws {
        let database = try freshDatabase()
        let conn = try database.connect()
        defer { conn.close() }
        let first = Migration(version: 1, name: "a", sql: "CREATE TABLE a (x integer);")
        let second = Migration(version: 2, name: "b", sql: "CREATE TABLE b (a_x integer); INSERT INTO b SELECT x FROM a;")
        // Given out of order on purpose.
        XCTAssertEqual(try Migrator(migrations: [second, first]).migrations.map(\.version), [1, 2])
        try Migrator(migrations: [first]).migrate(on: conn)

        let upgraded = try Migrator(migrations: [second, first])
        let status = try upgraded.status(on: conn)
        XCTAssertEqual(status.applied.map(\.version), [1])
        XCTAssertEqual(status.pending.map(\.version), [2])
        XCTAssertFalse(status.isUpToDate)
        XCTAssertEqual(try upgraded.migrate(on: conn).map(\.version), [2])
        XCTAssertTrue(try upgraded.isUpToDate(on: conn))

        // A binary that ships fewer migrations than the database has sees them as unknown but is up to date.
        let older = try Migrator(migrations: [first]).status(on: conn)
        XCTAssertEqual(older.unknown, [2])
        XCTAssertTrue(older.isUpToDate)
    }

    func testModifiedAppliedMigrationIsDetectedAndBlocksMigrate() throws {
        let database = try freshDatabase()
        let conn = try database.connect()
        defer { conn.close() }
        try Migrator(migrations: [Migration(version: 1, name: "a", sql: "CREATE TABLE a (x integer);")]).migrate(on: conn)
        let edited = try Migrator(migrations: [
            Migration(version: 1, name: "a", sql: "CREATE TABLE a (x bigint);"),
            Migration(version: 2, name: "b", sql: "CREATE TABLE b (y integer);"),
        ])
        let status = try edited.status(on: conn)
        XCTAssertEqual(status.modified, [1])
        XCTAssertFalse(status.isUpToDate)
        XCTAssertThrowsError(try edited.migrate(on: conn)) { XCTAssertEqual(($0 as? PostgresError)?.category, .migration) }
        XCTAssertNil(try conn.queryFirst("SELECT to_regclass('b') AS t")?.optionalString("t"), "nothing applied")
    }

    func testFailingMigrationLeavesNoTraceAndStopsTheRun() throws {
        let database = try freshDatabase()
        let conn = try database.connect()
        defer { conn.close() }
        let migrator = try Migrator(migrations: [
            Migration(version: 1, name: "ok", sql: "CREATE TABLE ok (x integer);"),
            Migration(version: 2, name: "broken", sql: "CREATE TABLE half (x integer);\nSELECT 1/0;"),
            Migration(version: 3, name: "later", sql: "CREATE TABLE later (x integer);"),
        ])
        XCTAssertThrowsError(try migrator.migrate(on: conn)) { error in
            XCTAssertEqual((error as? PostgresError)?.sqlState, "22012")
            XCTAssertTrue((error as? PostgresError)?.message.contains("0002_broken") ?? false, "\(error)")
        }
        let status = try migrator.status(on: conn)
        XCTAssertEqual(status.applied.map(\.version), [1])
        XCTAssertEqual(status.pending.map(\.version), [2, 3])
        XCTAssertNil(try conn.queryFirst("SELECT to_regclass('half') AS t")?.optionalString("t"))
        XCTAssertNil(try conn.queryFirst("SELECT to_regclass('later') AS t")?.optionalString("t"))
        // The advisory lock was released: another session can migrate (and fail the same way) without waiting.
        let other = try database.connect()
        defer { other.close() }
        XCTAssertEqual(try other.queryFirst("SELECT pg_try_advisory_lock($1) AS got", [Migrator.advisoryLockKey])?.bool("got"), true)
    }

    func testDomainSchemaHasTheTablesTheJobsNeed() throws {
        let database = try freshDatabase()
        let pool = PostgresPool(url: database.url, maxConnections: 1)
        defer { pool.shutdown() }
        try BundledSchema.migrate(pool: pool)
        let tables = Set(try pool.withConnection { conn in
            try conn.query("SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'").map { try $0.string("table_name") }
        })
        let expected: Set<String> = [
            "schema_migrations", "workers_migrations", "job_ledger", "users", "privacy_settings", "oauth_connections", "game_center_connections",
            "refresh_tokens", "audit_logs", "privacy_exports", "deletion_requests", "subscription_plans", "subscriptions",
            "subscription_events", "iap_receipts", "credit_transactions", "user_locations", "geocode_cache", "quiz_history",
            "user_achievements", "ad_requests", "ad_views", "ad_revenue_daily", "freemium_campaigns",
            "campaign_participations", "pending_rewards", "notifications",
        ]
        XCTAssertEqual(expected.subtracting(tables), [], "missing tables")

        // The upsert keys the jobs rely on exist.
        try pool.withConnection { conn in
            try conn.transaction { tx in
                let appID = UUID()
                let userID = try XCTUnwrap(try tx.queryFirst("INSERT INTO users (app_id, email, status) VALUES ($1, $2, 'free') RETURNING id", [appID, "u@example.com"])?.uuid("id"))
                for _ in 0..<2 {
                    try tx.execute("""
                        INSERT INTO subscriptions (app_id, user_id, plan_type, status, start_date, end_date, store,
                                                   store_product_id, store_transaction_id)
                        VALUES ($1, $2, 'annual', 'trial', now(), now() + interval '7 days', 'apple', 'com.quiz.premium.annual', $3)
                        ON CONFLICT (store_transaction_id) DO UPDATE SET status = EXCLUDED.status, updated_at = now()
                        """, [appID, userID, "1000000123456789"])
                    try tx.execute("""
                        INSERT INTO ad_revenue_daily (day, app_id, ad_type, provider, placement, impressions, revenue_usd)
                        VALUES ($1, $2, 'rewarded', 'admob', 'earn_credits', 10, 0.5)
                        ON CONFLICT (day, app_id, ad_type, provider, placement)
                        DO UPDATE SET impressions = EXCLUDED.impressions, revenue_usd = EXCLUDED.revenue_usd
                        """, [PostgresDay(year: 2025, month: 11, day: 23), appID])
                }
                XCTAssertEqual(try tx.queryFirst("SELECT count(*) AS n FROM subscriptions")?.int("n"), 1)
                XCTAssertEqual(try tx.queryFirst("SELECT count(*) AS n FROM ad_revenue_daily")?.int("n"), 1)
                XCTAssertThrowsError(try tx.transaction { inner in
                    try inner.execute("UPDATE subscriptions SET status = $1", ["bogus"])
                }) { XCTAssertEqual(($0 as? PostgresError)?.sqlState, "23514") }
            }
        }
    }

    /// `probe_rows` (bench/test only) left the production schema: its migration 0003_probe is retired.
    /// A fresh database no longer gets the table, and a database that applied 0003 before still migrates
    /// cleanly and is up to date, its row reported as retired rather than as a schema ahead of the code.
    func testRetiredProbeMigrationIsNotShippedAndOldDatabasesStillMigrate() throws {
        func hasProbeRows(_ conn: PostgresConnection) throws -> Bool {
            try conn.queryFirst("SELECT to_regclass('probe_rows') IS NOT NULL AS present")?.bool("present") ?? false
        }
        let bundled = try Migrator.bundled()
        XCTAssertFalse(bundled.migrations.map(\.version).contains(3))

        let fresh = try freshDatabase().connect()
        defer { fresh.close() }
        try bundled.migrate(on: fresh)
        XCTAssertFalse(try hasProbeRows(fresh), "workerctl migrate must not create the bench table")
        XCTAssertEqual(try bundled.status(on: fresh).retired, [])

        // A database migrated by an older build: 0002 and the old 0003_probe.
        let old = try freshDatabase().connect()
        defer { old.close() }
        let oldProbe = Migration(version: 3, name: "probe", sql: """
            CREATE TABLE probe_rows (id bigserial PRIMARY KEY, jid text NOT NULL, note text NOT NULL DEFAULT '',
                                     inserted_at timestamptz NOT NULL DEFAULT clock_timestamp());
            """)
        try Migrator(migrations: bundled.migrations.filter { $0.version < 3 } + [oldProbe]).migrate(on: old)
        let applied = try bundled.migrate(on: old)
        XCTAssertEqual(applied.map(\.version), bundled.migrations.map(\.version).filter { $0 > 3 })
        let status = try bundled.status(on: old)
        XCTAssertEqual(status.retired, [3])
        XCTAssertEqual(status.unknown, [])
        XCTAssertTrue(status.isUpToDate)
        XCTAssertNoThrow(try bundled.requireUpToDate(on: old))
        XCTAssertTrue(try hasProbeRows(old), "an old database keeps its table; the operator may drop it")

        // A retired number is never reused.
        XCTAssertThrowsError(try Migrator(migrations: [oldProbe], retired: Migration.retired))
    }
}
