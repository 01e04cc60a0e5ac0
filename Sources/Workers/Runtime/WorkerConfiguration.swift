import Foundation
import WorkersQueue

/// A queue a worker serves and its weight (`--queue NAME[:WEIGHT]`).
public struct QueueWeight: Sendable, Equatable {
    public var name: String
    public var weight: Int

    public init(name: String, weight: Int = 1) {
        self.name = name
        self.weight = weight
    }

    /// Parses `NAME` or `NAME:WEIGHT` (weight 1…1000). Queue names may hold colons, so only a
    /// numeric last part is read as a weight.
    public init(parsing text: String) throws(ConfigurationError) {
        var name = text
        var weight = 1
        if let colon = text.lastIndex(of: ":"), let value = Int(text[text.index(after: colon)...]) {
            name = String(text[..<colon])
            weight = value
            guard (1...1000).contains(value) else {
                throw .invalid("queue '\(name)': weight must be within 1...1000, got \(value)")
            }
        }
        do { try JobClient.validateQueue(name) } catch { throw .invalid(error.description) }
        self.init(name: name, weight: weight)
    }
}

/// A setting that cannot be used, with the reason.
public enum ConfigurationError: Error, Sendable, CustomStringConvertible, Equatable {
    case invalid(String)
    public var description: String {
        switch self {
        case .invalid(let why): return why
        }
    }
}

/// Everything a worker process needs to know. Durations are `Duration`s; `validate()` bounds each one (a value
/// read from a config file or a flag is built with `Bounded.duration(seconds:max:)` or checked before).
public struct WorkerConfiguration: Sendable {
    public var redisURL: String = RedisEndpoint.defaultURL
    /// Several Redis instances (docs/sharding.md): which shard holds which queue. Nil: one Redis,
    /// `redisURL`. When set, its default shard is the Redis of the process (it should be `redisURL`).
    public var shardMap: ShardMap? = nil
    /// Pool threads running jobs.
    public var concurrency: Int = 10
    /// Most async jobs' runs (`AsyncJob`) in flight at once, each a task, apart from the pool threads (`AsyncRuns`).
    /// A pool thread that takes an async job while all are in flight waits for one to end.
    public var asyncConcurrency: Int = 100
    public var queues: [QueueWeight] = [QueueWeight(name: "default")]
    /// Weighted random order per fetch when any weight differs from 1; else strict order.
    public var strictOrder: Bool { Set(queues.map(\.weight)).count <= 1 }
    /// At most this many jobs fetched ahead of free threads (they wait in this process's in-flight
    /// list). The fetcher uses less when jobs are slow: it keeps the expected wait of a buffered
    /// job under `prefetchWait`, so long jobs are not hoarded by one process. 250 (was 100): with
    /// fast jobs each fetch round trip (a disk sync under AOF `always`) then carries up to `fetchBatch` jobs
    /// instead of the ≤ 100 a smaller buffer left room for — +29% drain rate under AOF `always`, +23% without
    /// AOF (bench/throughput.sh, medians of 3, README "Benchmarks").
    public var prefetch: Int = 250
    public var prefetchWait: Duration = .milliseconds(20)
    /// Group commit (jobs whose options set `groupCommit`): most jobs one PostgreSQL transaction may
    /// carry, and the longest it stays open. `commitBatch` 1 commits every job on its own.
    /// At most `maxCommitBatch`: a group normally runs without savepoints, but one that is run again after a
    /// failure gives each job a savepoint, each of which takes a subtransaction id when it writes, and past 64
    /// in one transaction PostgreSQL overflows its per-backend subtransaction cache, which slows every
    /// snapshot on the server.
    public var commitBatch: Int = 50
    public var commitWindow: Duration = .milliseconds(50)
    /// Most jobs moved by one fetch call (one script call, and under AOF `always` one disk sync, per batch).
    public var fetchBatch: Int = 250
    /// Most settlements (finished runs) waiting for the settler before the fetcher stops fetching. Without a
    /// bound, jobs that finish faster than the settler writes them pile up in memory (each holds its raw job) and
    /// in the in-flight list, to be run again if the process dies: peak RSS grew with the drain rate. 2,000 is
    /// two of the settler's batches (≤ 1,000 each): one being written, one ready.
    public var settleBacklog: Int = 2000
    /// Longest idle wait between fetches when several queues are served (one queue blocks instead).
    public var idlePollMax: Duration = .milliseconds(50)
    /// Longest a fetcher serving one queue waits inside Redis (`BLMOVE`) for the next job before it fetches again; a
    /// quiet (TSTP) or stop is noticed at the latest then. Jobs a fetch brought are not held back by the wait.
    public var blockingFetchTimeout: Duration = .milliseconds(500)
    /// Extra connections that wait in `BLMOVE` next to the fetcher's own when one queue is served and the fetcher
    /// found it drained (`Fetcher.waitLoop`): Redis hands one job to each waiting connection in the event-loop
    /// iteration of the push, so jobs pushed together, or while the fetcher's next round trip is on its way, do not
    /// wait for the next fetch (under AOF `always`, its disk sync). Each costs a thread, a Redis connection and, while
    /// jobs trickle in, a round trip and two thread wake-ups per job it takes. Off by default: on the 2-core
    /// development machine two waiters cut the pickup's p50 above the push round trip from ~0.2–0.3 to ~0.1 ms, but
    /// added ~17 µs of worker and Redis CPU per job at 5,000 jobs/s, and in 4 of ~30 runs the busier box fell behind
    /// (p99 13–37 ms); use them where the worker and Redis have CPU to spare (README, issue 19).
    public var blockingWaiters: Int = 0
    public var heartbeatInterval: Duration = .seconds(5)
    /// TTL of the fetcher heartbeat; once it has expired another process takes back our jobs.
    public var fetcherHeartbeatTTL: Duration = .seconds(30)
    /// How often a process looks for dead processes' in-flight jobs.
    public var orphanSweepInterval: Duration = .seconds(15)
    /// How long a job whose class this process does not register is given back to `schedule` (no retry spent) while
    /// no live process serving its queue knows the class, before it goes to dead (docs/deploy.md, "Rolling deploys").
    /// While a live process announces the class, or announces none (Ruby Sidekiq, an older release), it is given back
    /// without limit. 0: dead at once when nobody knows it.
    public var unknownClassGrace: Duration = .seconds(3600)
    /// Interruptions (worker died mid-run) before a job goes to dead instead of back to its queue.
    public var interruptLimit: Int = 3
    /// Average time between polls of `schedule` and `retry`.
    public var pollInterval: Duration = .seconds(5)
    /// How long SIGTERM waits for running jobs before putting them back.
    public var shutdownTimeout: Duration = .seconds(25)
    /// Default job timeout for classes that do not set one.
    public var defaultTimeout: Duration? = nil
    public var deadLimits = DeadSetLimits()
    /// The largest payload a fetch hands to the pool (bytes; 1 MiB, the producer-side `JobClient.maxPayloadBytes`): a
    /// larger one, which only another client (raw `LPUSH`, Ruby) can have pushed, goes to dead as a stub with its size
    /// and first 1 KB, never run (`OversizedScripts`, docs/hostile-input.md). Within `fetchMaxPayloadRange`.
    public var fetchMaxPayloadBytes: Int = JobClient.maxPayloadBytes
    /// From 1 KiB (the stub keeps the first 1 KiB) to 512 MiB (Redis's largest string: no limit).
    public static let fetchMaxPayloadRange = 1024...(512 << 20)
    /// When set, each settlement batch is followed by `WAIT` for that many replicas (docs/redis-ha.md).
    package var replicaWait: ReplicaWait? = nil
    /// Label shown by Sidekiq's UI (`tag`).
    public var tag: String = ""
    public var labels: [String] = []

    public static let maxCommitBatch = 64

    /// What the fetch measures: `fetchMaxPayloadBytes`, and the dead set's limits for the stubs it writes.
    package var fetchLimits: FetchLimits { FetchLimits(maxPayloadBytes: fetchMaxPayloadBytes, dead: deadLimits) }

    public init() {}

    /// The defaults, with the three settings every embedding service chooses (docs/embedding.md); the other
    /// properties stay settable.
    public init(redisURL: String, queues: [QueueWeight] = [QueueWeight(name: "default")], concurrency: Int = 10) {
        self.redisURL = redisURL
        self.queues = queues
        self.concurrency = concurrency
    }

    public func validate() throws(ConfigurationError) {
        guard (1...1000).contains(concurrency) else { throw .invalid("concurrency must be within 1...1000, got \(concurrency)") }
        guard (1...100_000).contains(asyncConcurrency) else {
            throw .invalid("async concurrency must be within 1...100000, got \(asyncConcurrency)")
        }
        guard !queues.isEmpty else { throw .invalid("at least one queue is needed") }
        guard Set(queues.map(\.name)).count == queues.count else { throw .invalid("a queue is listed twice") }
        guard prefetch >= 0, fetchBatch >= 1 else { throw .invalid("prefetch must be >= 0 and fetch batch >= 1") }
        guard (0...16).contains(blockingWaiters) else { throw .invalid("blocking waiters must be within 0...16, got \(blockingWaiters)") }
        guard settleBacklog >= 1 else { throw .invalid("settle backlog must be >= 1, got \(settleBacklog)") }
        guard heartbeatInterval > .zero, fetcherHeartbeatTTL > heartbeatInterval else {
            throw .invalid("fetcher heartbeat TTL (\(fetcherHeartbeatTTL.inSeconds) s) must exceed the heartbeat interval (\(heartbeatInterval.inSeconds) s)")
        }
        guard (1...Self.maxCommitBatch).contains(commitBatch) else {
            throw .invalid("commit batch must be within 1...\(Self.maxCommitBatch), got \(commitBatch)")
        }
        guard commitWindow >= .zero, commitWindow <= .seconds(60) else {
            throw .invalid("commit window must be within 0...60 s, got \(commitWindow.inSeconds)")
        }
        guard shutdownTimeout >= .zero, pollInterval > .zero, orphanSweepInterval > .zero else { throw .invalid("intervals must be positive") }
        guard Self.fetchMaxPayloadRange.contains(fetchMaxPayloadBytes) else {
            throw .invalid("fetch max payload bytes must be within \(Self.fetchMaxPayloadRange.lowerBound)...\(Self.fetchMaxPayloadRange.upperBound), got \(fetchMaxPayloadBytes)")
        }
        guard deadLimits.maxBytes >= 0 else { throw .invalid("dead_max_bytes must not be negative, got \(deadLimits.maxBytes)") }
        // Every duration is converted to milliseconds or a deadline somewhere; a duration of 1e15 s (a `Duration`
        // holds up to ~9.2e18 s) would overflow there (docs/hostile-input.md). Each gets an upper bound here.
        let durations: [(String, Duration, ClosedRange<Double>)] = [
            ("prefetch wait", prefetchWait, 0...60), ("idle poll max", idlePollMax, 0...60),
            ("blocking fetch timeout", blockingFetchTimeout, 0...3_600), ("heartbeat interval", heartbeatInterval, 0...3_600),
            ("fetcher heartbeat TTL", fetcherHeartbeatTTL, 0...86_400), ("orphan sweep interval", orphanSweepInterval, 0...86_400),
            ("poll interval", pollInterval, 0...3_600), ("shutdown timeout", shutdownTimeout, 0...86_400),
            ("unknown-class grace", unknownClassGrace, 0...(30 * 86_400)),
            ("default timeout", defaultTimeout ?? .seconds(1), 0...Bounded.maxIntervalSeconds),
        ]
        for (name, value, range) in durations where !range.contains(value.inSeconds) {
            throw .invalid("\(name) must be within \(Int(range.lowerBound))...\(Int(range.upperBound)) s, got \(value.inSeconds)")
        }
        let counts: [(String, Int, ClosedRange<Int>)] = [
            ("prefetch", prefetch, 0...100_000), ("fetch batch", fetchBatch, 1...100_000),
            ("settle backlog", settleBacklog, 1...1_000_000), ("interrupt limit", interruptLimit, 0...1_000),
        ]
        for (name, value, range) in counts where !range.contains(value) {
            throw .invalid("\(name) must be within \(range.lowerBound)...\(range.upperBound), got \(value)")
        }
    }
}
