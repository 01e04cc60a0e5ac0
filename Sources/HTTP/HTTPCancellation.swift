import Foundation

/// A cancellation signal checked while a transfer runs (from libcurl's progress callback).
///
/// Cancelled when `cancel()` was called, when `deadline` has passed, or when `isCancelledCheck` returns true.
/// Thread rules: `cancel()` and `isCancelled` may be called from any thread. The check closure runs on the
/// thread performing the transfer, about once per second while idle and more often while data flows, so an
/// abort takes effect within ~1 s; it must be cheap and must not block.
public final class HTTPCancellation: @unchecked Sendable {
    private let lock = NSLock()
    private var flag = false  // guarded by `lock`
    private let deadline: ContinuousClock.Instant?
    private let isCancelledCheck: (@Sendable () -> Bool)?

    public init(deadline: ContinuousClock.Instant? = nil, isCancelled: (@Sendable () -> Bool)? = nil) {
        self.deadline = deadline
        self.isCancelledCheck = isCancelled
    }

    /// Requests cancellation; idempotent.
    public func cancel() { lock.withLock { flag = true } }

    public var isCancelled: Bool {
        if lock.withLock({ flag }) { return true }
        if let deadline, ContinuousClock.now >= deadline { return true }
        return isCancelledCheck?() ?? false
    }
}
