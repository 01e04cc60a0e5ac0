import Foundation
import WorkersQueue
import Synchronization

/// A fleet-wide limit applied to each call a job makes inside `perform` (an HTTP request to a provider
/// with a published rate limit), where a declaration in `JobOptions.limits` would bound job runs instead
/// (docs/limiters.md, "Limits on calls").
///
/// The same limiter as the declarations: one `LimitStore.admit` script per call on the same `limit:<name>`
/// keys, Redis time, published in the `limits` hash on first use, seen by `workerctl limits ls`.
///
/// `acquire` returns when the caller may send. When the limit is full it sleeps until the limiter's own
/// estimate of the next admission and asks again, as long as that stays within `patience` of the
/// first ask; past that it throws `CallLimitError.overLimit`, which the runner settles the way it settles a
/// job refused by its declared limits: rescheduled with `OverLimitPolicy` (the job's `limits.overLimit`), not
/// a failure, not a retry. A job must let that error out of `perform` unchanged.
///
/// Only `bucket` and `window` limits (a `concurrent` slot would need a lease released after the call).
/// Threads: any number of pool threads may call it at once; each call borrows a pooled Redis connection
/// for one script run, never while sleeping.
public final class CallLimiter: Sendable {
    public let declaration: LimitDeclaration
    public let redis: RedisPool
    /// Longest time one `acquire` waits for an admission before giving up (`CallLimitError.overLimit`).
    public let patience: Duration
    /// `patience` in seconds, clamped into `0...Bounded.maxIntervalSeconds`.
    private let patienceSeconds: Double
    private let declared = Atomic<Bool>(false)

    public init(_ declaration: LimitDeclaration, redis: RedisPool, patience: Duration) {
        precondition(declaration.spec.kind != .concurrent, "CallLimiter takes bucket and window limits only")
        self.declaration = declaration
        self.redis = redis
        self.patience = patience
        self.patienceSeconds = Bounded.seconds(patience.inSeconds, max: Bounded.maxIntervalSeconds)
    }

    /// Admits one call (`args`: the job's arguments when the declaration derives a key from them). Returns the
    /// admission time (Redis clock). Throws `CallLimitError` (over limit past `patience`, cancelled while
    /// waiting) or a `RedisError`.
    @discardableResult
    public func acquire(args: [JSONValue] = [], isCancelled: () -> Bool) throws -> Date {
        let instance: LimitStore.Instance = (declaration.spec, declaration.instanceKey(args: args))
        let name = declaration.spec.name
        let started = Date()
        var waited = false
        while true {
            let publish = !declared.load(ordering: .relaxed)
            let admission = try redis.withConnection { connection in
                if publish { try LimitStore.declare(connection, [instance.spec]) }
                return try LimitStore.admit(connection, [instance])
            }
            if publish { declared.store(true, ordering: .relaxed) }
            switch admission {
            case .admitted(_, let atMilliseconds):
                LimiterMetrics.admitted(name)
                if waited { LimiterMetrics.waited(name, seconds: Date().timeIntervalSince(started)) }
                return Date(timeIntervalSince1970: Double(atMilliseconds) / 1000)
            case .overLimit(_, let waitMilliseconds):
                let wait = Double(waitMilliseconds) / 1000
                let elapsed = Date().timeIntervalSince(started)
                if elapsed + wait > patienceSeconds {
                    throw CallLimitError.overLimit(limit: name, wait: Bounded.duration(seconds: wait))
                }
                try sleep(wait, isCancelled: isCancelled)
                waited = true
            }
        }
    }

    /// The longest fleet-wide hold: one hour. A provider's `Retry-After` beyond it (20 digits, or a year) would
    /// otherwise stop the whole fleet's calls for good (review M9); after an hour one call probes again.
    public static let maxHold: Duration = .seconds(3_600)

    /// Holds the limit back fleet-wide: nobody is admitted for `duration`, clamped into `0...maxHold`
    /// (a provider's 429 with Retry-After). See `LimitScripts.hold`.
    public func hold(for duration: Duration, args: [JSONValue] = []) throws {
        let instance: LimitStore.Instance = (declaration.spec, declaration.instanceKey(args: args))
        _ = try redis.withConnection { connection in
            try LimitStore.hold(connection, instance, milliseconds: Bounded.milliseconds(duration.inSeconds, maxSeconds: Self.maxHold.inSeconds))
        }
    }

    private func sleep(_ seconds: Double, isCancelled: () -> Bool) throws(CallLimitError) {
        let until = Date().addingTimeInterval(seconds)
        while true {
            if isCancelled() { throw .cancelled(limit: declaration.spec.name) }
            let remaining = until.timeIntervalSinceNow
            if remaining <= 0 { return }
            Thread.sleep(forTimeInterval: min(remaining, 0.2))
        }
    }
}

/// Why `CallLimiter.acquire` did not admit a call.
public enum CallLimitError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The limit would not admit within the limiter's patience; it estimates `wait` more. The runner
    /// reschedules the job (Sidekiq Enterprise's OverLimit), it is not a failure.
    case overLimit(limit: String, wait: Duration)
    /// The run was cancelled (timeout, shutdown) while it waited: a normal failure of the run.
    case cancelled(limit: String)

    public var description: String {
        switch self {
        case .overLimit(let limit, let wait):
            return "over limit '\(limit)': next admission in \(Bounded.int(wait.inSeconds.rounded(.up), in: 0...Int.max)) s, beyond the wait limit"
        case .cancelled(let limit): return "cancelled while waiting for limit '\(limit)'"
        }
    }
}
