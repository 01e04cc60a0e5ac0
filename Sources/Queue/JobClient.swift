import WorkersBoundary
import Foundation
import WorkersTelemetry
import Tracing

/// A job to enqueue. `retry` is always written (`true`, `false` or an integer), as the issue and
/// Sidekiq's client do.
public struct NewJob: Sendable {
    public var className: String
    public var args: [JSONValue]
    public var queue: String
    public var retry: JSONValue
    /// Extra top-level fields (e.g. `backtrace`, `tags`, `retry_queue`), kept as given; the runtime's own
    /// fields (`NewJob.runtimeOwnedFields`) are refused (`EnqueueError.runtimeField`), and `unique_for` is
    /// clamped to `UniquePolicy.maxSeconds`.
    public var extra: JSONObject
    /// The jid this job will have, when chosen before the enqueue (24 lowercase hex characters): by a middleware that
    /// binds the job's content to it (the sealer of personal arguments), or by the producer. Nil: chosen at enqueue.
    public var jid: String?

    /// Fields of `runtimeOwnedFields` the runtime itself sets on this job (a batch's `bid`, a unique job's
    /// `unique_key`; tests of this package simulate a history with them). Not visible outside the package.
    package var runtimeFields: JSONObject = [:]

    /// Fields only the runtime writes: its counters and failure bookkeeping, a batch's `bid` (set by
    /// `Batch`), a unique job's `unique_key` (set by `enqueueUnique`). A producer that could set them could
    /// crash workers (a counter at Int64's limit, review H1), join a batch it does not own, or forge a job's
    /// history. `workers_enqueue` strips the same list (migration 0016).
    public static let runtimeOwnedFields: Set<String> = [
        "retry_count", "interrupted_count", "bid", "unique_key", "error_message", "error_class", "error_backtrace",
        "failed_at", "retried_at", "raw_payload", "overrated", "overrated_at",
    ]

    public init(_ className: String, args: [JSONValue] = [], queue: String = "default",
                retry: JSONValue = .bool(true), extra: JSONObject = [:]) {
        self.className = className
        self.args = args
        self.queue = queue
        self.retry = retry
        self.extra = extra
    }
}

/// Input a producer got wrong: refused before anything is written to Redis.
public enum EnqueueError: Error, Sendable, CustomStringConvertible, Equatable {
    case invalidClassName(String)
    case invalidQueueName(String)
    case invalidRetry(String)
    case invalidTime(String)
    case invalidUnique(String)
    /// Typed arguments that do not encode to `args` (`JobArguments.sidekiqArgs()`).
    case invalidArguments(String)
    /// `extra` names a field only the runtime writes (`NewJob.runtimeOwnedFields`).
    case runtimeField(String)
    /// The payload is larger than `JobClient.maxPayloadBytes` (review M10: a 20 MB argument was accepted and run).
    case tooLarge(bytes: Int, limit: Int)

    public var description: String {
        switch self {
        case .invalidClassName(let why): return "invalid job class: \(why)"
        case .invalidQueueName(let why): return "invalid queue name: \(why)"
        case .invalidRetry(let why): return "invalid retry: \(why)"
        case .invalidTime(let why): return "invalid time: \(why)"
        case .invalidUnique(let why): return "invalid uniqueness: \(why)"
        case .invalidArguments(let why): return "invalid arguments: \(why)"
        case .runtimeField(let name): return "extra field \"\(name)\" is written by the runtime only"
        case .tooLarge(let bytes, let limit): return "payload is \(bytes) bytes, over the limit of \(limit)"
        }
    }
}

/// Enqueues jobs in Sidekiq's wire format (`shared/docs/sidekiq-wire-format.md` §3).
///
/// Immediate jobs: one pipeline `SADD queues Q` + `LPUSH queue:Q json…` with `enqueued_at`.
/// Scheduled jobs: `ZADD schedule at json…` without `enqueued_at`. Thread-safe: it borrows
/// connections from a `RedisPool`.
///
/// With `replicaWait`, each enqueue ends with `WAIT` in the same round trip and throws
/// `ReplicaWaitError.unconfirmed` when too few replicas confirmed (the jobs are on the master; a
/// caller that pushes again may enqueue them twice — docs/redis-ha.md).
///
/// With several shards (`init(shards:)`, docs/sharding.md) every job goes to the Redis holding its
/// queue: one round trip per shard a call touches. Jobs of one call on different shards are not
/// written atomically together (a failure may leave some shards written).
public struct JobClient: Sendable {
    /// The default shard's pool (the only Redis without sharding).
    public let pool: RedisPool
    package let replicaWait: ReplicaWait?
    /// Nil with one Redis: every call takes today's single-pool path.
    package let shards: ShardPools?
    /// Applied to every job this client enqueues, in order, before validation (`EnqueueMiddleware`).
    public let middleware: [any EnqueueMiddleware]

    /// A blocking client over `pool` (from async code use `WorkersClient`). `middleware`: see `EnqueueMiddleware`;
    /// empty by default (then a job is not copied).
    public init(pool: RedisPool, middleware: [any EnqueueMiddleware] = []) {
        self.init(pool: pool, replicaWait: nil, middleware: middleware)
    }

    package init(pool: RedisPool, replicaWait: ReplicaWait?, middleware: [any EnqueueMiddleware] = []) {
        self.pool = pool
        self.replicaWait = replicaWait
        self.shards = nil
        self.middleware = middleware
    }

    /// Routes each job to its queue's shard. With a one-shard map this is `init(pool:)`.
    package init(shards: ShardPools, replicaWait: ReplicaWait? = nil, middleware: [any EnqueueMiddleware] = []) {
        self.pool = shards.pools[0]
        self.replicaWait = replicaWait
        self.shards = shards.map.isSingle ? nil : shards
        self.middleware = middleware
    }

    /// `job` as this client's middleware leaves it (each in order), not yet validated. Every enqueue path calls
    /// it exactly once per job, before `payload(for:)`.
    func prepared(_ job: NewJob) throws -> NewJob {
        if middleware.isEmpty { return job }
        var job = job
        for step in middleware { try step.prepare(&job) }
        return job
    }

    /// The pool of the Redis holding `queue`.
    public func pool(forQueue queue: String) -> RedisPool {
        shards?.pool(forQueue: queue) ?? pool
    }

    /// Sends `commands` in one round trip (plus `WAIT` when configured) and checks every reply.
    private func write(_ commands: [[any RedisArgument]], on pool: RedisPool? = nil) throws {
        try (pool ?? self.pool).withConnection { connection in
            let replies = try connection.pipeline(commands + (replicaWait.map { [$0.command] } ?? []))
            for reply in replies.prefix(commands.count) { try reply.checked() }
            if let replicaWait, let last = replies.last { try replicaWait.check(last, on: connection) }
        }
    }

    /// The largest payload, in bytes of its JSON, an enqueue accepts: 1 MiB, as `workers_enqueue` and the relay
    /// (docs/outbox.md). Sidekiq itself has no limit; a job's data belongs in the database, its id in the job.
    public static let maxPayloadBytes = 1_048_576

    /// `payload` as the JSON text pushed to Redis, refused when it is over `maxPayloadBytes`.
    public static func serializedWithinLimit(_ payload: JobPayload) throws(EnqueueError) -> String {
        let text = payload.serialized()
        let bytes = text.utf8.count
        if bytes > maxPayloadBytes { throw .tooLarge(bytes: bytes, limit: maxPayloadBytes) }
        return text
    }

    /// Builds the payload Ruby's client would build, in its key order. `job.runtimeFields` are written after
    /// `extra` (which may not hold them).
    /// `jid`: the job's (`job.jid` when set, which `jid` must then equal: the job's sealed arguments are bound to it).
    public static func payload(for job: NewJob, jid: String? = nil, createdAt: Double,
                               enqueuedAt: Double?) throws(EnqueueError) -> JobPayload {
        try validate(job)
        let jid = jid ?? job.jid ?? Identifiers.jid()
        if let bound = job.jid, bound != jid {
            throw .invalidArguments("the job is bound to jid \(bound) (its sealed arguments), not \(jid)")
        }
        var fields: JSONObject = ["retry": job.retry, "queue": .string(job.queue)]
        for (key, value) in job.extra where fields[key] == nil && !["class", "args", "jid", "at"].contains(key) {
            if key == "unique_for", let seconds = value.doubleValue, !(0...UniquePolicy.maxSeconds).contains(seconds) {
                fields[key] = .int(Int64(Bounded.seconds(seconds, max: UniquePolicy.maxSeconds)))
            } else {
                fields[key] = value
            }
        }
        for (key, value) in job.runtimeFields { fields[key] = value }
        fields["class"] = .string(job.className)
        fields["args"] = .array(job.args)
        fields["jid"] = .string(jid)
        fields["created_at"] = .double(createdAt)
        if let enqueuedAt { fields["enqueued_at"] = .double(enqueuedAt) }
        return JobPayload(fields: fields)
    }

    static func validate(_ job: NewJob) throws(EnqueueError) {
        if job.className.isEmpty { throw .invalidClassName("empty") }
        if let jid = job.jid, jid.utf8.count != 24 || !jid.utf8.allSatisfy({ (48...57).contains($0) || (97...102).contains($0) }) {
            throw .invalidArguments("a jid is 24 lowercase hex characters")
        }
        if job.className.contains(where: { $0.isWhitespace }) { throw .invalidClassName("'\(job.className)' contains whitespace") }
        try validateQueue(job.queue)
        switch job.retry {
        case .bool: break
        case .int(let n) where n >= 0 && n <= Int64(Bounded.maxCount): break
        default: throw .invalidRetry("expected true, false or an integer in 0...\(Bounded.maxCount), got \(job.retry.serialized())")
        }
        for key in job.extra.keys where NewJob.runtimeOwnedFields.contains(key) { throw .runtimeField(key) }
    }

    /// The longest queue name accepted (review L7: every name becomes a key, a member of `queues`, a metrics label).
    public static let maxQueueNameLength = 128

    /// A queue name this client accepts: 1 to 128 characters, each an ASCII letter or digit, `_`, `.`, `:` or `-`.
    /// (Names written by other producers are still read and shown as they are.) The error repeats the name only when
    /// it is short.
    public static func validateQueue(_ queue: String) throws(EnqueueError) {
        if queue.isEmpty { throw .invalidQueueName("empty") }
        if queue.utf8.count > maxQueueNameLength {
            throw .invalidQueueName("\(queue.utf8.count) bytes long, over the limit of \(maxQueueNameLength)")
        }
        if queue.contains(where: { $0.isWhitespace || $0 == "*" || $0 == "?" || $0 == "[" || $0 == "]" }) {
            throw .invalidQueueName("'\(queue)' contains whitespace or a glob character")
        }
        if let bad = queue.unicodeScalars.first(where: { !($0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || "_.:-".unicodeScalars.contains($0))) }) {
            throw .invalidQueueName("'\(queue)' contains '\(bad.escaped(asASCII: true))': use only letters, digits, '_', '.', ':' and '-'")
        }
    }

    /// Enqueues one job now and returns its jid.
    @discardableResult
    public func enqueue(_ job: NewJob) throws -> String {
        try enqueueMany([job])[0]
    }

    /// Enqueues jobs now, all in one round trip (one LPUSH per queue). Returns their jids in order;
    /// within a queue they run in the order given.
    @discardableResult
    public func enqueueMany(_ jobs: [NewJob]) throws -> [String] {
        if jobs.isEmpty { return [] }
        let now = Clock.now()
        var jids: [String] = []
        var byQueue: [(queue: String, payloads: [String])] = []
        var spans: [any Span] = []  // one producer span per job, only while tracing is on (docs/tracing.md)
        for job in jobs {
            let job = try prepared(job)
            let jid = job.jid ?? Identifiers.jid()
            var payload = try Self.payload(for: job, jid: jid, createdAt: now, enqueuedAt: now)
            if JobTracing.isEnabled {
                let span = JobTraceContext.startEnqueueSpan(className: job.className, queue: job.queue, jid: jid)
                JobTraceContext.inject(span, into: &payload)
                spans.append(span)
            }
            jids.append(jid)
            let text = try Self.serializedWithinLimit(payload)
            if let index = byQueue.firstIndex(where: { $0.queue == job.queue }) {
                byQueue[index].payloads.append(text)
            } else {
                byQueue.append((job.queue, [text]))
            }
        }
        do {
            if let shards {
                // One round trip per shard, each with the commands of its queues.
                for group in shards.map.group(queues: byQueue.map(\.queue)) {
                    var commands: [[any RedisArgument]] = []
                    for (queue, payloads) in byQueue where group.queues.contains(queue) {
                        commands.append(["SADD", Keys.queues, queue])
                        commands.append(["LPUSH", Keys.queue(queue)] + payloads)
                    }
                    try write(commands, on: shards.pools[group.shard])
                }
            } else {
                var commands: [[any RedisArgument]] = []
                for (queue, payloads) in byQueue {
                    commands.append(["SADD", Keys.queues, queue])
                    commands.append(["LPUSH", Keys.queue(queue)] + payloads)
                }
                try write(commands)
            }
        } catch {
            JobTraceContext.end(spans, error: error)
            throw error
        }
        JobTraceContext.end(spans, error: nil)
        return jids
    }

    /// Enqueues one job to run at `date`. A time not in the future is pushed now; one outside 1970…9999 is
    /// refused (`EnqueueError.invalidTime`).
    @discardableResult
    public func enqueue(_ job: NewJob, at date: Date) throws -> String {
        try enqueueMany([job], at: [date.timeIntervalSince1970])[0]
    }

    /// Enqueues one job to run `delay` from now (zero or negative: now).
    @discardableResult
    public func enqueue(_ job: NewJob, in delay: Duration) throws -> String {
        try enqueue(job, at: Clock.now() + delay.inSeconds)
    }

    /// Schedules jobs in one `ZADD schedule` (jobs whose time has come are pushed now instead); `dates[i]` is
    /// `jobs[i]`'s time.
    @discardableResult
    public func enqueueMany(_ jobs: [NewJob], at dates: [Date]) throws -> [String] {
        try enqueueMany(jobs, at: dates.map(\.timeIntervalSince1970))
    }

    /// `enqueue(_:at:)` with `at` in epoch seconds (the runtime's and workerctl's unit).
    @discardableResult
    package func enqueue(_ job: NewJob, at: Double) throws -> String {
        try enqueueMany([job], at: [at])[0]
    }

    /// `enqueue(_:in:)` with `delay` in seconds.
    @discardableResult
    package func enqueue(_ job: NewJob, in delay: Double) throws -> String {
        try enqueue(job, at: Clock.now() + delay)
    }

    /// `enqueueMany(_:at:)` with times in epoch seconds.
    @discardableResult
    package func enqueueMany(_ jobs: [NewJob], at times: [Double]) throws -> [String] {
        guard jobs.count == times.count else { throw EnqueueError.invalidTime("\(jobs.count) jobs but \(times.count) times") }
        for time in times where Bounded.epochSeconds(time) == nil { throw EnqueueError.invalidTime("\(time) is not an epoch time") }
        let now = Clock.now()
        var jids = [String](repeating: "", count: jobs.count)
        var immediate: [(Int, NewJob)] = []
        var spans: [any Span] = []  // as in `enqueueMany(_:)`
        // One `ZADD schedule` per shard (index 0 alone without sharding): a scheduled job waits in the
        // `schedule` of its queue's shard, whose pollers move it.
        var zadds: [[any RedisArgument]] = [["ZADD", Keys.schedule]]
        if let shards { zadds = Array(repeating: ["ZADD", Keys.schedule], count: shards.pools.count) }
        for (index, job) in jobs.enumerated() {
            if times[index] <= now {
                immediate.append((index, job))  // the middleware is applied by `enqueueMany(_:)`
                continue
            }
            let job = try prepared(job)
            let jid = job.jid ?? Identifiers.jid()
            var payload = try Self.payload(for: job, jid: jid, createdAt: now, enqueuedAt: nil)
            if JobTracing.isEnabled {
                let span = JobTraceContext.startEnqueueSpan(className: job.className, queue: job.queue, jid: jid)
                JobTraceContext.inject(span, into: &payload)
                spans.append(span)
            }
            let shard = shards?.map.shardIndex(forQueue: job.queue) ?? 0
            zadds[shard].append(times[index])
            zadds[shard].append(try Self.serializedWithinLimit(payload))
            jids[index] = jid
        }
        do {
            for (shard, zadd) in zadds.enumerated() where zadd.count > 2 {
                try write([zadd], on: shards?.pools[shard])
            }
        } catch {
            JobTraceContext.end(spans, error: error)
            throw error
        }
        JobTraceContext.end(spans, error: nil)
        if !immediate.isEmpty {
            let pushed = try enqueueMany(immediate.map(\.1))
            for (offset, item) in immediate.enumerated() { jids[item.0] = pushed[offset] }
        }
        return jids
    }

    /// Pushes an existing payload (kept as is but for `enqueued_at` = now) onto its queue, as
    /// Sidekiq's client does when the poller or an operator moves a job.
    public func push(existing payload: JobPayload, connection: RedisConnection) throws {
        var payload = payload
        let queue = payload.queue ?? "default"
        payload.queue = queue
        if payload.fields["retry"] == nil { payload.fields["retry"] = .bool(true) }
        if payload.fields["created_at"] == nil { payload.setTimestamp("created_at", Clock.now()) }
        payload.setTimestamp("enqueued_at", Clock.now())
        let replies = try connection.pipeline([["SADD", Keys.queues, queue],
                                               ["LPUSH", Keys.queue(queue), payload.serialized()]])
        for reply in replies { try reply.checked() }
    }
}
