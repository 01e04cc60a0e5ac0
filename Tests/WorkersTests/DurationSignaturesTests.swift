import Foundation
import WorkersQueue
import Workers
import XCTest

/// The public signatures take `Duration` and `Date` (issue 35, point 2); the runtime still computes in seconds. Each
/// conversion keeps the number the runtime used before (milliseconds of a limit, a backoff's delay), and a
/// `Duration` of any size — up to `Int64.max` seconds — is clamped where it meets the runtime, never a trap.
/// Pure values: no Redis, no worker.
final class DurationSignaturesTests: XCTestCase {
    func testALimitsPeriodIsItsDurationInMillisecondsClampedToAYear() {
        XCTAssertEqual(LimitDeclaration.window("w", max: 1, per: .milliseconds(1500)).spec.milliseconds, 1500)
        XCTAssertEqual(LimitDeclaration.bucket("b", capacity: 1, per: .milliseconds(200)).spec.milliseconds, 200)
        XCTAssertEqual(LimitDeclaration.concurrent("c", max: 1).spec.milliseconds, 30_000, "default lease 30 s")
        let year = Int(Bounded.maxIntervalSeconds * 1000)
        XCTAssertEqual(LimitDeclaration.window("w", max: 1, per: .seconds(Int64.max)).spec.milliseconds, year)
        XCTAssertEqual(LimitDeclaration.bucket("b", capacity: 1, per: .seconds(-5)).spec.milliseconds, 1, "at least 1 ms")
    }

    func testABackoffsDelayIsItsDurationAndNeverBeyondAYear() {
        XCTAssertEqual(Backoff.schedule([.milliseconds(200), .seconds(3)]).delay(retryCount: 0), .milliseconds(200))
        XCTAssertEqual(Backoff.schedule([.milliseconds(200), .seconds(3)]).delay(retryCount: 7), .seconds(3))
        XCTAssertEqual(Backoff.schedule([]).delay(retryCount: 0), .seconds(15))
        let year = Duration.seconds(Bounded.maxIntervalSeconds)
        // A payload's retry_count may be up to Bounded.maxCount: count⁴ is then ~1e24 s.
        XCTAssertEqual(Backoff.sidekiq.delay(retryCount: Bounded.maxCount), year)
        XCTAssertEqual(Backoff.exponential(base: .seconds(Int64.max), cap: .seconds(Int64.max), jitter: 0).delay(retryCount: 60), year)
        for _ in 0..<50 {
            let delay = Backoff.exponential(base: .seconds(10), cap: .seconds(3600), jitter: 0.2).delay(retryCount: 2)
            XCTAssertTrue((Duration.seconds(32)...Duration.seconds(48)).contains(delay), "\(delay)")
        }
    }

    func testTimesInErrorsAndPoliciesOfAnySizeDescribeAndClampWithoutATrap() {
        let huge = Duration.seconds(Int64.max)
        XCTAssertTrue(CallLimitError.overLimit(limit: "l", wait: huge).description.hasPrefix("over limit 'l'"))
        XCTAssertTrue(JobError.retryAfter(huge, reason: "r").description.hasSuffix("(retry after 86400 s)"))
        XCTAssertEqual(OverLimitPolicy.limiterWait(jitter: .zero, cap: .seconds(300))(0, huge), .seconds(300))
        XCTAssertEqual(OverLimitPolicy.limiterWait(jitter: .zero, cap: .seconds(300))(0, .seconds(2)), .seconds(2))
        let enterprise = OverLimitPolicy.sidekiqEnterprise(2, .zero)
        XCTAssertTrue((Duration.seconds(601)...Duration.seconds(900)).contains(enterprise), "\(enterprise)")
    }

    func testAUniquePolicysDurationIsWrittenAsSecondsOnTheWire() {
        XCTAssertEqual(UniquePolicy(for: .seconds(90)).fields(key: nil)["unique_for"], .double(90))
        XCTAssertEqual(UniquePolicy(for: .milliseconds(1500)).fields(key: nil)["unique_for"], .double(1.5))
        XCTAssertEqual(UniquePolicy.maxDuration, .seconds(365 * 86_400))
    }
}
