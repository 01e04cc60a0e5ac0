import Foundation

/// One call of the SQL function `workers_enqueue` (migration 0014, docs/outbox.md), checked and ready to send: the
/// one preparation every Swift way into the outbox goes through — `Outbox.enqueue` on our libpq connection
/// (WorkersOutbox) and `WorkersOutboxNIO.enqueue` on a PostgresNIO one (Packages/WorkersPostgresNIO) — so both refuse
/// the same jobs with the same `EnqueueError` before anything is sent. The SQL function then applies the checks every
/// language gets (payload size, stripped runtime fields, clamped times).
///
/// Pure (no connection, no I/O): a value any thread may build and read.
///
/// Invariant: a value exists only for a job `JobClient.payload` accepts (class name, queue, retry, runtime-owned
/// fields, a given jid) and a finite, non-negative `runAt`.
public struct OutboxEnqueueCall: Sendable, Equatable {
    /// The statement, with parameters `$1`…`$7` in the order of `parameters`; its one row's column `jid` is the jid.
    public static let sql = """
        SELECT workers_enqueue($1, $2::jsonb, $3, to_timestamp($4::float8), $5::jsonb, $6::jsonb, $7) AS jid
        """

    /// `$1`: the job's class.
    public let className: String
    /// `$2`: the job's `args`, JSON array text.
    public let args: String
    /// `$3`: the queue.
    public let queue: String
    /// `$4`: when to run it, epoch seconds; nil (SQL NULL) = now.
    public let runAt: Double?
    /// `$5`: `retry`, JSON text (true, false or a count).
    public let retry: String
    /// `$6`: more top-level payload fields, JSON object text.
    public let extra: String
    /// `$7`: the jid the job is bound to (`NewJob.jid`); nil (SQL NULL) = the function chooses one.
    public let jid: String?

    /// Checks `job` as `JobClient` would before a push, and `at`.
    ///
    /// Throws `EnqueueError` for input Sidekiq would refuse, naming the problem (never an argument's value).
    public init(_ job: NewJob, at: Date? = nil) throws(EnqueueError) {
        _ = try JobClient.payload(for: job, jid: job.jid ?? "000000000000000000000000", createdAt: 0, enqueuedAt: nil)
        let seconds = at?.timeIntervalSince1970
        if let seconds, !seconds.isFinite || seconds < 0 { throw .invalidTime("\(seconds) is not an epoch time") }
        className = job.className
        args = JSONValue.array(job.args).serialized()
        queue = job.queue
        runAt = seconds
        retry = job.retry.serialized()
        extra = JSONValue.object(job.extra).serialized()
        jid = job.jid
    }

    /// The calls for `jobs` (with `times`, one per job, when given), in order; the first refusal throws, so nothing
    /// is sent when one job is refused.
    public static func prepare(_ jobs: [NewJob], at times: [Date]? = nil) throws(EnqueueError) -> [OutboxEnqueueCall] {
        if let times, times.count != jobs.count {
            throw .invalidTime("\(jobs.count) jobs but \(times.count) times")
        }
        var calls: [OutboxEnqueueCall] = []
        calls.reserveCapacity(jobs.count)
        for (index, job) in jobs.enumerated() { calls.append(try OutboxEnqueueCall(job, at: times?[index])) }
        return calls
    }
}
