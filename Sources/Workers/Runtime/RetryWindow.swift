import Queue

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
