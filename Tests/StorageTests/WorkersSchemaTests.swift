import Foundation
import WorkersTestServices
import XCTest

@testable import WorkersStorage

/// The runtime's own schema as an API (`WorkersSchema`, issue 53 point 2): its line in `workers_migrations`, apart
/// from any app's tables and from `schema_migrations`; an upgrade from a database migrated before the split; repeated
/// and concurrent runs; a schema the adopter names. Every test uses a database of its own.
final class WorkersSchemaTests: XCTestCase {
    private var databases: [PostgresTestDatabase] = []

    override func tearDown() {
        databases.forEach { $0.drop() }
        databases.removeAll()
    }

    private func freshDatabase() throws -> PostgresTestDatabase {
        let database = try PostgresTestDatabase.create(prefix: "storage_test_wschema")
        databases.append(database)
        return database
    }

    /// Every row of `sql`'s result as text, for before/after comparisons.
    private func snapshot(_ conn: PostgresConnection, _ sql: String) throws -> [String] {
        try conn.query(sql).map { try $0.string("r") }
    }

    private func count(_ conn: PostgresConnection, _ table: String) throws -> Int {
        try XCTUnwrap(try conn.queryFirst("SELECT count(*) AS n FROM \(table)")).int("n")
    }

    func testTheRuntimeSchemaGoesIntoADatabaseWithItsOwnUsersAndRailsSchemaMigrationsAndLeavesBothUntouched() throws {
        let database = try freshDatabase()
        let conn = try database.connect()
        defer { conn.close() }
        try conn.executeScript("""
            CREATE TABLE users (id bigserial PRIMARY KEY, email text NOT NULL);
            INSERT INTO users (email) VALUES ('a@example.com'), ('b@example.com');
            CREATE TABLE schema_migrations (version character varying NOT NULL PRIMARY KEY);
            INSERT INTO schema_migrations (version) VALUES ('20240101000000'), ('20240202000000');
            """)
        let shape = """
            SELECT table_name || '.' || column_name || ':' || data_type AS r FROM information_schema.columns
             WHERE table_schema = 'public' AND table_name IN ('users', 'schema_migrations') ORDER BY 1
            """
        let rows = "SELECT 'u' || id || email AS r FROM users UNION ALL SELECT 'v' || version FROM schema_migrations ORDER BY 1"
        let shapeBefore = try snapshot(conn, shape)
        let rowsBefore = try snapshot(conn, rows)

        let shipped = try WorkersSchema.migrations()
        XCTAssertEqual(try WorkersSchema.pending(url: database.url).map(\.version), shipped.map(\.version))
        XCTAssertNil(try WorkersSchema.current(url: database.url))
        let applied = try WorkersSchema.migrate(url: database.url)

        XCTAssertEqual(applied.map(\.version), shipped.map(\.version))
        XCTAssertEqual(try snapshot(conn, shape), shapeBefore, "the app's tables keep their shape")
        XCTAssertEqual(try snapshot(conn, rows), rowsBefore, "and their rows")
        XCTAssertEqual(try WorkersSchema.pending(url: database.url), [])
        XCTAssertEqual(try WorkersSchema.current(url: database.url), shipped.last?.version)
        XCTAssertEqual(try conn.query("SELECT version FROM workers_migrations WHERE line = 'workers' ORDER BY version").map { try $0.int("version") },
                       shipped.map(\.version))
        for table in ["job_ledger", "job_outbox", "job_outbox_relays", "subject_keys", "subject_key_encryption_keys",
                      "subject_key_erasures", "workers_personal_fields"] {
            XCTAssertEqual(try conn.queryFirst("SELECT to_regclass($1) IS NOT NULL AS present", [table])?.bool("present"), true, table)
        }
        XCTAssertNotNil(try conn.queryFirst("SELECT workers_enqueue('Billing::Reminder', '[1]') AS jid")?.string("jid"))
    }

    func testAnUpgradeFromASchemaMigratedBeforeTheSplitRunsNothingTwiceAndLosesNoRow() throws {
        let database = try freshDatabase()
        let conn = try database.connect()
        defer { conn.close() }
        // What `workerctl migrate` of a build before the split did: every file, runtime's and app's, in one line,
        // recorded in schema_migrations (the files are byte for byte the same, so are their checksums).
        let runtime = try WorkersSchema.migrations()
        let app = try Migration.bundled()
        XCTAssertEqual(Set(runtime.map(\.version)), Set(WorkersSchema.legacyVersions.keys))
        try Migrator(migrations: runtime + app).migrate(on: conn)
        let legacyBefore = try snapshot(conn, "SELECT version || name || checksum || applied_at AS r FROM schema_migrations ORDER BY version")

        // Rows in the runtime's tables and the app's.
        try conn.executeScript("""
            INSERT INTO job_ledger (jid, job_class, queue, finished_at) VALUES
                ('aaaaaaaaaaaaaaaaaaaaaaa1', 'A', 'default', now()), ('aaaaaaaaaaaaaaaaaaaaaaa2', 'A', 'default', NULL),
                ('aaaaaaaaaaaaaaaaaaaaaaa3', 'B', 'low', now());
            SELECT workers_enqueue('A', '[1]'); SELECT workers_enqueue('B', '[2]', queue => 'low');
            INSERT INTO subject_key_erasures (person_id) VALUES (gen_random_uuid());
            INSERT INTO users (app_id, email) VALUES (gen_random_uuid(), 'c@example.com');
            """)
        let tables = ["job_ledger", "job_outbox", "subject_key_erasures", "users"]
        let countsBefore = try tables.map { try count(conn, $0) }
        XCTAssertEqual(countsBefore, [3, 2, 1, 1])

        XCTAssertEqual(try WorkersSchema.pending(url: database.url), [], "an older build's rows count as applied")
        let applied = try BundledSchema.migrate(on: conn)

        XCTAssertEqual(applied, [], "nothing ran twice")
        XCTAssertEqual(try tables.map { try count(conn, $0) }, countsBefore, "no row lost")
        XCTAssertEqual(try snapshot(conn, "SELECT version || name || checksum || applied_at AS r FROM schema_migrations ORDER BY version"),
                       legacyBefore, "the old rows stay: an older build still finds its schema complete")
        XCTAssertEqual(try conn.query("SELECT version, checksum FROM workers_migrations WHERE line = 'workers' ORDER BY version")
                           .map { "\(try $0.int("version")):\(try $0.string("checksum"))" },
                       runtime.map { "\($0.version):\($0.checksum)" }, "recorded in the runtime's line")
        let appStatus = try Migrator.bundled().status(on: conn)
        XCTAssertTrue(appStatus.isUpToDate)
        XCTAssertEqual(appStatus.unknown, [], "the moved versions are not a schema ahead of the app")
        XCTAssertEqual(Set(appStatus.retired), Set(runtime.map(\.version)))
        XCTAssertTrue(try WorkersSchema.status(on: conn).isUpToDate)
    }

    func testMigratingTwiceInARowIsANoOp() throws {
        let database = try freshDatabase()
        XCTAssertFalse(try WorkersSchema.migrate(url: database.url).isEmpty)
        let conn = try database.connect()
        defer { conn.close() }
        let recorded = "SELECT line || version || checksum || applied_at AS r FROM workers_migrations ORDER BY version"
        let before = try snapshot(conn, recorded)
        XCTAssertEqual(try WorkersSchema.migrate(url: database.url), [])
        XCTAssertEqual(try snapshot(conn, recorded), before)
    }

    func testTenProcessesMigratingAtOnceApplyEachMigrationOnce() throws {
        let database = try freshDatabase()
        let url = database.url
        let outcomes = runOnThreads(10) { _ in
            ThreadOutcome { try WorkersSchema.migrate(url: url).map(\.version) }   // one session each
        }
        let perProcess = outcomes.compactMap(\.value)
        XCTAssertEqual(perProcess.count, 10, "every migration call succeeded: \(outcomes)")
        XCTAssertEqual(perProcess.flatMap { $0 }.sorted(), try WorkersSchema.migrations().map(\.version), "each applied once in all")
        let conn = try database.connect()
        defer { conn.close() }
        XCTAssertEqual(try count(conn, "workers_migrations"), try WorkersSchema.migrations().count)
    }

    func testARuntimeSchemaInASchemaTheAdopterNamesWorksThroughTheSearchPath() throws {
        let database = try freshDatabase()
        try WorkersSchema.migrate(url: database.url, schema: "jobs_rt")
        let conn = try database.connect()
        defer { conn.close() }
        XCTAssertEqual(try conn.queryFirst("SELECT to_regclass('jobs_rt.job_ledger') IS NOT NULL AND to_regclass('public.job_ledger') IS NULL AS inside")?.bool("inside"), true)
        XCTAssertEqual(try WorkersSchema.pending(url: database.url, schema: "jobs_rt"), [])
        XCTAssertEqual(try WorkersSchema.pending(url: database.url).count, try WorkersSchema.migrations().count,
                       "the search_path (public) has none of it")
        XCTAssertThrowsError(try WorkersSchema.migrate(url: database.url, schema: "Jobs; DROP")) {
            XCTAssertEqual(($0 as? PostgresError)?.category, .usage)
        }

        // A process whose URL puts the schema on its search_path: the runtime's SQL finds its objects, the SECURITY
        // DEFINER size check (pinned search_path) included.
        let scoped = try PostgresConnection(url: database.url + "?options=-c%20search_path%3Djobs_rt")
        defer { scoped.close() }
        XCTAssertEqual(try WorkersSchema.status(on: scoped).pending, [])
        try scoped.execute("INSERT INTO workers_personal_fields (class, fields) VALUES ('Mail', ARRAY['email'])")
        XCTAssertNotNil(try scoped.queryFirst("SELECT workers_enqueue('Mail', '[{\"email\": \"a@example.com\"}]') AS jid")?.string("jid"))
        XCTAssertEqual(try count(conn, "jobs_rt.job_outbox"), 1)
    }
}
