import WorkersQueue
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
                let delay = Backoff.sidekiq.delay(retryCount: count).inSeconds
                // The random part is a whole multiple k of (count + 1), k in 0…9.
                let k = (delay - base) / step
                guard delay >= base, delay <= base + 9 * step, k == k.rounded() else {
                    XCTFail("count \(count): \(delay) s is not count⁴ + 15 + k × (count + 1) with k in 0…9 "
                            + "(\(base)…\(base + 9 * step) in steps of \(step))")
                    break  // one failure per count is enough
                }
                multipliers.insert(Int(k))
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
                let delay = Backoff.sidekiq.delay(retryCount: count).inSeconds
                if !(low...high).contains(delay) {
                    XCTFail("count \(count): \(delay) not in \(low)…\(high)")
                    break
                }
            }
        }
    }
}
