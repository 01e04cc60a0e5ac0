import Workers
import XCTest

/// Sidekiq's default retry delay, `count⁴ + 15 + rand(10) × (count + 1)` seconds
/// (sidekiq/lib/sidekiq/job_retry.rb, `delay_for`), for every retry count Sidekiq reaches (0…25).
/// Pure arithmetic on `Backoff.delay`: no clock, no Redis.
final class BackoffTests: XCTestCase {
    /// Samples per count: the chance that one given end of `rand(10)` never shows up is 0.9^2000 ≈ 10⁻⁹².
    private let samples = 2000

    func testSidekiqDelayIsCountToTheFourthPlusFifteenPlusRandomTimesCountPlusOne() {
        for count in 0...25 {
            let base = Double(count * count * count * count + 15)
            let step = Double(count + 1)
            var multipliers: Set<Int> = []
            for _ in 0..<samples {
                let delay = Backoff.sidekiq.delay(retryCount: count)
                XCTAssertGreaterThanOrEqual(delay, base, "count \(count): below count⁴ + 15")
                XCTAssertLessThanOrEqual(delay, base + 9 * step, "count \(count): above count⁴ + 15 + 9 × (count + 1)")
                // The random part is a whole multiple k of (count + 1), k in 0…9.
                let k = (delay - base) / step
                XCTAssertEqual(k, k.rounded(), "count \(count): \(delay) s is not count⁴ + 15 + k × (count + 1)")
                multipliers.insert(Int(k.rounded()))
                if multipliers.count == 10 { break }
            }
            XCTAssertTrue(multipliers.contains(0), "count \(count): rand(10) never gave 0 in \(samples) samples: \(multipliers.sorted())")
            XCTAssertTrue(multipliers.contains(9), "count \(count): rand(10) never gave 9 in \(samples) samples: \(multipliers.sorted())")
        }
    }

    /// Anchors against hand-computed values: the retry 25 lower bound is Sidekiq's ~4.5 days.
    func testSidekiqDelayBoundsAtKnownCounts() {
        for (count, low, high) in [(0, 15.0, 24.0), (1, 16.0, 34.0), (2, 31.0, 58.0), (5, 640.0, 694.0),
                                   (25, 390_640.0, 390_874.0)] {
            for _ in 0..<200 {
                let delay = Backoff.sidekiq.delay(retryCount: count)
                XCTAssertTrue((low...high).contains(delay), "count \(count): \(delay) not in \(low)…\(high)")
            }
        }
    }
}
