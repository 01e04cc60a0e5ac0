import Foundation
import Synchronization

/// Counts durations in log-spaced buckets (about 4% wide, 1 µs to ~38 h) so percentiles can be
/// read at any time without keeping samples. Lock-free: every bucket is an atomic counter, so pool
/// threads record without contending on a lock. Any thread may record or read.
package final class LatencyHistogram: @unchecked Sendable {
    private static let bucketsPerDoubling = 16.0
    private static let bucketCount = 37 * 16
    /// `bucketCount` atomics, allocated once and freed in deinit; never resized.
    private let buckets: UnsafeMutablePointer<Atomic<Int>>

    public init() {
        buckets = .allocate(capacity: Self.bucketCount)
        for index in 0..<Self.bucketCount { (buckets + index).initialize(to: Atomic(0)) }
    }

    deinit {
        buckets.deinitialize(count: Self.bucketCount)
        buckets.deallocate()
    }

    public func record(seconds: Double) {
        let micros = max(1, seconds * 1_000_000)
        let index = min(Self.bucketCount - 1, max(0, Int(log2(micros) * Self.bucketsPerDoubling)))
        buckets[index].wrappingAdd(1, ordering: .relaxed)
    }

    private func snapshot() -> [Int] {
        (0..<Self.bucketCount).map { buckets[$0].load(ordering: .relaxed) }
    }

    public var count: Int { snapshot().reduce(0, +) }

    /// The duration (seconds) below which `fraction` of the samples fall; nil when empty.
    public func percentile(_ fraction: Double) -> Double? {
        let counts = snapshot()
        let total = counts.reduce(0, +)
        guard total > 0 else { return nil }
        let target = max(1, Int((Double(total) * fraction).rounded(.up)))
        var seen = 0
        for (index, count) in counts.enumerated() {
            seen += count
            if seen >= target { return pow(2, Double(index + 1) / Self.bucketsPerDoubling) / 1_000_000 }
        }
        return nil
    }
}
