import Foundation
import Queue
import Workers

/// The runner's settlement of a failed run and the recovery of a dead process's jobs, for a hostile payload:
/// the arithmetic of `JobRunner.failure` / `JobRunner.failed` (Sources/Workers/Runtime/JobRunner.swift) and of the
/// recovery in `ReliableQueue` (Sources/Queue/ReliableQueue.swift, `interrupted_count + 1`).
///
/// Those functions are internal and sit next to Redis calls, so this harness **restates** their arithmetic with
/// the public pieces they use (`JobPayload`'s accessors, `Backoff.delay(retryCount:)`, `TimestampUnit`), as of
/// the commit that added it. When the runtime exposes pure functions for both decisions (asked for in issue 32),
/// this file should call them instead of restating them.
///
/// Checked: no trap for any payload, with each backoff kind; the retry delay is finite and ≥ 0, and converts to
/// whole seconds (`Int(delay)`, the runner's log line).
public enum SettlementHarness {
    static let now = 1_795_737_600.0
    static let backoffs: [Backoff] = [.sidekiq, .exponential(base: 15, cap: 86_400, jitter: 0.1), .schedule([10, 60, 600])]

    public static func run(_ data: [UInt8]) {
        guard let payload = try? JobPayload(parsing: data) else { return }
        for backoff in backoffs { settle(payload, options: JobOptions(maxRetries: 25, backoff: backoff)) }
        recover(payload, interruptLimit: 3)
    }

    /// JobRunner.failure + failed, for an error that is neither `badInput` nor `permanent`.
    static func settle(_ payload: JobPayload, options: JobOptions) {
        FuzzSink.keep((payload.retryCount ?? -1) + 2)  // the attempt number
        let maxRetries: Int
        switch payload.retry {
        case .disabled: return
        case .limit(let n): maxRetries = n
        case .enabled, .unspecified: maxRetries = options.maxRetries
        }
        var updated = payload
        if let count = payload.retryCount {
            updated.setTimestamp("retried_at", now)
            updated.fields["retry_count"] = .int(Int64(count + 1))
        } else {
            updated.setTimestamp("failed_at", now)
            updated.fields["retry_count"] = .int(0)
        }
        FuzzSink.keep(updated.serialized())
        let count = payload.retryCount.map { $0 + 1 } ?? 0
        let allowed: Bool
        if let window = payload.retryFor {
            let firstFailure = payload.retryCount == nil ? now : (payload.failedAt ?? now)
            allowed = !(firstFailure + window < now)
        } else {
            allowed = count < maxRetries
        }
        guard allowed else { return }
        let delay = options.backoff.delay(retryCount: count)
        guard delay.isFinite, delay >= 0 else { FuzzHarness.violated("retry delay \(delay) for retry_count \(count)") }
        FuzzSink.keep(Int(delay))  // "delay_s" in the runner's log line
        FuzzSink.keep(now + delay)
    }

    /// ReliableQueue's recovery of one job from a dead process's in-flight list.
    static func recover(_ payload: JobPayload, interruptLimit: Int) {
        var payload = payload
        let count = payload.interruptedCount + 1
        payload.fields["interrupted_count"] = .int(Int64(count))
        if count >= interruptLimit && interruptLimit > 0, payload.fields["failed_at"] == nil {
            payload.setTimestamp("failed_at", now)
        }
        FuzzSink.keep(payload.serialized())
    }
}
