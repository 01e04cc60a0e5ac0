import Foundation
import WorkersQueue
import Workers

/// The runner's settlement of a failed run (`RetryDecision.decide`, what `RetryPolicy.settlement(after:…)` settles
/// with) and the orphan sweep's recovery of a dead process's job (`ReliableQueue.recovery(of:…)`), for a hostile
/// payload: the runtime's own pure functions, called as the runtime calls them.
///
/// Checked: no trap for any payload, with each backoff kind, with and without a `Retry-After`; a retry's delay is
/// finite, within the clamp, and converts to whole seconds (`Int(delay)`, the runner's log line).
public enum SettlementHarness {
    static let now = 1_795_737_600.0
    static let backoffs: [Backoff] = [.sidekiq, .exponential(base: .seconds(15), cap: .seconds(86_400), jitter: 0.1),
                                     .schedule([.seconds(10), .seconds(60), .seconds(600)])]

    public static func run(_ data: [UInt8]) {
        if let payload = try? JobPayload(parsing: data) {
            FuzzSink.keep((payload.retryCount ?? -1) + 2)  // the attempt number the runner logs
            for backoff in backoffs {
                for retryAfter in [nil, 1e300, Double.nan, -1] as [Double?] {
                    settle(payload, options: JobOptions(maxRetries: 25, backoff: backoff), retryAfter: retryAfter)
                }
            }
        }
        // Unreadable payloads too: the sweep sends them to dead with their reason.
        for limit in [0, 3, Int.max] {
            let decision = ReliableQueue.recovery(of: data, queue: "default", identity: "host:1:abcdef", interruptLimit: limit, now: now)
            FuzzSink.keep(decision.payload)
        }
    }

    static func settle(_ payload: JobPayload, options: JobOptions, retryAfter: Double?) {
        let decision = RetryDecision.decide(payload, queue: "default", errorClass: "RuntimeError", message: "boom",
                                            options: options, retryAfter: retryAfter, now: now)
        guard case .retry(_, let delay, _) = decision else { return }
        guard delay.isFinite, delay >= 0, delay <= Bounded.maxIntervalSeconds else {
            FuzzHarness.violated("retry delay \(delay) for retry_count \(payload.retryCount ?? -1)")
        }
        FuzzSink.keep(Int(delay))  // "delay_s" in the runner's log line
        FuzzSink.keep(now + delay)
    }
}
