import Logging
import WorkersQueue

/// What the runtime's parts (`Fetcher`, `JobPool`, `Settler`, `Heartbeat`, `Housekeeper`, `Watchdog`) share: the
/// process's identity and configuration, the shard map, the hand-offs between their threads, the outage log, the
/// life-cycle flags, the metrics and the logger. Built once by `WorkerProcess.init` and given to each part's init,
/// which takes only its own few parameters besides (a shard, a queue list, the pool…).
///
/// Thread rules: holds only references to thread-safe types and immutable values, all set before any thread
/// starts; it is never changed afterwards, so every part may keep it, or what it took from it, on any thread. What
/// each thread may call on a hand-off is the hand-off's own doc comment (`JobBuffer`, `SettlementQueue`,
/// `RunningJobs`, `LifeCycleFlags`, `RunTimeEstimate`).
struct RuntimeParts: Sendable {
    /// This process's identity (`Identifiers.processIdentity`): names its in-flight lists and registry entry.
    let identity: String
    let configuration: WorkerConfiguration
    /// Every shard (index 0 = default, the only one with one Redis): a part given a shard index connects to
    /// `shardMap.shards[shard].endpoint`.
    let shardMap: ShardMap
    /// `Clock.now()` when the process was built (the process hash's `started_at`).
    let startedAt: Double
    /// Fetcher → pool.
    let buffer: JobBuffer
    /// Pool → watchdog, heartbeat, fetcher's reconciliation.
    let running: RunningJobs
    /// Pool, watchdog, fetcher, shutdown → settler.
    let settlements: SettlementQueue
    /// The pool's average run time, which the fetcher reads to size its prefetch.
    let runTime: RunTimeEstimate
    let outages: OutageLog
    /// Written only by the life cycle (`WorkerProcess`).
    let flags: LifeCycleFlags
    let metrics: RuntimeMetrics
    /// The job classes the registry holds (`JobRegistry.classNames`): listed in the heartbeat's process info.
    let registeredClasses: [String]
    /// The `args_version`s the registry decodes, per versioned class (`JobRegistry.argumentVersions`): announced in
    /// the heartbeat's process info beside the classes.
    let argumentVersions: [String: ClosedRange<Int>]
    /// Per-class execution figures: recorded by the pool's runs (`ClassMetricsMiddleware`), flushed by the heartbeat.
    let classMetrics: ClassMetricsRecorder
    /// Carries the `process` metadata.
    let logger: Logger
    /// Whether each shard's Redis has room for writes that grow it: heartbeats and `-OOM` replies write it; the
    /// fetcher, settler and housekeeper read it (docs/redis-full.md).
    let room: RedisRoom
    /// Heartbeats and fetchers → pool: cancel marks found on held jids; the heartbeats write the runs' progress
    /// (RunSteering.swift).
    let steering = RunSteering()
}
