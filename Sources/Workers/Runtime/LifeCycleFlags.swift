import Foundation
import WorkersQueue
import Synchronization

/// Where the process is in its life: serving, quiet (no longer fetching), stopping, and by when
/// the stop must be over (the shutdown deadline).
///
/// Thread rules: written only by the life cycle (`WorkerProcess.quietDown` / `shutdown`), read by
/// any thread. Both flags only ever go from false to true; the deadline is set once, with
/// `beginStopping`, before `isStopping` reads true.
final class LifeCycleFlags: Sendable {
    private let quietFlag = Atomic<Bool>(false)
    private let stoppingFlag = Atomic<Bool>(false)
    /// `Clock.now()` by which shutdown must be over; +infinity until shutdown begins.
    private let deadlineBits = Atomic<UInt64>(Double.infinity.bitPattern)

    /// No more fetching (Sidekiq's TSTP); set before the fetcher is stopped.
    var isQuiet: Bool { quietFlag.load(ordering: .acquiring) }
    /// Shutting down (SIGTERM): the watchdog no longer replaces retired pool threads.
    var isStopping: Bool { stoppingFlag.load(ordering: .acquiring) }

    /// Sets quiet; true for the first caller only.
    func becomeQuiet() -> Bool { !quietFlag.exchange(true, ordering: .acquiringAndReleasing) }

    /// The shutdown deadline (`Clock.now()` seconds); +infinity while not shutting down.
    var shutdownDeadline: Double { Double(bitPattern: deadlineBits.load(ordering: .acquiring)) }

    /// True once shutdown has begun and its deadline has passed: parts that retry Redis give up
    /// (the settler leaves unwritten settlements in flight for recovery) instead of retrying.
    var isPastShutdownDeadline: Bool { Clock.now() >= shutdownDeadline }

    /// Seconds left until the shutdown deadline (0 once past it; +infinity while not shutting down).
    var secondsUntilShutdownDeadline: Double { max(0, shutdownDeadline - Clock.now()) }

    /// Shutting down from now on, to be over by `deadline` (`Clock.now()` seconds).
    func beginStopping(deadline: Double) {
        deadlineBits.store(deadline.bitPattern, ordering: .releasing)
        stoppingFlag.store(true, ordering: .releasing)
    }
}
