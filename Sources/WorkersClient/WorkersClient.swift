@_exported import Queue

/// What the async client itself refuses (Redis and input errors come through as `RedisError`
/// and `EnqueueError`).
public enum WorkersClientError: Error, Sendable, Equatable, CustomStringConvertible {
    /// `shutdown()` was called; the client takes no more calls.
    case shutDown

    public var description: String {
        switch self {
        case .shutDown: return "the WorkersClient was shut down"
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
/// Thread-safe: immutable after `init`; share one instance per process.
public final class WorkersClient: Sendable {
    /// The pool every call borrows from (also usable directly from code that may block).
    public let pool: RedisPool
    private let jobs: JobClient
    private let threads: BlockingThreads

    /// Opens no connection yet: connections are opened on first use, up to `maxConnections`.
    public init(endpoint: RedisEndpoint, maxConnections: Int = 8, commandTimeout: Double = 10) {
        pool = RedisPool(endpoint: endpoint, maxConnections: maxConnections, commandTimeout: commandTimeout)
        jobs = JobClient(pool: pool)
        threads = BlockingThreads(count: pool.maxConnections, name: "WClient")
    }

    /// Several Redis shards (docs/sharding.md): each enqueue goes to its queue's shard, with at most
    /// `maxConnections` connections per shard (and as many threads per shard). The admin calls
    /// (`withConnection`, `stats`, `queues`, `findJob`) read the default shard only.
    public init(shards map: ShardMap, maxConnections: Int = 8, commandTimeout: Double = 10) {
        let pools = ShardPools(map: map, maxConnections: maxConnections, commandTimeout: commandTimeout)
        pool = pools.pools[0]
        jobs = JobClient(shards: pools)
        threads = BlockingThreads(count: pool.maxConnections * map.shards.count, name: "WClient")
    }

    /// `redis://[user:password@]host[:port][/db]`.
    public convenience init(url: String, maxConnections: Int = 8, commandTimeout: Double = 10) throws(RedisError) {
        self.init(endpoint: try RedisEndpoint(url: url), maxConnections: maxConnections, commandTimeout: commandTimeout)
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

    /// Enqueues one job to run at `at` (epoch seconds); a time not in the future is pushed now.
    @discardableResult
    public func enqueue(_ job: NewJob, at: Double) async throws -> String {
        let jobs = jobs
        return try await threads.run { try jobs.enqueue(job, at: at) }
    }

    /// Enqueues one job to run `delay` seconds from now.
    @discardableResult
    public func enqueue(_ job: NewJob, in delay: Double) async throws -> String {
        let jobs = jobs
        return try await threads.run { try jobs.enqueue(job, in: delay) }
    }

    /// Enqueues one unique job (docs/unique-jobs.md): `.enqueued(jid)`, or `.duplicate(of: jid)`
    /// of the live job holding the same lock (then nothing is pushed). See `JobClient.enqueueUnique`.
    public func enqueueUnique(_ job: NewJob, policy: UniquePolicy, key: String? = nil,
                              at: Double? = nil) async throws -> UniquePush {
        let jobs = jobs
        return try await threads.run { try jobs.enqueueUnique(job, policy: policy, key: key, at: at) }
    }

    // MARK: Admin

    /// Runs `body` with a pooled connection on one of the client's threads: the way to call the
    /// admin API (`QueueAdmin`, `JobAdmin`, `Stats`, `ProcessAdmin`, `DashboardSnapshot`) from
    /// async code. The connection must not escape `body`.
    public func withConnection<T: Sendable>(_ body: @escaping @Sendable (RedisConnection) throws -> T) async throws -> T {
        let pool = pool
        return try await threads.run { try pool.withConnection(body) }
    }

    /// Processed/failed counters, queue sizes, set sizes and processes (`workerctl stats`).
    public func stats() async throws -> Stats {
        try await withConnection { try Stats.load($0) }
    }

    /// Every queue with size, latency and paused flag (`workerctl queues ls`).
    public func queues() async throws -> [QueueSummary] {
        try await withConnection { try QueueAdmin.list($0) }
    }

    /// Where a job is now (retry, scheduled, dead, enqueued, busy); empty if nowhere.
    public func findJob(jid: String) async throws -> [JobRecord] {
        try await withConnection { try JobAdmin(connection: $0).find(jid: jid) }
    }
}
