import Synchronization

/// Recent average run time of a job in this process, in seconds (exponentially weighted), which
/// the fetcher uses to size its prefetch.
///
/// Thread rules: every pool thread records; the fetcher reads. Races between pool threads only
/// blur the average, which is all the fetcher needs, so it is a relaxed atomic, not a lock.
final class RunTimeEstimate: Sendable {
    /// Stored as the bits of a Double. Assumes slowish jobs until measured.
    private let bits = Atomic<UInt64>(0.02.bitPattern)

    var seconds: Double { Double(bitPattern: bits.load(ordering: .relaxed)) }

    func record(seconds run: Double) {
        bits.store((seconds * 0.95 + run * 0.05).bitPattern, ordering: .relaxed)
    }
}
