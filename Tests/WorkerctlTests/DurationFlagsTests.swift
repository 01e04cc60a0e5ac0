import Foundation
import WorkersTestServices
import XCTest

/// `workerctl worker`'s duration flags stay seconds (`--poll-interval 0.2`); each becomes a `Duration` of
/// `WorkerConfiguration` (issue 35) without a trap: 1e300 — a number `Duration.seconds(_:)` traps on — is refused at
/// start-up with the setting's range, and NaN or infinity by the flag's own check, exit 2, as before.
final class DurationFlagsTests: XCTestCase {
    func testADurationFlagOfAnyMagnitudeIsRefusedWithItsRangeNotATrap() throws {
        let cases: [([String], String)] = [
            (["--poll-interval", "1e300"], "poll interval must be within 0...3600 s"),
            (["--job-timeout", "1e300"], "default timeout must be within"),
            (["--shutdown-timeout", "1e300"], "shutdown timeout must be within 0...86400 s"),
            (["--orphan-sweep-interval", "nan"], "durations must be non-negative numbers"),
        ]
        for (flags, reason) in cases {
            let result = try ChildProcess.run(TestServices.workerctl, ["worker", "--no-database"] + flags,
                                              environment: ["REDIS_URL": "redis://127.0.0.1:1/0"], timeout: 30)
            XCTAssertEqual(result.status, 2, "\(flags): \(result.stderr)")
            XCTAssertTrue(result.stderr.contains(reason), "\(flags): \(result.stderr)")
        }
    }
}
