import Foundation
import WorkersTestServices
import XCTest

/// The shortened chaos run of `bench/chaos.sh`: 4 worker processes SIGKILLed at random while they
/// insert one row per job through the ledger, Redis crashed once (SIGKILL, restarted from its
/// append-only file) and PostgreSQL restarted once. It runs its own Redis and PostgreSQL (ports
/// 6391/5441) so the rest of the suite is not disturbed.
final class ChaosTests: XCTestCase {
    func testNothingLostNothingDoubledNothingStuck() throws {
        let script = TestServices.repositoryRoot.appendingPathComponent("bench/chaos.sh")
        let result = try ChildProcess.run(script, [], environment: [
            "N": "4000", "KILL_EVERY": "1", "WORKER_CONCURRENCY": "4", "PAUSE_MS": "20", "DEADLINE": "240",
            "WORKERCTL": TestServices.workerctl.path,
        ], timeout: 400)
        XCTAssertEqual(result.status, 0, result.stdout + result.stderr)
        XCTAssertTrue(result.stdout.contains("rows_present=4000 rows_duplicated=0 queued=0 in_flight=0 retry=0 dead=0"),
                      result.stdout)
        XCTAssertTrue(result.stdout.contains("redis_crashes=1 postgres_restarts=1"), result.stdout)
    }
}
