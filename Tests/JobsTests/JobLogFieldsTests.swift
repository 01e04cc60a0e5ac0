import Foundation
import Logging
import WorkersQueue
import WorkersTestServices
import Workers
import XCTest

/// Every log line about a run carries its jid, class, queue and attempt — the job's own lines through
/// `context.logger` and the runner's (a failure) — through the real worker (`SettlingWorker`). The runner builds a
/// run's logger only when a line is logged, so this is what proves the fields still arrive.
final class JobLogFieldsTests: JobsTestCase {
    override func makeFixture() throws -> JobsFixture { try JobsFixture(prefix: "job_log_fields_test", connections: 2) }

    /// Logs one line through `context.logger` (twice, to show each read carries the fields), then fails when asked.
    struct LogProbeJob: Job {
        struct Arguments: SingleJobArgument { static let className = "LogProbe"; let value: String }
        func perform(_ arguments: Arguments, context: JobContext) throws {
            context.logger.info("probe says hello")
            var logger = context.logger
            logger[metadataKey: "step"] = "second"
            logger.info("probe says it again")
            if arguments.value == "fail" { throw JobError.retryAfter(.seconds(60), reason: "asked to fail") }
        }
    }

    func testEveryLineAboutARunCarriesItsFields() throws {
        var registry = JobRegistry()
        registry.register(LogProbeJob())
        let worker = try SettlingWorker(redisDatabase: 195, registry: registry, database: fixture.jobDatabase)
        defer { worker.shutdown() }

        let first = "b00000000000000000000001"
        _ = try worker.run("LogProbe", #"["ok"]"#, jid: first)
        let own = worker.logs.all.filter { $0.message.hasPrefix("probe says") }
        XCTAssertEqual(own.count, 2, "\(worker.logs.all)")
        for entry in own {
            XCTAssertEqual(entry.metadata["jid"], first, "\(entry.metadata)")
            XCTAssertEqual(entry.metadata["class"], "LogProbe", "\(entry.metadata)")
            XCTAssertEqual(entry.metadata["queue"], "default", "\(entry.metadata)")
            XCTAssertEqual(entry.metadata["attempt"], "1", "\(entry.metadata)")
        }
        XCTAssertEqual(own.last?.metadata["step"], "second")
        XCTAssertNil(own.first?.metadata["step"], "a job's own metadata change stays in its copy")

        // A redelivery (retry_count 0: the second attempt) that fails: the runner's line carries the fields too.
        worker.logs.clear()
        let second = "b00000000000000000000002"
        _ = try worker.run("LogProbe", #"["fail"]"#, jid: second, retryCount: 0)
        let failure = try XCTUnwrap(worker.logs.all.first { $0.message.contains("retry scheduled") }, "\(worker.logs.all)")
        XCTAssertEqual(failure.metadata["jid"], second, "\(failure.metadata)")
        XCTAssertEqual(failure.metadata["class"], "LogProbe", "\(failure.metadata)")
        XCTAssertEqual(failure.metadata["queue"], "default", "\(failure.metadata)")
        XCTAssertEqual(failure.metadata["attempt"], "2", "\(failure.metadata)")
    }
}
