import Foundation
import Logging
import WorkersQueue

extension JobRunner {
    /// What the limits decided for one delivery.
    enum LimitDecision {
        /// Run, holding these concurrency leases until the run ends; admitted at `admittedAt` (Redis time, s).
        case run([LimitLease], admittedAt: Double)
        /// Do not run: settle with this result (rescheduled, or failed past the reschedule cap).
        case settle(RunResult)
    }

    /// Admits `payload` through `limits`, or decides its over-limit result (Sidekiq Enterprise's OverLimit:
    /// `OverLimitPolicy`). A Redis error is a normal failure of the run (retried with backoff).
    func admit(_ payload: JobPayload, job: FetchedJob, limits: JobLimits, limiter: JobLimiter, logger: Logger) -> LimitDecision {
        let options = registry.options(for: payload.className) ?? JobOptions()
        let admission: LimitAdmission
        do {
            admission = try limiter.admit(limits, payload: payload)
        } catch {
            return .settle(.failed(settlement(after: error, payload: payload, job: job, options: options, logger: logger)))
        }
        switch admission {
        case .admitted(let leases, let atMilliseconds):
            if let since = Bounded.epochSeconds(payload.fields["overrated_at"]?.doubleValue) {
                for declaration in limits.declarations { LimiterMetrics.waited(declaration.spec.name, seconds: Clock.now() - since) }
            }
            for declaration in limits.declarations { LimiterMetrics.admitted(declaration.spec.name) }
            return .run(leases, admittedAt: Double(atMilliseconds) / 1000)
        case .overLimit(let spec, let waitMilliseconds):
            return .settle(overLimit(spec.name, waitSeconds: Double(waitMilliseconds) / 1000, payload: payload, job: job,
                                     policy: limits.overLimit, options: options, logger: logger))
        }
    }

    /// The settlement of a job over `limit` (refused at admission, or by a `CallLimiter` inside `perform`):
    /// rescheduled after `policy.backoff`, with `overrated` + 1 and no failure bookkeeping; past
    /// `policy.reschedule` refusals an `OverLimit` failure on the normal retry path.
    func overLimit(_ limit: String, waitSeconds: Double, payload: JobPayload, job: FetchedJob, policy: OverLimitPolicy,
                   options: JobOptions, logger: Logger) -> RunResult {
        let overrated = Bounded.int(payload.fields["overrated"]?.intValue ?? 0, in: 0...Bounded.maxCount)
        if overrated >= policy.reschedule {
            logger.warning("over limit past its reschedule cap; failing", metadata: ["limit": "\(limit)"])
            return .failed(settlement(after: OverLimit(limit: limit, overrated: overrated), payload: payload, job: job,
                                      options: options, logger: logger))
        }
        let delay = Bounded.seconds(policy.backoff(overrated, Bounded.duration(seconds: waitSeconds)).inSeconds,
                                   max: Bounded.maxIntervalSeconds)
        var next = payload
        let now = Clock.now()
        next.fields["overrated"] = .int(Int64(overrated + 1))
        if next.fields["overrated_at"] == nil { next.fields["overrated_at"] = .double(now) }
        LimiterMetrics.overLimit(limit, rescheduledIn: delay)
        logger.debug("over limit; rescheduled", metadata: ["limit": "\(limit)", "overrated": "\(overrated + 1)",
                                                          "delay_s": "\(delay)"])
        // Not a run: no `stat:*` counter, no run metrics.
        return .settled(.schedule(payload: next.serialized(), at: now + delay), counts: [])
    }
}
