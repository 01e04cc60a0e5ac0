import Foundation
import WorkersQueue
import WorkersTestServices
import XCTest

/// A worker process killed with SIGKILL loses nothing: once its heartbeat expires another
/// process takes its in-flight jobs back and runs them.
final class CrashRecoveryTests: XCTestCase {
    func workerArguments() -> [String] {
        ["worker", "--concurrency", "2", "--heartbeat-interval", "0.3", "--heartbeat-ttl", "2",
         "--orphan-sweep-interval", "0.5", "--poll-interval", "0.5"]
    }

    func testJobOfAKilledWorkerCompletesInAnotherProcess() throws {
        let redis = try TestRedis(database: 4)
        let environment = ["REDIS_URL": redis.url, "LOG_LEVEL": "info"]
        let jid = try redis.client.enqueue(NewJob("Sleep", args: [1500]))
        try redis.client.enqueueMany((0..<5).map { _ in NewJob("Sleep", args: [1500]) })

        let first = try ChildProcess(executable: TestServices.workerctl, arguments: workerArguments(), environment: environment)
        // Wait until it runs jobs, then kill it without a chance to clean up.
        XCTAssertTrue(try eventually { try redis.workingKeys().count == 1 && redis.int("LLEN", "queue:default") < 6 },
                      first.stderr)
        let inFlight = try redis.int("LLEN", try XCTUnwrap(redis.workingKeys().first))
        XCTAssertGreaterThan(inFlight, 0)
        first.signal(SIGKILL)
        first.wait()
        XCTAssertEqual(try redis.processed(), 0, "nothing finished before the kill")

        let second = try ChildProcess(executable: TestServices.workerctl, arguments: workerArguments(), environment: environment)
        defer { second.signal(SIGTERM); second.wait() }
        XCTAssertTrue(try eventually(timeout: 30) { try redis.processed() == 6 }, second.stderr)
        XCTAssertTrue(second.stderr.contains("recovered in-flight jobs of dead processes"), second.stderr)
        XCTAssertEqual(try redis.int("LLEN", "queue:default"), 0)
        XCTAssertEqual(try redis.int("ZCARD", Keys.dead) + redis.int("ZCARD", Keys.retry), 0)
        XCTAssertTrue(try eventually { try redis.workingKeys().isEmpty })
        _ = jid
    }

    func testSigtermDrainsAndExitsCleanly() throws {
        let redis = try TestRedis(database: 5)
        let environment = ["REDIS_URL": redis.url]
        try redis.client.enqueue(NewJob("Sleep", args: [600]))
        let worker = try ChildProcess(executable: TestServices.workerctl, arguments: workerArguments(), environment: environment)
        XCTAssertTrue(try eventually { try redis.int("SCARD", Keys.processes) == 1 && redis.workingKeys().count == 1 }, worker.stderr)
        worker.signal(SIGTERM)
        XCTAssertEqual(worker.wait(), 0, worker.stderr)
        XCTAssertEqual(try redis.processed(), 1, "the running job finished within the shutdown timeout")
        XCTAssertEqual(try redis.int("SCARD", Keys.processes), 0)
        XCTAssertEqual(try redis.workingKeys(), [])
    }
}
