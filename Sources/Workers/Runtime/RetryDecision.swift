import Queue

/// What Sidekiq's retry rules make of a failed run that may be retried (neither bad input nor permanent): drop it,
/// retry it after a delay, or send it to dead — with the payload's failure bookkeeping written.
///
/// Pure: no clock of its own, no Redis, no logging; any thread. `JobRunner.failure` settles with it, and the fuzz
/// harness (Sources/FuzzTargets/SettlementHarness.swift) calls it with hostile payloads. Invariant: for any payload
/// `JobPayload(parsing:)` accepts, and any error, it returns without trapping, and a retry's `delay` is finite, in
/// `0...Bounded.maxIntervalSeconds` (a `JobError.retryAfter` in `0...JobError.maxRetryAfterSeconds`).
public enum RetryDecision: Sendable, Equatable {
    /// `retry: false`, or retries exhausted with `dead: false`.
    case drop(reason: String)
    /// Retry `delay` seconds after `now`; `retryCount` is the count this failure gives the job.
    case retry(payload: String, delay: Double, retryCount: Int)
    /// Retries exhausted.
    case dead(payload: String, retryCount: Int)

    /// - Parameters:
    ///   - retryAfter: the seconds a `JobError.retryAfter` asked for, if the run threw one.
    public static func decide(_ payload: JobPayload, queue: String, errorClass: String, message: String,
                              options: JobOptions, retryAfter: Double?, now: Double) -> RetryDecision {
        let maxRetries: Int
        switch payload.retry {
        case .disabled: return .drop(reason: "retry disabled")
        case .limit(let n): maxRetries = n
        case .enabled, .unspecified: maxRetries = options.maxRetries
        }
        let updated = failed(payload, queue: queue, errorClass: errorClass, message: message, now: now)
        let count = (payload.retryCount.map { $0 + 1 }) ?? 0
        if RetryWindow.allowsRetry(payload, retryCount: count, maxRetries: maxRetries, now: now) {
            // Both come from outside in the end (a payload's retry_count, a provider's Retry-After): clamped, so the
            // retry's score and the runner's log line stay numbers the runtime can convert.
            var delay = Bounded.seconds(options.backoff.delay(retryCount: count), max: Bounded.maxIntervalSeconds)
            if let retryAfter { delay = Bounded.seconds(retryAfter, max: JobError.maxRetryAfterSeconds) }
            return .retry(payload: updated, delay: delay, retryCount: count)
        }
        if !payload.allowsDead { return .drop(reason: "retries exhausted; dead disabled") }
        return .dead(payload: updated, retryCount: count)
    }

    /// The payload with Sidekiq's failure bookkeeping: queue, error fields, failed_at/retried_at,
    /// retry_count. The times are written in the payload's own unit (`TimestampUnit`).
    public static func failed(_ payload: JobPayload, queue: String, errorClass: String, message: String,
                              now: Double) -> String {
        var payload = payload
        payload.queue = payload.retryQueue ?? queue
        payload.fields["error_message"] = .string(String(message.prefix(10_000)))
        payload.fields["error_class"] = .string(errorClass)
        if let count = payload.retryCount {
            payload.setTimestamp("retried_at", now)
            payload.fields["retry_count"] = .int(Int64(count + 1))
        } else {
            payload.setTimestamp("failed_at", now)
            payload.fields["retry_count"] = .int(0)
        }
        return payload.serialized()
    }
}
