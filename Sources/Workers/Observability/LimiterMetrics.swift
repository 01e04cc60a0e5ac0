import CoreMetrics

/// The limiters' metrics (docs/limiters.md), labelled by limit name only (names come from the job
/// classes' declarations, never from payloads, so the label set stays small). Any thread may call.
enum LimiterMetrics {
    /// A job admitted through its limits.
    static func admitted(_ limit: String) {
        Counter(label: "workers_limiter_admitted_total", dimensions: [("limit", limit)]).increment()
    }

    /// A job refused by `limit` and rescheduled `delay` seconds later.
    static func overLimit(_ limit: String, rescheduledIn delay: Double) {
        Counter(label: "workers_limiter_over_limit_total", dimensions: [("limit", limit)]).increment()
        CoreMetrics.Timer(label: "workers_limiter_reschedule_delay_seconds", dimensions: [("limit", limit)],
                          preferredDisplayUnit: .seconds).recordNanoseconds(Int64(max(0, delay) * 1e9))
    }

    /// A job that had been over its limit was admitted `seconds` after its first refusal (payload field
    /// `overrated_at`): the time its limits made it wait.
    static func waited(_ limit: String, seconds: Double) {
        CoreMetrics.Timer(label: "workers_limiter_wait_seconds", dimensions: [("limit", limit)],
                          preferredDisplayUnit: .seconds).recordNanoseconds(Int64(max(0, seconds) * 1e9))
    }

    /// A running job's concurrency lease had expired (its process did not renew it in time) and was gone.
    static func leaseLost(_ count: Int) {
        Counter(label: "workers_limiter_leases_lost_total").increment(by: Int64(count))
    }
}
