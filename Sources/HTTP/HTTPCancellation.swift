import Foundation
import Synchronization

/// A cancellation signal checked while a transfer runs (from libcurl's progress callback).
///
/// Cancelled when `cancel()` was called, when `deadline` has passed, or when `isCancelledCheck` returns true.
/// Thread rules: `cancel()` and `isCancelled` may be called from any thread. The check closure runs on the
/// thread performing the transfer, about once per second while idle and more often while data flows, so an
/// abort takes effect within ~1 s; it must be cheap and must not block.
public final class HTTPCancellation: Sendable {
    private let flag = Mutex(false)
    private let deadline: ContinuousClock.Instant?
    private let isCancelledCheck: (@Sendable () -> Bool)?

    public init(deadline: ContinuousClock.Instant? = nil, isCancelled: (@Sendable () -> Bool)? = nil) {
        self.deadline = deadline
        self.isCancelledCheck = isCancelled
    }

    /// Requests cancellation; idempotent.
    public func cancel() { flag.withLock { $0 = true } }

    public var isCancelled: Bool {
        if flag.withLock({ $0 }) { return true }
        if let deadline, ContinuousClock.now >= deadline { return true }
        return isCancelledCheck?() ?? false
    }
}
