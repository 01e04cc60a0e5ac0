import Foundation
import Logging
import WorkersQueue

// The retry policy: what a failed run comes to under Sidekiq's retry rules (§6 of the wire doc). The kinds of
// failure (`JobError`'s cases → dead, or retried after a given delay; any other error → retried with backoff), the
// decision (`RetryDecision`: drop, retry, dead), the retry window (`RetryWindow`: by count, or by `retry_for`),
// the delays (`Backoff`) and the payload's failure bookkeeping (`JobPayload.recordingFailure`). The runner names
// the error (`JobRunner.errorClassName`) and settles with `RetryPolicy.settlement(after:…)`.

/// Sidekiq's retry rules applied to a failed run: the settlement it gets.
///
/// Pure apart from the logger and the clock (`Clock.now()`, read once per failure); any thread.
enum RetryPolicy {
    /// The settlement of a run that failed with `error` (named `errorClass` in the payload's error fields):
    /// `JobError.badInput` / `.permanent` → dead at once; otherwise `RetryDecision.decide` (a `JobError.retryAfter`
    /// gives the delay) → drop, retry, or dead. Logs the failure on `logger` (the run's).
    static func settlement(after error: any Error, errorClass: String, payload: JobPayload, queue: String,
                           options: JobOptions, logger: Logger) -> Settlement {
        let message = JobRunner.message(error)
        switch error {
        case JobError.badInput, JobError.permanent:
            logger.warning("failed permanently; sent to dead", metadata: ["error": "\(message)"])
            return .dead(payload: payload.recordingFailure(queue: queue, errorClass: errorClass, message: message))
        default:
            break
        }
        var retryAfter: Double?
        if case JobError.retryAfter(let delay, _) = error { retryAfter = delay.inSeconds }
        let now = Clock.now()
        switch RetryDecision.decide(payload, queue: queue, errorClass: errorClass, message: message, options: options,
                                    retryAfter: retryAfter, now: now) {
        case .drop(let reason):
            logger.warning("failed; \(reason), dropped", metadata: ["error": "\(message)"])
            return .drop
        case .retry(let updated, let delay, let count):
            logger.info("failed; retry scheduled",
                        metadata: ["error": "\(message)", "retry_count": "\(count)", "delay_s": "\(Int(delay))"])
            return .retry(payload: updated, at: now + delay)
        case .dead(let updated, let count):
            logger.warning("retries exhausted; sent to dead", metadata: ["error": "\(message)", "retry_count": "\(count)"])
            return .dead(payload: updated)
        }
    }
}

/// What Sidekiq's retry rules make of a failed run that may be retried (neither bad input nor permanent): drop it,
/// retry it after a delay, or send it to dead — with the payload's failure bookkeeping written.
///
/// Pure: no clock of its own, no Redis, no logging; any thread. `RetryPolicy.settlement(after:…)` settles with it,
/// and the fuzz harness (Sources/FuzzTargets/SettlementHarness.swift) calls it with hostile payloads. Invariant: for
/// any payload `JobPayload(parsing:)` accepts, and any error, it returns without trapping, and a retry's `delay` is
/// finite, in `0...Bounded.maxIntervalSeconds` (a `JobError.retryAfter` in `0...JobError.maxRetryAfter`).
package enum RetryDecision: Sendable, Equatable {
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
        let updated = payload.recordingFailure(queue: queue, errorClass: errorClass, message: message, now: now)
        let count = (payload.retryCount.map { $0 + 1 }) ?? 0
        if RetryWindow.allowsRetry(payload, retryCount: count, maxRetries: maxRetries, now: now) {
            // Both come from outside in the end (a payload's retry_count, a provider's Retry-After): clamped, so the
            // retry's score and the runner's log line stay numbers the runtime can convert.
            var delay = options.backoff.delaySeconds(retryCount: count)
            if let retryAfter { delay = Bounded.seconds(retryAfter, max: JobError.maxRetryAfter.inSeconds) }
            return .retry(payload: updated, delay: delay, retryCount: count)
        }
        if !payload.allowsDead { return .drop(reason: "retries exhausted; dead disabled") }
        return .dead(payload: updated, retryCount: count)
    }
}

/// Whether a failed job (whose `retry` is not `false`) gets another try: by count, or by time when
/// the payload has Sidekiq 7.1.3+'s `retry_for`.
///
/// Sidekiq v8.1.7 lib/sidekiq/job_retry.rb, `process_retry`:
///
///     rf = msg["retry_for"]
///     if rf
///       return retries_exhausted(...) if (time_for(msg["failed_at"]) + rf) < Time.now
///     elsif count >= max_retry_attempts
///       return retries_exhausted(...)
///     end
///
/// so with `retry_for` the count limit (`retry: N` or the class's maximum) does not apply at all
/// (8.1.0, "`retry_for` and `retry` are now mutually exclusive"; 7.1.3–8.0 applied both, whichever
/// ran out first). `failed_at` is the first failure, in either timestamp unit (`TimestampUnit`).
/// Pure: no clock of its own, no Redis; any thread.
enum RetryWindow {
    /// - Parameters:
    ///   - payload: the payload as fetched, before this failure's bookkeeping.
    ///   - retryCount: the `retry_count` this failure gives the job (0 for the first failure).
    ///   - maxRetries: the count limit that applies without `retry_for`.
    ///   - now: the time of this failure (epoch seconds); it is `failed_at` on a first failure.
    static func allowsRetry(_ payload: JobPayload, retryCount: Int, maxRetries: Int, now: Double) -> Bool {
        // A count the next read would refuse (`JobPayload.runtimeCounters`) ends the retries here, with the error.
        guard retryCount < Bounded.maxCount else { return false }
        if let window = payload.retryFor {
            let firstFailure = payload.retryCount == nil ? now : (payload.failedAt ?? now)
            return !(firstFailure + window < now)
        }
        return retryCount < maxRetries
    }
}

/// Delay before the next attempt, given the retry count so far (0 after the first failure).
public enum Backoff: Sendable {
    /// Sidekiq: `count⁴ + 15 + rand(0…9) × (count + 1)` seconds.
    case sidekiq
    /// `min(cap, base × 2^count)` with ±`jitter` (a fraction of the delay, e.g. 0.1) random spread.
    case exponential(base: Duration, cap: Duration, jitter: Double)
    /// A fixed list of delays; the last one repeats.
    case schedule([Duration])

    /// The delay after the failure that gave `retry_count` `count`, in `0...Bounded.maxIntervalSeconds` (a
    /// count from a payload may be anything up to `Bounded.maxCount`; a longer delay is clamped, never a trap).
    public func delay(retryCount count: Int) -> Duration {
        .seconds(delaySeconds(retryCount: count))
    }

    /// `delay(retryCount:)` in seconds, for the runtime's scores: finite, in `0...Bounded.maxIntervalSeconds`.
    package func delaySeconds(retryCount count: Int) -> Double {
        let raw: Double
        switch self {
        case .sidekiq:
            let c = Double(count)
            raw = c * c * c * c + 15 + Double(Int.random(in: 0...9)) * (c + 1)
        case .exponential(let base, let cap, let jitter):
            let limited = min(cap.inSeconds, base.inSeconds * pow(2, Double(min(count, 60))))
            let spread = Bounded.seconds(abs(limited * jitter), max: Bounded.maxIntervalSeconds)
            raw = limited + Double.random(in: -spread...spread)
        case .schedule(let delays):
            guard let last = delays.last else { raw = 15; break }
            raw = (count < delays.count ? delays[count] : last).inSeconds
        }
        return Bounded.seconds(raw, max: Bounded.maxIntervalSeconds)
    }
}

extension JobPayload {
    /// The payload with Sidekiq's failure bookkeeping: queue, error fields, failed_at/retried_at,
    /// retry_count. The times are written in the payload's own unit (`TimestampUnit`).
    package func recordingFailure(queue: String, errorClass: String, message: String,
                                 now: Double = Clock.now()) -> String {
        var payload = self
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
