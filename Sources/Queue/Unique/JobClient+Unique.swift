import Foundation
import WorkersTelemetry
import Tracing

extension JobClient {
    /// Enqueues `job` unless a job with the same uniqueness lock is live: returns `.enqueued(jid)`
    /// or `.duplicate(of: jid)` of the job holding the lock. The check and the push are one Lua
    /// script. The payload carries `unique_for`, `unique_until` (and `unique_key` when `key` is
    /// given) so the worker that fetches it keeps the lock as the policy says.
    ///
    /// `key`: the uniqueness key (default: the policy's derived key, else the `args`).
    /// `at`: schedule it; the lock then lives the delay plus `policy.duration`.
    public func enqueueUnique(_ job: NewJob, policy: UniquePolicy, key: String? = nil,
                              at: Date? = nil) throws -> UniquePush {
        try enqueueUnique(job, policy: policy, key: key, at: at?.timeIntervalSince1970)
    }

    /// `enqueueUnique(_:policy:key:at:)` with `at` in epoch seconds (the runtime's and workerctl's unit).
    package func enqueueUnique(_ job: NewJob, policy: UniquePolicy, key: String? = nil,
                               at: Double?) throws -> UniquePush {
        let now = Clock.now()
        let scheduled = at.flatMap { $0 > now ? $0 : nil }
        if let at, Bounded.epochSeconds(at) == nil { throw EnqueueError.invalidTime("\(at) is not an epoch time") }
        guard policy.seconds > 0, policy.seconds <= UniquePolicy.maxSeconds else {
            throw EnqueueError.invalidUnique("unique_for must be a number of seconds in (0, \(Int(UniquePolicy.maxSeconds))], got \(policy.seconds)")
        }
        var job = try prepared(job)
        let derived = key ?? policy.key?(job.args)
        for (field, value) in policy.fields(key: derived) { job.runtimeFields[field] = value }
        var payload = try Self.payload(for: job, createdAt: now, enqueuedAt: scheduled == nil ? now : nil)
        _ = try Self.serializedWithinLimit(payload)
        let lock = UniqueLockKey(payload: payload, policy: policy)  // before the trace fields: they never make a job unique
        // The lock lives on the queue's shard, next to the job it guards (docs/sharding.md).
        let shardPool = pool(forQueue: job.queue)
        guard JobTracing.isEnabled else {
            return try shardPool.withConnection { connection in
                try UniqueLocks.push(connection, payload: payload, lock: lock, policy: policy, at: scheduled, now: now)
            }
        }
        // A producer span as in `enqueueMany` (docs/tracing.md); a duplicate is marked `job.unique`=`duplicate`.
        let span = JobTraceContext.startEnqueueSpan(className: job.className, queue: job.queue, jid: payload.jid ?? "-")
        JobTraceContext.inject(span, into: &payload)
        let pushed: UniquePush
        do {
            pushed = try shardPool.withConnection { [payload] connection in
                try UniqueLocks.push(connection, payload: payload, lock: lock, policy: policy, at: scheduled, now: now)
            }
        } catch {
            JobTraceContext.end([span], error: error)
            throw error
        }
        if case .duplicate = pushed { span.attributes["job.unique"] = "duplicate" }
        JobTraceContext.end([span], error: nil)
        return pushed
    }
}
