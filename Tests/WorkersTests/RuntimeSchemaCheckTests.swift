import BenchJobs
import Foundation
import Logging
import Storage
import TestSupport
import Workers
import XCTest

/// A `WorkerProcess` with a database checks the runtime's schema before it starts (issue 53 point 2): behind its
/// build, it refuses, naming the missing migrations and how to apply them, and registers nothing in Redis.
final class RuntimeSchemaCheckTests: XCTestCase {
    var redis: TestRedis!
    var database: PostgresTestDatabase!
    var pool: PostgresPool!
    var processes: [WorkerProcess] = []

    override func setUpWithError() throws {
        redis = try TestRedis(database: 168)
        database = try PostgresTestDatabase.create(prefix: "runtime_schema_check")
        pool = PostgresPool(url: database.url, maxConnections: 2)
    }

    override func tearDown() {
        for process in processes { process.shutdown() }
        pool?.shutdown()
        database?.drop()
    }

    private func makeProcess() throws -> WorkerProcess {
        var logger = Logger(label: "runtime-schema-check")
        logger.logLevel = .critical
        let process = try WorkerProcess(configuration: WorkerHarness(redis: redis).configuration(concurrency: 1),
                                        registry: BenchJobs.registry(), database: JobDatabase(pool: pool), logger: logger)
        processes.append(process)
        return process
    }

    func testAWorkerWithADatabaseRefusesToStartOnARuntimeSchemaBehindItsBuildAndNamesWhatIsMissing() throws {
        // The runtime's line up to 0016 only: a database migrated by an older build of the library.
        let shipped = try WorkersSchema.migrations()
        let older = try Migrator(migrations: shipped.filter { $0.version <= 16 },
                                 table: MigrationTable.lined(WorkersSchema.line, table: WorkersSchema.tableName))
        try pool.withConnection { try older.migrate(on: $0) }
        let missing = shipped.filter { $0.version > 16 }.map(\.description)
        XCTAssertFalse(missing.isEmpty)

        let process = try makeProcess()
        XCTAssertThrowsError(try process.start()) { error in
            guard let behind = error as? WorkersSchemaBehind else { return XCTFail("not WorkersSchemaBehind: \(error)") }
            XCTAssertEqual(behind.pending, missing)
            let message = "\(behind)"
            for name in missing { XCTAssertTrue(message.contains(name), message) }
            XCTAssertTrue(message.contains("WorkersSchema.migrate(url:") && message.contains("workerctl migrate"), message)
        }
        XCTAssertEqual(try redis.command("SMEMBERS", "processes").strings, [], "a refused worker registers nothing")

        // Applied through the API, the same database lets a new worker start.
        XCTAssertEqual(try WorkersSchema.migrate(url: database.url).map(\.description), missing)
        let started = try makeProcess()
        XCTAssertNoThrow(try started.start())
        XCTAssertEqual(try redis.command("SMEMBERS", "processes").strings, [started.identity])
    }

    func testAWorkerStartsOnADatabaseWithOnlyTheRuntimeSchemaAndNoAppTables() throws {
        try WorkersSchema.migrate(url: database.url)
        XCTAssertEqual(try pool.withConnection { try $0.queryFirst("SELECT to_regclass('users') IS NULL AS absent")?.bool("absent") }, true)
        let process = try makeProcess()
        XCTAssertNoThrow(try process.start())
    }
}
