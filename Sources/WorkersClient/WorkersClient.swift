@_exported import WorkersQueue
// The tracing switch (docs/tracing.md): enqueue spans and `traceparent` once the service turns it on.
@_exported import enum WorkersTelemetry.JobTracing
import Foundation

/// What the async client itself refuses (Redis and input errors come through as `RedisError`
/// and `EnqueueError`).
public enum WorkersClientError: Error, Sendable, Equatable, CustomStringConvertible {
    /// `shutdown()` was called; the client takes no more calls.
    case shutDown
    /// `withConnection(shard:)` named a shard the client's `ShardMap` does not have.
    case unknownShard(name: String, configured: [String])

    public var description: String {
        switch self {
        case .shutDown: return "the WorkersClient was shut down"
        case .unknownShard(let name, let configured):
            return "no shard named '\(name)' (configured: \(configured.joined(separator: ", ")))"
        }
    }
}

/// The enqueue client and admin API for Swift services (Vapor, Hummingbird, …): an async/await
/// surface over a bounded `RedisPool`, without the worker runtime.
///
/// ## Threads
/// hiredis is a blocking library. Every call here runs on one of the client's own
/// `maxConnections` threads (named `WClient-<i>`), never on the Swift concurrency
/// cooperative pool: the awaiting task is suspended, not blocked. With as many threads as pooled
/// connections, a thread never waits for a connection.
///
/// ## Connections
/// At most `maxConnections` connections are open, each used by one thread at a time (checked out
/// of the pool for one call, checked back in after). A connection the server closed while idle
/// (`CLIENT KILL`, `timeout`, restart) is replaced before use; a call whose link breaks mid-command
/// throws `RedisError.io` (`isConnectionFailure`) and is not retried, because its write may have
/// reached Redis: jobs are delivered at least once and must be idempotent anyway.
///
/// ## Shards
/// With `init(shards:)` (docs/sharding.md) each enqueue goes to its queue's shard, and the admin
/// calls read every shard: `stats()` adds the shards up, `queues()`, `findJob` and `batches` return
/// each item with the name of the shard it is on (`OnShard`), `batch(bid:)` looks on each shard.
/// `withConnection` is the default shard's; `withConnection(shard:)` and `withEachShard` reach the
/// others. Without sharding there is one shard, named `default`, and every call reads it alone.
///
/// Thread-safe: immutable after `init`; share one instance per process.
public final class WorkersClient: Sendable {
    /// The default shard's pool (the only one without sharding), which `withConnection` borrows
    /// from (also usable directly from code that may block).
    public let pool: RedisPool
    /// One pool per shard, index 0 = `pool`.
    private let shards: ShardPools
    let jobs: JobClient
    let threads: BlockingThreads

    /// Opens no connection yet: connections are opened on first use, up to `maxConnections`.
    /// `maxQueuedCalls`: how many calls may wait for a thread; past that a call throws `BlockingThreadsFull` at
    /// once (the web dashboard answers 503). Unbounded by default. `middleware` is applied to every job enqueued
    /// (`EnqueueMiddleware`); none by default.
    public init(endpoint: RedisEndpoint, maxConnections: Int = 8, commandTimeout: Duration = .seconds(10), maxQueuedCalls: Int = .max,
                middleware: [any EnqueueMiddleware] = []) {
        shards = ShardPools(map: ShardMap(single: endpoint), maxConnections: maxConnections, commandTimeout: commandTimeout)
        pool = shards.pools[0]
        jobs = JobClient(pool: pool, middleware: middleware)
        threads = BlockingThreads(count: pool.maxConnections, name: "WClient", maxQueued: maxQueuedCalls)
    }

    /// Several Redis shards (docs/sharding.md): each enqueue goes to its queue's shard, with at most
    /// `maxConnections` connections per shard (and as many threads per shard); the admin calls read
    /// every shard (see "Shards" above).
    public init(shards map: ShardMap, maxConnections: Int = 8, commandTimeout: Duration = .seconds(10),
                middleware: [any EnqueueMiddleware] = []) {
        shards = ShardPools(map: map, maxConnections: maxConnections, commandTimeout: commandTimeout)
        pool = shards.pools[0]
        jobs = JobClient(shards: shards, middleware: middleware)
        threads = BlockingThreads(count: pool.maxConnections * map.shards.count, name: "WClient")
    }

    /// The shards' names in the map's order: `default` first (the only one without sharding).
    public var shardNames: [String] { shards.map.shards.map(\.name) }

    /// `redis://[user:password@]host[:port][/db]`, `rediss://…` for TLS (`?ca_file=`, `?password_file=`…), or a
    /// Sentinel URL (`RedisEndpoint`; docs/deploy.md, "Managed Redis"). `endpoint.warnings` (an `?insecure` TLS link)
    /// are for the caller to log.
    public convenience init(url: String, maxConnections: Int = 8, commandTimeout: Duration = .seconds(10),
                            middleware: [any EnqueueMiddleware] = []) throws(RedisError) {
        self.init(endpoint: try RedisEndpoint(url: url), maxConnections: maxConnections, commandTimeout: commandTimeout,
                  middleware: middleware)
    }

    deinit { threads.shutdown() }

    /// Lets the queued calls finish, then stops the client's threads; later calls throw
    /// `WorkersClientError.shutDown`. Idempotent.
    public func shutdown() { threads.shutdown() }

    // MARK: Enqueue (Sidekiq wire format, see `JobClient`)

    /// Enqueues one job now and returns its jid.
    @discardableResult
    public func enqueue(_ job: NewJob) async throws -> String {
        let jobs = jobs
        return try await threads.run { try jobs.enqueue(job) }
    }

    /// Enqueues jobs now in one round trip; their jids in order.
    @discardableResult
    public func enqueueMany(_ newJobs: [NewJob]) async throws -> [String] {
        let jobs = jobs
        return try await threads.run { try jobs.enqueueMany(newJobs) }
    }

    /// Enqueues one job to run at `date`; a time not in the future is pushed now.
    @discardableResult
    public func enqueue(_ job: NewJob, at date: Date) async throws -> String {
        let jobs = jobs, at = date.timeIntervalSince1970
        return try await threads.run { try jobs.enqueue(job, at: at) }
    }

    /// Enqueues one job to run `delay` from now.
    @discardableResult
    public func enqueue(_ job: NewJob, in delay: Duration) async throws -> String {
        let jobs = jobs, seconds = delay.inSeconds
        return try await threads.run { try jobs.enqueue(job, in: seconds) }
    }

    /// Enqueues one unique job (docs/unique-jobs.md): `.enqueued(jid)`, or `.duplicate(of: jid)`
    /// of the live job holding the same lock (then nothing is pushed). See `JobClient.enqueueUnique`.
    public func enqueueUnique(_ job: NewJob, policy: UniquePolicy, key: String? = nil,
                              at date: Date? = nil) async throws -> UniquePush {
        let jobs = jobs, at = date?.timeIntervalSince1970
        return try await threads.run { try jobs.enqueueUnique(job, policy: policy, key: key, at: at) }
    }

    // MARK: Typed enqueue (`JobArguments`: the same type the worker's job decodes)

    /// Enqueues `arguments` as a job of `A.className` on `queue` (default `A.queue`) now; its jid. The arguments
    /// are encoded exactly as the job decodes them (`JobArguments.sidekiqArgs()`) and checked like every other
    /// enqueue (runtime-owned fields, numbers, payload size).
    @discardableResult
    public func enqueue<A: JobArguments>(_ arguments: A, queue: String? = nil) async throws -> String {
        try await enqueue(NewJob(arguments, queue: queue))
    }

    /// Enqueues `arguments` to run at `date`; a date not in the future is pushed now.
    @discardableResult
    public func enqueue<A: JobArguments>(_ arguments: A, queue: String? = nil, at date: Date) async throws -> String {
        try await enqueue(NewJob(arguments, queue: queue), at: date)
    }

    /// Enqueues `arguments` to run `delay` from now.
    @discardableResult
    public func enqueue<A: JobArguments>(_ arguments: A, queue: String? = nil, in delay: Duration) async throws -> String {
        try await enqueue(NewJob(arguments, queue: queue), in: delay)
    }

    /// Enqueues several jobs of one class now in one round trip; their jids in order.
    @discardableResult
    public func enqueueMany<A: JobArguments>(_ arguments: [A], queue: String? = nil) async throws -> [String] {
        var newJobs: [NewJob] = []
        newJobs.reserveCapacity(arguments.count)
        for each in arguments { newJobs.append(try NewJob(each, queue: queue)) }
        return try await enqueueMany(newJobs)
    }

    /// Enqueues `arguments` as a unique job (docs/unique-jobs.md): `.enqueued(jid)`, or `.duplicate(of: jid)` of
    /// the live job holding the same lock. `key` defaults to one computed from the class and arguments.
    public func enqueueUnique<A: JobArguments>(_ arguments: A, policy: UniquePolicy, key: String? = nil,
                                               queue: String? = nil, at date: Date? = nil) async throws -> UniquePush {
        try await enqueueUnique(NewJob(arguments, queue: queue), policy: policy, key: key, at: date)
    }

    // MARK: Admin

    /// Runs `body` with a pooled connection of the **default** shard on one of the client's threads:
    /// the way to call the admin API (`QueueAdmin`, `JobAdmin`, `Stats`, `ProcessAdmin`,
    /// `DashboardSnapshot`) from async code. The connection must not escape `body`. With several
    /// shards, `withConnection(shard:)` and `withEachShard` reach the others.
    public func withConnection<T: Sendable>(_ body: @escaping @Sendable (RedisConnection) throws -> T) async throws -> T {
        let pool = pool
        return try await threads.run { try pool.withConnection(body) }
    }

    /// `withConnection` on the shard named `shard` (a name of `shardNames`, e.g. the `shard` of an
    /// `OnShard` this client returned). Throws `WorkersClientError.unknownShard` for any other name.
    public func withConnection<T: Sendable>(shard: String,
                                            _ body: @escaping @Sendable (RedisConnection) throws -> T) async throws -> T {
        guard let index = shards.map.shards.firstIndex(where: { $0.name == shard }) else {
            throw WorkersClientError.unknownShard(name: shard, configured: shardNames)
        }
        let pool = shards.pools[index]
        return try await threads.run { try pool.withConnection(body) }
    }

    /// Runs `body` on every shard, concurrently (each on a client thread with that shard's pooled
    /// connection), and returns the results in the map's order, default shard first. On the first
    /// failure the shards' calls not yet started are cancelled, those running end, then it is thrown.
    public func withEachShard<T: Sendable>(_ body: @escaping @Sendable (RedisConnection) throws -> T) async throws -> [OnShard<T>] {
        let names = shardNames
        if names.count == 1 { return [OnShard(shard: names[0], value: try await withConnection(body))] }
        return try await withThrowingTaskGroup(of: (Int, T).self) { group in
            for (index, pool) in shards.pools.enumerated() {
                group.addTask { [threads] in (index, try await threads.run { try pool.withConnection(body) }) }
            }
            var results: [T?] = Array(repeating: nil, count: names.count)
            for try await (index, value) in group { results[index] = value }
            return results.enumerated().map { OnShard(shard: names[$0.offset], value: $0.element!) }
        }
    }

    /// Processed/failed counters, queue sizes, set sizes and processes (`workerctl stats`), added up
    /// over every shard (`Stats.total`: `redis` and `day` are the default shard's, a process is
    /// counted once per shard it fetches from). Per shard: `statsPerShard()`.
    public func stats() async throws -> Stats {
        Stats.total(try await statsPerShard().map(\.value))
    }

    /// Each shard's stats, default shard first.
    public func statsPerShard() async throws -> [OnShard<Stats>] {
        try await withEachShard { try Stats.load($0) }
    }

    /// Every queue of every shard with size, latency and paused flag (`workerctl queues ls`), shard
    /// by shard (default first), each shard's sorted by name; each with the shard it lives on.
    public func queues() async throws -> [OnShard<QueueSummary>] {
        try await withEachShard { try QueueAdmin.list($0) }.flatMap { list in
            list.value.map { OnShard(shard: list.shard, value: $0) }
        }
    }

    /// Where a job is now (retry, scheduled, dead, enqueued, busy), looked for on every shard, each
    /// record with the shard it is on (act there with `withConnection(shard:)`); empty if nowhere.
    public func findJob(jid: String) async throws -> [OnShard<JobRecord>] {
        try await withEachShard { try JobAdmin(connection: $0).find(jid: jid) }.flatMap { found in
            found.value.map { OnShard(shard: found.shard, value: $0) }
        }
    }
}
