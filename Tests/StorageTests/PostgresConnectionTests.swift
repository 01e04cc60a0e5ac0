import Foundation
import WorkersTestServices
import XCTest

@testable import WorkersStorage

/// The libpq wrapper against the real server: binding, decoding, errors, transactions, lost sessions.
final class PostgresConnectionTests: XCTestCase {
    nonisolated(unsafe) static var database: PostgresTestDatabase?
    var connection: PostgresConnection!

    override class func setUp() {
        super.setUp()
        database = try? PostgresTestDatabase.create(prefix: "storage_test_conn")
    }

    override class func tearDown() {
        database?.drop()
        database = nil
        super.tearDown()
    }

    override func setUpWithError() throws {
        let database = try XCTUnwrap(Self.database, "could not create the test database")
        connection = try database.connect()
        try connection.executeScript("""
            DROP TABLE IF EXISTS items;
            CREATE TABLE items (id serial PRIMARY KEY, name text UNIQUE, note text);
            """)
    }

    override func tearDown() {
        connection?.close()
        connection = nil
    }

    // MARK: - Parameters

    func testParametersRoundTripVerbatimIncludingInjectionLookingStrings() throws {
        let values: [String] = [
            "O'Brien",
            "Robert'); DROP TABLE items;--",
            "'; DELETE FROM items WHERE ''='",
            #"back\slash \\ and "double" quotes"#,
            "$1 $2 ? %s",
            "Zoë – Ünïcødé 日本語 😀",
            "",
            "line\nbreak\ttab",
        ]
        for (index, value) in values.enumerated() {
            try connection.execute("INSERT INTO items (name, note) VALUES ($1, $2)", ["v\(index)", value])
        }
        for (index, value) in values.enumerated() {
            let row = try XCTUnwrap(try connection.queryFirst("SELECT note FROM items WHERE name = $1", ["v\(index)"]))
            XCTAssertEqual(try row.string("note"), value)
        }
        // The table survived and no extra statement ran.
        XCTAssertEqual(try connection.queryFirst("SELECT count(*) AS n FROM items")?.int("n"), values.count)
        // A value is compared as a value, never as SQL.
        XCTAssertNil(try connection.queryFirst("SELECT id FROM items WHERE name = $1", ["x' OR '1'='1"]))
    }

    func testNullParametersAndOptionals() throws {
        let missing: String? = nil
        let present: String? = "here"
        try connection.execute("INSERT INTO items (name, note) VALUES ($1, $2)", ["a", nil])
        try connection.execute("INSERT INTO items (name, note) VALUES ($1, $2)", ["b", missing])
        try connection.execute("INSERT INTO items (name, note) VALUES ($1, $2)", ["c", present])
        let rows = try connection.query("SELECT name, note FROM items ORDER BY name")
        XCTAssertEqual(rows.count, 3)
        XCTAssertNil(try rows[0].optionalString("note"))
        XCTAssertTrue(try rows[1].isNull("note"))
        XCTAssertEqual(try rows[2].optionalString("note"), "here")
        XCTAssertEqual(try connection.queryFirst("SELECT $1::text IS NULL AS isnull", [nil])?.bool("isnull"), true)
    }

    func testArrayParameters() throws {
        let names = ["a\"quote", "back\\slash", "{brace},comma", "NULL", "ünï"]
        for name in names { try connection.execute("INSERT INTO items (name) VALUES ($1)", [name]) }
        try connection.execute("INSERT INTO items (name) VALUES ($1)", ["not selected"])
        let rows = try connection.query("SELECT name FROM items WHERE name = ANY($1::text[]) ORDER BY id", [names])
        XCTAssertEqual(try rows.map { try $0.string("name") }, names)
        let withNull: [String?] = ["x", nil]
        XCTAssertEqual(try connection.queryFirst("SELECT array_length($1::text[], 1) AS n, ($1::text[])[2] IS NULL AS second_null", [withNull])?.bool("second_null"), true)
        XCTAssertEqual(try connection.queryFirst("SELECT cardinality($1::bigint[]) AS n", [[Int64]()])?.int("n"), 0)
        XCTAssertEqual(try connection.queryFirst("SELECT ($1::uuid[])[1] AS id", [[UUID(uuidString: "6f1c9d4e-0a1b-4c2d-8e3f-5a6b7c8d9e0f")!]])?.uuid("id"),
                       UUID(uuidString: "6f1c9d4e-0a1b-4c2d-8e3f-5a6b7c8d9e0f"))
    }

    func testSSLModeFromTheURLIsHonoured() throws {
        let database = try XCTUnwrap(Self.database)
        // The test server runs without TLS: `disable` connects, `require` must fail as a connection error.
        let plain = try PostgresConnection(url: database.url + "?sslmode=disable")
        XCTAssertEqual(try plain.queryFirst("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")?.bool("ssl"), false)
        plain.close()
        XCTAssertThrowsError(try PostgresConnection(url: database.url + "?sslmode=require")) { error in
            XCTAssertTrue(PostgresError.isConnectionFailure(error))
            XCTAssertTrue("\(error)".lowercased().contains("ssl"), "\(error)")
        }
    }

    func testNulByteInParameterIsAUsageError() {
        XCTAssertThrowsError(try connection.execute("INSERT INTO items (name) VALUES ($1)", ["a\u{0}b"])) { error in
            XCTAssertEqual((error as? PostgresError)?.category, .usage)
        }
        // In an array element too, and in any parameter position (the message names it).
        XCTAssertThrowsError(try connection.query("SELECT $1::text AS a, $2::text[] AS b", ["fine", ["x", "y\u{0}"]])) { error in
            XCTAssertEqual((error as? PostgresError)?.category, .usage)
            XCTAssertTrue("\(error)".contains("$2"), "\(error)")
        }
    }

    /// Parameters of several kinds in one statement (each value's text follows the previous one's in one buffer):
    /// NULLs between values, quotes and backslashes in array elements, types that go through `postgresText`.
    func testMixedParametersKeepTheirOwnValues() throws {
        let day = PostgresDay(year: 2026, month: 11, day: 26)
        let elements: [String?] = ["a\"b", nil, "c\\d", ""]
        let row = try XCTUnwrap(try connection.queryFirst("""
            SELECT $1::text AS first, $2::text IS NULL AS second_null, $3::text[] = ARRAY['a"b', NULL, 'c\\d', '']::text[]
                   AS same, ($3::text[])[2] IS NULL AS element_null, $4::date = DATE '2026-11-26' AS day, $5::bigint AS n,
                   $6::text AS last
            """, ["één", nil, elements, day, Int64(-42), ""]))
        XCTAssertEqual(try row.string("first"), "één")
        XCTAssertEqual(try row.bool("second_null"), true)
        XCTAssertEqual(try row.bool("element_null"), true)
        XCTAssertEqual(try row.bool("day"), true)
        XCTAssertEqual(try row.int("n"), -42)
        XCTAssertEqual(try row.string("last"), "")
        XCTAssertEqual(try row.bool("same"), true)
    }

    func testSeveralStatementsInOneQueryAreRefused() {
        XCTAssertThrowsError(try connection.query("SELECT 1; DROP TABLE items")) { error in
            XCTAssertEqual((error as? PostgresError)?.sqlState, "42601")
        }
        XCTAssertNoThrow(try connection.query("SELECT count(*) FROM items"))
    }

    func testAffectedRowsAndCommandTag() throws {
        XCTAssertEqual(try connection.execute("INSERT INTO items (name) VALUES ($1), ($2), ($3)", ["a", "b", "c"]), 3)
        XCTAssertEqual(try connection.execute("UPDATE items SET note = $1 WHERE name <> $2", ["n", "a"]), 2)
        let deleted = try connection.query("DELETE FROM items WHERE name = $1", ["zzz"])
        XCTAssertEqual(deleted.affectedRows, 0)
        XCTAssertEqual(deleted.commandTag, "DELETE 0")
    }

    // MARK: - Decoding

    func testTypedDecoding() throws {
        let row = try XCTUnwrap(try connection.queryFirst("""
            SELECT 9007199254740993::bigint AS big, 42 AS small, 3.25::float8 AS dbl, 39.99::numeric(10,2) AS price,
                   true AS yes, false AS no, 'héllo'::text AS txt,
                   '2025-11-23 16:00:00.123456+00'::timestamptz AS ts,
                   '2025-11-23 18:30:00+02:30'::timestamptz AS ts_offset,
                   '2025-11-23'::date AS day,
                   '6f1c9d4e-0a1b-4c2d-8e3f-5a6b7c8d9e0f'::uuid AS id,
                   '\\x00ff10'::bytea AS bytes,
                   NULL::bigint AS nothing, 'NaN'::float8 AS nan
            """))
        XCTAssertEqual(try row.int64("big"), 9_007_199_254_740_993)
        XCTAssertEqual(try row.int("small"), 42)
        XCTAssertEqual(try row.double("dbl"), 3.25)
        XCTAssertEqual(try row.double("price"), 39.99, accuracy: 1e-9)
        XCTAssertEqual(try row.bool("yes"), true)
        XCTAssertEqual(try row.bool("no"), false)
        XCTAssertEqual(try row.string("txt"), "héllo")
        XCTAssertEqual(try row.date("ts").timeIntervalSince1970, 1_763_913_600.123456, accuracy: 1e-6)
        XCTAssertEqual(try row.date("ts_offset").timeIntervalSince1970, 1_763_913_600, accuracy: 1e-6)
        XCTAssertEqual(try row.date("day").timeIntervalSince1970, 1_763_856_000, accuracy: 1e-6)
        XCTAssertEqual(try row.day("day"), PostgresDay(year: 2025, month: 11, day: 23))
        XCTAssertEqual(try row.uuid("id"), UUID(uuidString: "6f1c9d4e-0a1b-4c2d-8e3f-5a6b7c8d9e0f"))
        XCTAssertEqual(try row.data("bytes"), Data([0x00, 0xff, 0x10]))
        XCTAssertNil(try row.optionalInt64("nothing"))
        XCTAssertNil(try row.optionalDate("nothing"))
        XCTAssertTrue(try row.double("nan").isNaN)
    }

    func testBoundValuesRoundTripThroughTheServer() throws {
        let date = Date(timeIntervalSince1970: 1_700_000_000.654321)
        let id = UUID()
        let bytes = Data([0, 1, 2, 250, 255])
        let row = try XCTUnwrap(try connection.queryFirst(
            "SELECT $1::timestamptz AS ts, $2::uuid AS id, $3::bytea AS bytes, $4::float8 AS dbl, $5::bigint AS big, $6::boolean AS flag, $7::date AS day",
            [date, id, bytes, -0.1, Int64.min, true, PostgresDay(year: 2024, month: 2, day: 29)]))
        XCTAssertEqual(try row.date("ts").timeIntervalSince1970, date.timeIntervalSince1970, accuracy: 1e-6)
        XCTAssertEqual(try row.uuid("id"), id)
        XCTAssertEqual(try row.data("bytes"), bytes)
        XCTAssertEqual(try row.double("dbl"), -0.1)
        XCTAssertEqual(try row.int64("big"), Int64.min)
        XCTAssertTrue(try row.bool("flag"))
        XCTAssertEqual(try row.day("day").description, "2024-02-29")
    }

    func testDecodingFailuresAreTypedErrorsNotCrashes() throws {
        let row = try XCTUnwrap(try connection.queryFirst("SELECT 'abc'::text AS word, NULL::int AS nothing"))
        for attempt in [{ _ = try row.int64("word") }, { _ = try row.int("nothing") }, { _ = try row.string("missing") },
                        { _ = try row.date("word") }, { _ = try row.uuid("word") }, { _ = try row.bool("word") },
                        { _ = try row.optionalInt("word") }] as [() throws -> Void] {
            XCTAssertThrowsError(try attempt()) { error in
                XCTAssertEqual((error as? PostgresError)?.category, .decoding)
                XCTAssertEqual((error as? PostgresError)?.query, "SELECT 'abc'::text AS word, NULL::int AS nothing")
            }
        }
    }

    // MARK: - Errors

    func testUniqueViolationCarriesSQLStateAndContext() throws {
        try connection.execute("INSERT INTO items (name) VALUES ($1)", ["dup"])
        XCTAssertThrowsError(try connection.execute("INSERT INTO items (name)\nVALUES ($1)", ["dup"])) { error in
            guard let error = error as? PostgresError else { return XCTFail("not a PostgresError: \(error)") }
            XCTAssertEqual(error.sqlState, "23505")
            XCTAssertTrue(error.isUniqueViolation)
            XCTAssertEqual(error.category, .query)
            XCTAssertFalse(error.isConnectionFailure)
            XCTAssertFalse(error.isTransient)
            XCTAssertEqual(error.constraint, "items_name_key")
            XCTAssertEqual(error.query, "INSERT INTO items (name)")
            XCTAssertTrue(error.message.contains("duplicate key"), error.message)
            XCTAssertFalse("\(error)".contains("dup)"), "parameters must not leak into the description")
        }
        // The session is still usable after a statement error.
        XCTAssertEqual(try connection.queryFirst("SELECT 1 AS one")?.int("one"), 1)
    }

    /// A data exception's message quotes the input it refused; a bound e-mail or coordinate must not reach the
    /// error's message or description (which go to logs and the dead set), while identifiers in other classes'
    /// messages stay (they say what is wrong).
    func testDataExceptionsDoNotCarryTheValueTheyQuote() throws {
        let email = "jane.doe@example.com"
        let cases: [(sql: String, value: String, state: String, kept: String)] = [
            ("SELECT $1::uuid AS u", email, "22P02", "invalid input syntax for type uuid"),
            ("SELECT $1::int AS i", "48.8566\"2.3522", "22P02", "invalid input syntax for type integer"),
            ("SELECT $1::int AS i", "99999999999", "22003", "out of range for type integer"),
            ("SELECT $1::date AS d", "2024-02-30", "22008", "date/time field value out of range"),
            ("SELECT $1::timestamptz AS t", "2024-01-01 \(email)", "22023", "not recognized"),
        ]
        for (sql, value, state, kept) in cases {
            XCTAssertThrowsError(try connection.query(sql, [value]), sql) { error in
                guard let error = error as? PostgresError else { return XCTFail("not a PostgresError: \(error)") }
                XCTAssertEqual(error.sqlState, state, error.message)
                XCTAssertTrue(error.message.contains(kept), error.message)
                XCTAssertTrue(error.message.contains("\"…\""), error.message)
                for text in [error.message, error.description, "\(error)"] {
                    XCTAssertFalse(text.contains(value), text)
                    XCTAssertFalse(text.contains("example.com"), text)
                }
            }
        }
        // Other classes quote identifiers, which stay.
        XCTAssertThrowsError(try connection.query("SELECT no_such_column FROM items")) { error in
            XCTAssertTrue((error as? PostgresError)?.message.contains("\"no_such_column\"") ?? false, "\(error)")
        }
        // Our own decoding failures name the column and the type, not the value.
        let row = try XCTUnwrap(try connection.queryFirst("SELECT $1::text AS contact", [email]))
        XCTAssertThrowsError(try row.uuid("contact")) { error in
            XCTAssertEqual((error as? PostgresError)?.category, .decoding)
            XCTAssertTrue("\(error)".contains("column \"contact\""), "\(error)")
            XCTAssertFalse("\(error)".contains("example.com"), "\(error)")
        }
    }

    func testSyntaxAndUndefinedTableErrors() {
        XCTAssertThrowsError(try connection.query("SELEC 1")) { XCTAssertEqual(($0 as? PostgresError)?.sqlState, "42601") }
        XCTAssertThrowsError(try connection.query("SELECT * FROM no_such_table")) { XCTAssertEqual(($0 as? PostgresError)?.sqlState, "42P01") }
        XCTAssertThrowsError(try connection.query("SELECT 1/0")) { XCTAssertEqual(($0 as? PostgresError)?.sqlState, "22012") }
    }

    func testConnectFailureIsAConnectionError() {
        XCTAssertThrowsError(try PostgresConnection(url: "postgres://postgres@127.0.0.1:1/none?connect_timeout=2")) { error in
            XCTAssertTrue(PostgresError.isConnectionFailure(error))
            XCTAssertTrue(PostgresError.isTransient(error))
        }
        XCTAssertThrowsError(try PostgresConnection(url: "mysql://localhost/db")) { error in
            XCTAssertEqual((error as? PostgresError)?.category, .usage)
        }
    }

    func testUnknownDatabaseIsAConnectionErrorWithoutPassword() {
        let url = try! PostgresTestDatabase.replacingDatabase(in: TestServices.databaseURL, with: "no_such_db_for_storage_tests")
        XCTAssertThrowsError(try PostgresConnection(url: url)) { error in
            XCTAssertTrue(PostgresError.isConnectionFailure(error))
            XCTAssertTrue("\(error)".contains("no_such_db_for_storage_tests"))
        }
    }

    func testTerminatedBackendIsRecognisedAsConnectionFailure() throws {
        let victim = try XCTUnwrap(Self.database).connect()
        defer { victim.close() }
        XCTAssertTrue(victim.checkAlive())
        try connection.query("SELECT pg_terminate_backend($1, 5000)", [victim.backendPID])
        XCTAssertThrowsError(try victim.query("SELECT 1")) { error in
            XCTAssertTrue(PostgresError.isConnectionFailure(error), "\(error)")
            XCTAssertTrue(PostgresError.isTransient(error))
        }
        XCTAssertFalse(victim.isOpen)
        XCTAssertThrowsError(try victim.query("SELECT 1")) { XCTAssertTrue(PostgresError.isConnectionFailure($0)) }
    }

    func testCheckAliveNoticesATerminatedIdleSession() throws {
        let victim = try XCTUnwrap(Self.database).connect()
        defer { victim.close() }
        try connection.query("SELECT pg_terminate_backend($1, 5000)", [victim.backendPID])
        XCTAssertFalse(victim.checkAlive())
    }

    func testClosedConnectionThrowsConnectionError() throws {
        let other = try XCTUnwrap(Self.database).connect()
        other.close()
        other.close()
        XCTAssertThrowsError(try other.query("SELECT 1")) { XCTAssertTrue(PostgresError.isConnectionFailure($0)) }
    }

    // MARK: - Transactions

    func testTransactionCommits() throws {
        let value = try connection.transaction { conn -> Int in
            try conn.execute("INSERT INTO items (name) VALUES ($1)", ["committed"])
            return 7
        }
        XCTAssertEqual(value, 7)
        XCTAssertFalse(connection.isInTransaction)
        XCTAssertNotNil(try connection.queryFirst("SELECT 1 AS x FROM items WHERE name = $1", ["committed"]))
    }

    func testTransactionRollsBackWhenBodyThrowsAndRethrowsTheSameError() throws {
        XCTAssertThrowsError(try connection.transaction { conn in
            try conn.execute("INSERT INTO items (name) VALUES ($1)", ["doomed"])
            throw TestFailure(reason: "boom")
        }) { error in
            XCTAssertEqual(error as? TestFailure, TestFailure(reason: "boom"))
        }
        XCTAssertFalse(connection.isInTransaction)
        XCTAssertNil(try connection.queryFirst("SELECT 1 AS x FROM items WHERE name = $1", ["doomed"]))
    }

    func testTransactionRollsBackOnStatementError() throws {
        try connection.execute("INSERT INTO items (name) VALUES ($1)", ["existing"])
        XCTAssertThrowsError(try connection.transaction { conn in
            try conn.execute("INSERT INTO items (name) VALUES ($1)", ["first"])
            try conn.execute("INSERT INTO items (name) VALUES ($1)", ["existing"])
        }) { XCTAssertEqual(($0 as? PostgresError)?.sqlState, "23505") }
        XCTAssertNil(try connection.queryFirst("SELECT 1 AS x FROM items WHERE name = $1", ["first"]))
    }

    func testSwallowedStatementErrorDoesNotCommit() throws {
        try connection.execute("INSERT INTO items (name) VALUES ($1)", ["existing"])
        XCTAssertThrowsError(try connection.transaction { conn in
            try conn.execute("INSERT INTO items (name) VALUES ($1)", ["sneaky"])
            _ = try? conn.execute("INSERT INTO items (name) VALUES ($1)", ["existing"])
        }) { XCTAssertEqual(($0 as? PostgresError)?.sqlState, "25P02") }
        XCTAssertFalse(connection.isInTransaction)
        XCTAssertNil(try connection.queryFirst("SELECT 1 AS x FROM items WHERE name = $1", ["sneaky"]))
    }

    func testNestedTransactionUsesASavepoint() throws {
        try connection.transaction { conn in
            try conn.execute("INSERT INTO items (name) VALUES ($1)", ["outer"])
            XCTAssertThrowsError(try conn.transaction { inner in
                try inner.execute("INSERT INTO items (name) VALUES ($1)", ["inner"])
                throw TestFailure(reason: "inner fails")
            })
            try conn.transaction { inner in
                try inner.execute("INSERT INTO items (name) VALUES ($1)", ["inner2"])
            }
        }
        let names = try connection.query("SELECT name FROM items ORDER BY name").map { try $0.string("name") }
        XCTAssertEqual(names, ["inner2", "outer"])
    }

    // MARK: - Pipelines

    func testPipelineReturnsEveryResultInOrder() throws {
        let results = try connection.pipeline([
            .init("INSERT INTO items (name) VALUES ($1), ($2)", ["a", "b"]),
            .init("SELECT count(*)::bigint AS n FROM items"),
            .init("SELECT $1::text AS echo", ["'); DROP TABLE items; --"]),
        ])
        XCTAssertEqual(results.count, 3)
        XCTAssertEqual(results[0].affectedRows, 2)
        XCTAssertEqual(try results[1].first?.int64("n"), 2)
        XCTAssertEqual(try results[2].first?.string("echo"), "'); DROP TABLE items; --")
        // Back to ordinary statements afterwards.
        XCTAssertEqual(try connection.queryFirst("SELECT 1::bigint AS one")?.int64("one"), 1)
    }

    func testPipelineStopsAtTheFirstFailingStatementAndTheSessionStaysUsable() throws {
        try connection.execute("INSERT INTO items (name) VALUES ($1)", ["existing"])
        XCTAssertThrowsError(try connection.pipeline([
            .init("INSERT INTO items (name) VALUES ($1)", ["before"]),
            .init("INSERT INTO items (name) VALUES ($1)", ["existing"]),
            .init("INSERT INTO items (name) VALUES ($1)", ["after"]),
        ])) { XCTAssertEqual(($0 as? PostgresError)?.sqlState, "23505") }
        XCTAssertTrue(connection.isOpen)
        XCTAssertFalse(connection.isInTransaction)
        // Outside a transaction the statements up to the Sync form one implicit transaction: all undone.
        let names = try connection.query("SELECT name FROM items ORDER BY name").map { try $0.string("name") }
        XCTAssertEqual(names, ["existing"])
    }

    func testPipelineOnATerminatedSessionIsAConnectionFailure() throws {
        let victim = try XCTUnwrap(Self.database).connect()
        defer { victim.close() }
        try connection.query("SELECT pg_terminate_backend($1, 5000)", [victim.backendPID])
        XCTAssertThrowsError(try victim.pipeline([.init("SELECT 1"), .init("SELECT 2")])) {
            XCTAssertTrue(PostgresError.isConnectionFailure($0), "\($0)")
        }
        XCTAssertFalse(victim.isOpen)
    }

    func testTransactionStartingWithAStatementCommitsAndSeesItsRows() throws {
        let value = try connection.transaction(startingWith: .init("INSERT INTO items (name) VALUES ($1) RETURNING id", ["first"])) {
            conn, inserted -> Int64 in
            try conn.execute("INSERT INTO items (name) VALUES ($1)", ["second"])
            return try inserted.first!.int64("id")
        }
        XCTAssertGreaterThan(value, 0)
        XCTAssertFalse(connection.isInTransaction)
        XCTAssertEqual(try connection.query("SELECT name FROM items ORDER BY id").map { try $0.string("name") }, ["first", "second"])
    }

    func testTransactionStartingWithAFailingStatementRollsBack() throws {
        try connection.execute("INSERT INTO items (name) VALUES ($1)", ["existing"])
        var ran = false
        XCTAssertThrowsError(try connection.transaction(startingWith: .init("INSERT INTO items (name) VALUES ($1)", ["existing"])) { _, _ in
            ran = true
        }) { XCTAssertEqual(($0 as? PostgresError)?.sqlState, "23505") }
        XCTAssertFalse(ran)
        XCTAssertFalse(connection.isInTransaction)
    }

    func testNestedTransactionStartingWithAStatementUndoesOnlyItself() throws {
        try connection.execute("INSERT INTO items (name) VALUES ($1)", ["existing"])
        try connection.transaction { conn in
            try conn.execute("INSERT INTO items (name) VALUES ($1)", ["outer"])
            XCTAssertThrowsError(try conn.transaction(startingWith: .init("INSERT INTO items (name) VALUES ($1)", ["existing"])) { _, _ in })
            XCTAssertFalse(conn.isTransactionFailed)
            XCTAssertThrowsError(try conn.transaction(startingWith: .init("INSERT INTO items (name) VALUES ($1)", ["inner"])) { _, _ in
                throw TestFailure(reason: "inner fails")
            })
            try conn.transaction(startingWith: .init("INSERT INTO items (name) VALUES ($1)", ["inner2"])) { _, _ in }
        }
        let names = try connection.query("SELECT name FROM items ORDER BY name").map { try $0.string("name") }
        XCTAssertEqual(names, ["existing", "inner2", "outer"])
    }

    func testOuterSavepointFailureUndoesInnerWorkWhoseReleaseWasDeferred() throws {
        try connection.execute("INSERT INTO items (name) VALUES ($1)", ["existing"])
        try connection.transaction { conn in
            try conn.execute("INSERT INTO items (name) VALUES ($1)", ["kept"])
            // The outer savepoint: its inner savepoint succeeds (its RELEASE is deferred), then a statement
            // fails and aborts the transaction; rolling back must undo both, not only back to the inner one.
            XCTAssertThrowsError(try conn.transaction { middle in
                try middle.execute("INSERT INTO items (name) VALUES ($1)", ["middle"])
                try middle.transaction { inner in try inner.execute("INSERT INTO items (name) VALUES ($1)", ["inner"]) }
                try middle.execute("INSERT INTO items (name) VALUES ($1)", ["existing"])
            })
            XCTAssertFalse(conn.isTransactionFailed)
            try conn.execute("INSERT INTO items (name) VALUES ($1)", ["after"])
        }
        let names = try connection.query("SELECT name FROM items ORDER BY name").map { try $0.string("name") }
        XCTAssertEqual(names, ["after", "existing", "kept"])
    }

    func testManySuccessfulSavepointsThenCommit() throws {
        try connection.transaction { conn in
            for index in 0..<20 {
                try conn.transaction(startingWith: .init("INSERT INTO items (name) VALUES ($1)", ["n\(index)"])) { inner, _ in
                    try inner.execute("UPDATE items SET note = 'x' WHERE name = $1", ["n\(index)"])
                }
            }
        }
        XCTAssertFalse(connection.isInTransaction)
        XCTAssertEqual(try connection.queryFirst("SELECT count(*)::bigint AS n FROM items WHERE note = 'x'")?.int64("n"), 20)
        // The session is clean: a script (PQexec) and a plain statement work.
        try connection.executeScript("SELECT 1; SELECT 2")
        XCTAssertEqual(try connection.queryFirst("SELECT 3::bigint AS n")?.int64("n"), 3)
    }

    // MARK: - Deferred writes

    /// The last statement the server received from `session`, read through another session
    /// (`pg_stat_activity.query`): what a statement that was not sent cannot change.
    func lastStatementReceived(from session: PostgresConnection) throws -> String {
        let observer = try XCTUnwrap(Self.database).connect()
        defer { observer.close() }
        let row = try observer.queryFirst("SELECT query FROM pg_stat_activity WHERE pid = $1", [session.backendPID])
        return try XCTUnwrap(row).string("query")
    }

    func testAWriteWaitsUnsentUntilTheNextReadAndItsErrorSurfacesThere() throws {
        try connection.execute("INSERT INTO items (name) VALUES ($1)", ["existing"])
        try connection.execute("BEGIN")
        try connection.deferringWrites {
            try connection.write("INSERT INTO items (name) VALUES ($1)", ["new"])
            try connection.write("INSERT INTO items (name) VALUES ($1)", ["existing"])  // a unique violation, not yet seen
            XCTAssertTrue(connection.hasDeferredWrites)
            XCTAssertFalse(connection.isTransactionFailed)
            XCTAssertEqual(try lastStatementReceived(from: connection), "BEGIN", "a write was sent at once")
            XCTAssertThrowsError(try connection.queryFirst("SELECT count(*)::bigint AS n FROM items")) { error in
                let failure = error as? PostgresError
                XCTAssertEqual(failure?.sqlState, "23505")
                XCTAssertEqual(failure?.deferred, true, "the error does not say it came from a deferred write")
                XCTAssertTrue("\(error)".contains("deferred write"))
            }
            XCTAssertTrue(connection.isTransactionFailed)
            XCTAssertFalse(connection.hasDeferredWrites)
        }
        try connection.execute("ROLLBACK")
        XCTAssertEqual(try connection.query("SELECT name FROM items").map { try $0.string("name") }, ["existing"])
    }

    func testCommitSendsTheDeferredWritesAndRollbackDropsThem() throws {
        try connection.deferringWrites {
            try connection.execute("BEGIN")
            try connection.write("INSERT INTO items (name) VALUES ($1)", ["committed"])
            try connection.write("UPDATE items SET note = $1 WHERE name = $2", ["noted", "committed"])
            try connection.execute("COMMIT")
            try connection.execute("BEGIN")
            try connection.write("INSERT INTO items (name) VALUES ($1)", ["rolled back"])
            try connection.execute("ROLLBACK")
            XCTAssertFalse(connection.hasDeferredWrites)
        }
        let rows = try connection.query("SELECT name, note FROM items").map { [try $0.string("name"), try $0.string("note")] }
        XCTAssertEqual(rows, [["committed", "noted"]])
    }

    func testAFailedDeferredWriteFailsTheCommitAndRollsTheTransactionBack() throws {
        try connection.execute("INSERT INTO items (name) VALUES ($1)", ["existing"])
        XCTAssertThrowsError(try connection.deferringWrites {
            try connection.transaction { conn in
                try conn.write("INSERT INTO items (name) VALUES ($1)", ["new"])
                try conn.write("INSERT INTO items (name) VALUES ($1)", ["existing"])
            }
        }) { XCTAssertEqual(($0 as? PostgresError)?.deferred, true) }
        XCTAssertFalse(connection.isInTransaction, "the aborted transaction was left open")
        XCTAssertEqual(try connection.query("SELECT name FROM items").map { try $0.string("name") }, ["existing"])
    }

    func testAWriteRunsAtOnceOutsideDeferringWritesOutsideATransactionAndInsideASavepoint() throws {
        try connection.execute("INSERT INTO items (name) VALUES ($1)", ["existing"])
        // Not allowed to defer: the error is the write's own.
        try connection.execute("BEGIN")
        XCTAssertThrowsError(try connection.write("INSERT INTO items (name) VALUES ($1)", ["existing"])) {
            XCTAssertEqual(($0 as? PostgresError)?.deferred, false)
        }
        try connection.execute("ROLLBACK")
        try connection.deferringWrites {
            // No transaction: the statement is its own transaction and must report its own outcome.
            XCTAssertThrowsError(try connection.write("INSERT INTO items (name) VALUES ($1)", ["existing"]))
            // Inside a savepoint of `transaction`, which must be able to undo a failed write on its own.
            try connection.transaction { conn in
                try conn.write("INSERT INTO items (name) VALUES ($1)", ["outer"])
                XCTAssertThrowsError(try conn.transaction { inner in
                    try inner.write("INSERT INTO items (name) VALUES ($1)", ["existing"])
                    XCTFail("the write inside a savepoint was deferred")
                })
                XCTAssertFalse(conn.isTransactionFailed)
            }
        }
        let names = try connection.query("SELECT name FROM items ORDER BY name").map { try $0.string("name") }
        XCTAssertEqual(names, ["existing", "outer"])
    }

    // MARK: - Prepared statements

    /// How many of `session`'s prepared statements hold `sql` (the server's own list, `pg_prepared_statements`).
    func preparedCount(_ sql: String, on session: PostgresConnection) throws -> Int64 {
        try XCTUnwrap(try session.queryFirst(
            "SELECT count(*)::bigint AS n FROM pg_prepared_statements WHERE statement = $1", [sql])).int64("n")
    }

    func testAStatementIsPreparedOnceOnItsFirstRunAndTheOptOutPreparesNone() throws {
        let select = "SELECT name FROM items WHERE name = $1"
        try connection.execute("INSERT INTO items (name) VALUES ($1)", ["a"])
        for _ in 0..<3 { XCTAssertEqual(try connection.queryFirst(select, ["a"])?.string("name"), "a") }
        XCTAssertEqual(try preparedCount(select, on: connection), 1)
        // A failing run of a prepared statement leaves it usable.
        let insert = "INSERT INTO items (name) VALUES ($1)"
        XCTAssertThrowsError(try connection.execute(insert, ["a"]))
        try connection.execute(insert, ["b"])
        XCTAssertEqual(try preparedCount(insert, on: connection), 1)

        let unprepared = try PostgresConnection(url: try XCTUnwrap(Self.database).url,
                                                options: PostgresConnectionOptions(preparesStatements: false))
        defer { unprepared.close() }
        for _ in 0..<3 { XCTAssertEqual(try unprepared.queryFirst(select, ["b"])?.string("name"), "b") }
        try unprepared.pipeline([.init(select, ["a"]), .init(select, ["b"])])
        XCTAssertEqual(try unprepared.queryFirst("SELECT count(*)::bigint AS n FROM pg_prepared_statements")?.int64("n"), 0)
    }

    func testPreparedStatementsAreMadeAgainOnANewSessionAfterTheOldOneWasLost() throws {
        let pool = PostgresPool(url: try XCTUnwrap(Self.database).url, maxConnections: 1)
        defer { pool.shutdown() }
        let select = "SELECT count(*)::bigint AS n FROM items WHERE name = $1"
        let first = try pool.withConnection { session in
            XCTAssertEqual(try session.queryFirst(select, ["x"])?.int64("n"), 0)
            return session.backendPID
        }
        try connection.query("SELECT pg_terminate_backend($1, 5000)", [first])
        let second = try pool.withConnection { session in
            XCTAssertEqual(try session.queryFirst(select, ["x"])?.int64("n"), 0)
            XCTAssertEqual(try preparedCount(select, on: session), 1)
            return session.backendPID
        }
        XCTAssertNotEqual(first, second, "the pool did not open a new session")
        // The server forgets the session's statements (DISCARD ALL, as a pooler may send): one statement fails,
        // the cache is emptied, and the next run prepares again.
        try pool.withConnection { session in
            try session.executeScript("DISCARD ALL")
            XCTAssertThrowsError(try session.queryFirst(select, ["x"])) { XCTAssertEqual(($0 as? PostgresError)?.sqlState, "26000") }
            XCTAssertEqual(try session.queryFirst(select, ["x"])?.int64("n"), 0)
            XCTAssertEqual(try preparedCount(select, on: session), 1)
        }
    }

    // MARK: - Pure helpers

    func testURLRedaction() {
        XCTAssertEqual(PostgresURL.redacted("postgres://user:s3cr%40t@db.example:5432/app?sslmode=require"),
                       "postgres://user:***@db.example:5432/app?sslmode=require")
        XCTAssertEqual(PostgresURL.redacted("postgres://user@host/db"), "postgres://user@host/db")
        XCTAssertEqual(PostgresURL.redacted("postgresql://host/db"), "postgresql://host/db")
    }

    /// Issue 32, L2: `redacted` hides a `password=` parameter (libpq reads one from the query string) and a password
    /// holding `?` or `/`, and a libpq keyword/value string's `password=`.
    func testURLRedactionHidesQueryPasswordsAndOddUserinfo() {
        XCTAssertEqual(PostgresURL.redacted("postgres://user@host/db?password=s3cretpw"), "postgres://user@host/db?password=***")
        XCTAssertEqual(PostgresURL.redacted("postgres://u@h/db?sslmode=require&PASSWORD=s3cretpw&application_name=x"),
                       "postgres://u@h/db?sslmode=require&PASSWORD=***&application_name=x")
        XCTAssertEqual(PostgresURL.redacted("postgres://user:s3cret?pw@host/db"), "postgres://user:***@host/db")
        XCTAssertEqual(PostgresURL.redacted("postgres://user:s3cret/pw@host/db"), "postgres://user:***@host/db")
        XCTAssertEqual(PostgresURL.redacted("host=db user=app password=s3cretpw dbname=app"),
                       "host=db user=app password=*** dbname=app")
        XCTAssertEqual(PostgresURL.redacted("user:s3cretpw@db/app"), "user:***@db/app")  // found by fuzzing: no scheme
        XCTAssertEqual(PostgresURL.redacted("db/app?password=s3cretpw"), "db/app?password=***")
        XCTAssertEqual(PostgresURL.redacted("postgres://?user@host/db?password=s3cretpw"), "postgres://?user@host/db?password=***")
        XCTAssertThrowsError(try PostgresConnection(url: "user:s3cretpw@db/app")) { error in
            XCTAssertFalse("\(error)".contains("s3cretpw"), "\(error)")
        }
        XCTAssertThrowsError(try PostgresConnection(url: "host=db password=s3cretpw")) { error in
            XCTAssertFalse("\(error)".contains("s3cretpw"), "\(error)")
        }
    }

    func testTimestampFormattingAndParsing() {
        let date = Date(timeIntervalSince1970: 1_763_913_600.5)
        XCTAssertEqual(PostgresTimestamp.format(date), "2025-11-23 16:00:00.500000+00")
        XCTAssertEqual(PostgresTimestamp.format(Date(timeIntervalSince1970: -0.25)), "1969-12-31 23:59:59.750000+00")
        XCTAssertEqual(PostgresTimestamp.parse("2025-11-23 16:00:00.5+00"), date)
        XCTAssertEqual(PostgresTimestamp.parse("2025-11-23T16:00:00.5Z"), date)
        XCTAssertEqual(PostgresTimestamp.parse("2025-11-23 17:00:00.5+01"), date)
        XCTAssertEqual(PostgresTimestamp.parse("2025-11-23 12:30:00.5-03:30"), date)
        XCTAssertEqual(PostgresTimestamp.parse("infinity"), .distantFuture)
        XCTAssertNil(PostgresTimestamp.parse("2025-13-01"))
        XCTAssertNil(PostgresTimestamp.parse("0044-03-15 BC"))
        XCTAssertNil(PostgresTimestamp.parse("yesterday"))
        XCTAssertNil(PostgresTimestamp.parse(""))
    }

    func testSHA256KnownVectors() {
        XCTAssertEqual(Migration.checksum(of: ""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        XCTAssertEqual(Migration.checksum(of: "abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        XCTAssertEqual(Migration.checksum(of: "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
                       "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1")
    }
}
