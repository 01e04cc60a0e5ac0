import Foundation
import Logging
import WorkersQueue
import WorkersStorage
import Synchronization

/// A worker process: N pool threads running jobs fetched reliably from Redis. This type is the
/// life cycle (start, quiet, shutdown, OS and Redis signals); each concern runs in a part of its own,
/// on its own thread, with its own Redis connection where it needs one:
///
/// | part          | thread(s)     | Redis connection | file             |
/// |---------------|---------------|------------------|------------------|
/// | `Fetcher`     | fetcher       | its own          | Fetcher.swift    |
/// | `JobPool`     | pool-1…pool-N | none (PostgreSQL from the pool) | JobPool.swift (+ GroupCommit.swift) |
/// | `Settler`     | settler       | its own          | Settler.swift    |
/// | `Heartbeat`   | heartbeat     | its own          | Heartbeat.swift  |
/// | `Housekeeper` | housekeeper   | its own          | Housekeeper.swift|
/// | `Watchdog`    | watchdog      | none             | Watchdog.swift   |
/// | `MetricsEndpoint` (optional) | metrics, metrics-serve | the executable's closures' own | Observability/MetricsEndpoint.swift |
///
/// The parts share only the hand-offs — `JobBuffer` (fetcher → pool), `RunningJobs` (pool →
/// watchdog, heartbeat, fetcher's reconciliation), `SettlementQueue` (pool, watchdog, fetcher,
/// shutdown → settler) — plus `LifeCycleFlags` (written here only) and the pool's `RunTimeEstimate`
/// (read by the fetcher). `init` builds what they share once, as a `RuntimeParts` (RuntimeParts.swift),
/// and gives it to each part's init.
///
/// With several shards (`WorkerConfiguration.shardMap`, docs/sharding.md) the fetcher, heartbeat
/// and housekeeper exist once per shard holding some of this process's queues, each with its own
/// thread and connection to that shard; the pool, buffer and settler are shared, and the settler
/// writes each settlement to the shard its job came from (`FetchedJob.shard`). With one Redis there
/// is one of each, as before.
///
/// Invariant: a job leaves this process's in-flight list only through the settler (or another
/// process's orphan sweep once our heartbeat has expired), so a crash at any point loses nothing.
///
/// Thread rules: `start`/`runHandlingSignals` (or the `Service` `run()`) once, from one thread. `quietDown` and `shutdown` from any thread,
/// any number of times (signal handlers start a thread of their own for them). The read-only
/// properties from any thread.
public final class WorkerProcess: @unchecked Sendable {
    // @unchecked: `signalSources` is written once by `run` (before it blocks) and never read.
    public let identity: String
    public let configuration: WorkerConfiguration
    let logger: Logger
    /// The default shard (the only Redis without sharding): limiter keys live there.
    let endpoint: RedisEndpoint
    /// Every shard (index 0 = default); `servedShards` are the indices holding this process's queues.
    let shardMap: ShardMap
    let servedShards: [Int]
    let buffer: JobBuffer
    let settlements = SettlementQueue()
    let running = RunningJobs()
    let flags = LifeCycleFlags()
    let startedAt = Clock.now()
    /// Time from `enqueued_at` to the start of the run, for every job this process ran.
    package let pickupLatency = LatencyHistogram()
    /// Run time of every job this process ran.
    package let runTime = LatencyHistogram()
    /// Counters, timers and gauges for a metrics backend.
    package let metrics = RuntimeMetrics()

    let pool: JobPool
    /// The jobs' PostgreSQL, if any: `start` checks its runtime schema first (`WorkersSchema.requireCurrent`).
    let database: JobDatabase?
    /// One per served shard, in `servedShards` order (so are `heartbeats` and `housekeepers`).
    let fetchers: [Fetcher]
    let settler: Settler
    let heartbeats: [Heartbeat]
    let housekeepers: [Housekeeper]
    let watchdog: Watchdog

    /// `/metrics`, `/healthz`, `/readyz`, when asked for: started first by `start`, stopped last by `shutdown`.
    let metricsEndpoint: MetricsEndpoint?
    private let metricsServer = Mutex<MetricsServer?>(nil)

    private let finished = DispatchSemaphore(value: 0)
    private let shutdownOnce = Mutex<Bool>(false)
    private var signalSources: [any DispatchSourceSignal] = []

    /// `middleware`: wrapped around each run of every job, outermost first (`JobMiddleware`); empty by default,
    /// and an empty chain costs nothing per job.
    public init(configuration: WorkerConfiguration, registry: JobRegistry, database: JobDatabase? = nil,
                logger: Logger = Logger(label: "workers"), metricsEndpoint: MetricsEndpoint? = nil,
                middleware: [any JobMiddleware] = []) throws {
        try configuration.validate()
        let chain = JobMiddlewareChain(middleware)
        if !registry.asyncClassNames.isEmpty, !chain.syncOnly.isEmpty {
            // A sync-only middleware cannot wrap an async job's run: refused rather than silently skipped.
            throw ConfigurationError.invalid("""
                middleware \(chain.syncOnly.joined(separator: ", ")) does not conform to AsyncJobMiddleware, and the \
                registry holds async jobs (\(registry.asyncClassNames.joined(separator: ", "))) it would not wrap
                """)
        }
        self.configuration = configuration
        self.database = database
        self.metricsEndpoint = metricsEndpoint
        let shardMap = try configuration.shardMap ?? ShardMap(single: RedisEndpoint(url: configuration.redisURL))
        self.shardMap = shardMap
        let endpoint = shardMap.shards[0].endpoint
        self.endpoint = endpoint
        let groups = shardMap.group(queues: configuration.queues.map(\.name))
        servedShards = groups.map(\.shard)
        let identity = Identifiers.processIdentity()
        self.identity = identity
        var logger = logger
        logger[metadataKey: "process"] = "\(identity)"
        self.logger = logger
        let buffer = JobBuffer(capacity: configuration.concurrency + configuration.prefetch)
        self.buffer = buffer
        // What every part shares, set before any thread starts (RuntimeParts).
        let parts = RuntimeParts(identity: identity, configuration: configuration, shardMap: shardMap, startedAt: startedAt,
                                 buffer: buffer, running: running, settlements: settlements, runTime: RunTimeEstimate(),
                                 outages: OutageLog(logger: logger), flags: flags, metrics: metrics,
                                 registeredClasses: registry.classNames, argumentVersions: registry.argumentVersions,
                                 classMetrics: ClassMetricsRecorder(registeredClasses: registry.classNames), logger: logger,
                                 room: RedisRoom(logger: logger))
        var runner = JobRunner(registry: registry, configuration: configuration, database: database, logger: logger,
                               limiter: JobLimiter(endpoint: endpoint, logger: logger),
                               middleware: chain, steering: parts.steering)
        runner.classDirectory = ClassDirectory(shardMap: shardMap, identity: identity)
        runner.runMiddleware = RunMiddlewareChain([TracingRunMiddleware(), ClassMetricsMiddleware(recorder: parts.classMetrics)])
        pool = JobPool(parts, runner: runner,
                       pickupLatency: pickupLatency, runTimes: runTime)
        let unique = UniqueGate(registry: registry, configuration: configuration)
        let sharded = !shardMap.isSingle
        var fetchers: [Fetcher] = []
        var heartbeats: [Heartbeat] = []
        var housekeepers: [Housekeeper] = []
        for group in groups {
            let queues = configuration.queues.filter { group.queues.contains($0.name) }
            fetchers.append(Fetcher(parts, shard: group.shard, queues: queues, unique: unique))
            heartbeats.append(Heartbeat(parts, shard: sharded ? group.shard : nil, recordsBusyGauge: heartbeats.isEmpty))
            housekeepers.append(Housekeeper(parts, shard: group.shard))
        }
        self.fetchers = fetchers
        self.heartbeats = heartbeats
        self.housekeepers = housekeepers
        settler = Settler(parts)
        watchdog = Watchdog(parts, pool: pool)
    }

    /// Jobs run so far (successes and failures) and failures, in this process.
    public var processedCount: Int { settler.processedCount }
    public var failedCount: Int { settler.failedCount }
    public var busyCount: Int { running.count }
    /// Async jobs' tasks (`AsyncJob`) in flight (at most `WorkerConfiguration.asyncConcurrency`); `busyCount` counts
    /// them too.
    public var asyncInFlight: Int { pool.asyncRuns.inFlight }
    public var isQuiet: Bool { flags.isQuiet }
    /// The port `/metrics`, `/healthz` and `/readyz` listen on while the process runs (the one picked when
    /// `MetricsEndpoint.port` was 0); nil without an endpoint, before `start` and after `shutdown`.
    public var metricsPort: Int? { metricsServer.withLock { $0?.port } }

    /// Healthy while heartbeats reach Redis (the last one within three intervals) and the process
    /// is not shutting down. For `/healthz`.
    public var health: (ok: Bool, detail: String) {
        let age = Clock.now() - (heartbeats.map(\.lastBeatAt).min() ?? 0)
        if flags.isStopping { return (false, "shutting down") }
        if age > 3 * configuration.heartbeatInterval.inSeconds { return (false, "no heartbeat reached Redis for \(Int(age)) s") }
        return (true, "ok: \(busyCount) busy of \(configuration.concurrency), \(processedCount) processed\(isQuiet ? ", quiet" : "")")
    }

    // MARK: Life cycle

    /// Starts the metrics endpoint (if any), registers the process (first heartbeat) and starts every thread.
    /// Throws if the endpoint cannot listen (`MetricsServer.StartError`) or Redis cannot be reached at all
    /// (the endpoint is then stopped). With a database, first refuses a runtime schema behind this build
    /// (`WorkersSchemaBehind`, naming the pending migrations and how to apply them) or a database it cannot read
    /// (`PostgresError`): nothing is started, nothing registered.
    public func start() throws {
        if let database {
            try WorkersSchema.requireCurrent(pool: database.pool)
        }
        if let metricsEndpoint {  // first: /healthz answers (503 until the first heartbeat) while Redis is reached
            let server = try metricsEndpoint.start(health: { [weak self] in self?.health ?? (false, "stopped") }, logger: logger)
            metricsServer.withLock { $0 = server }
        }
        do {
            for heartbeat in heartbeats {  // before the first fetch, on every shard
                try heartbeat.register { [self] signal in handle(redisSignal: signal) }
            }
        } catch {
            stopMetricsEndpoint()
            throw error
        }
        logger.info("worker started", metadata: [
            "concurrency": "\(configuration.concurrency)",
            "queues": "\(configuration.queues.map { "\($0.name):\($0.weight)" }.joined(separator: ","))",
            "redis": "\(shardMap.isSingle ? endpoint.description : servedShards.map { "\(shardMap.shards[$0].name)=\(shardMap.shards[$0].endpoint)" }.joined(separator: ","))",
        ])
        for warning in shardMap.shards.flatMap(\.endpoint.warnings) { logger.warning("\(warning)") }
        for heartbeat in heartbeats { heartbeat.start { [weak self] signal in self?.handle(redisSignal: signal) } }
        for housekeeper in housekeepers { housekeeper.start() }
        watchdog.start()
        settler.start()
        for _ in 0..<configuration.concurrency { pool.spawnThread() }
        for fetcher in fetchers { fetcher.start() }
    }

    /// Starts, handles SIGTERM/SIGINT (shut down), SIGTSTP (quiet) and SIGTTIN (dump), and returns
    /// once the process has shut down: the blocking entry point of an executable that owns its signals
    /// (`workerctl worker`). Under a `ServiceGroup`, use the `Service` conformance's `run()` instead
    /// (WorkerProcess+Service.swift), which installs no signal handler.
    public func runHandlingSignals() throws {
        try start()
        installSignalHandlers()
        waitUntilStopped()
    }

    public func waitUntilStopped() {
        finished.wait()
        finished.signal()
    }

    /// Stops fetching; jobs fetched but not started go back to the front of their queues.
    /// Running jobs finish. (Sidekiq's TSTP / "quiet".)
    public func quietDown() {
        guard flags.becomeQuiet() else { return }
        logger.notice("quiet: no longer fetching")
        for fetcher in fetchers { fetcher.requestStop() }  // all at once: each may be in a wait of its own
        for fetcher in fetchers { fetcher.waitUntilStopped() }
        settlements.giveBack(buffer.close(), logger: logger)
        pool.asyncRuns.close()  // a pool thread waiting for an async job's place gives its job back
    }

    /// Seconds after `shutdownTimeout` that shutdown gives the settler to write what the pool's
    /// last runs left, before the shutdown deadline.
    static let settleGrace = 5.0

    /// Graceful stop (SIGTERM): quiet, wait up to `shutdownTimeout` for running jobs, put the
    /// unfinished ones back (with `interrupted_count` + 1), write every settlement, deregister.
    /// Safe to call from any thread, more than once; returns when the process has stopped.
    ///
    /// Bounded even while Redis is down: the shutdown deadline (`LifeCycleFlags`) is
    /// `shutdownTimeout + settleGrace` from the start of the stop. Past it the settler stops
    /// retrying and the Redis threads are joined with a bounded wait; settlements not written
    /// leave their jobs in this process's working list, where another process's orphan sweep takes
    /// them back once our fetcher heartbeat has expired (with AOF, nothing is lost). That is logged
    /// once, with the count.
    public func shutdown() {
        let first = shutdownOnce.withLock { started in
            defer { started = true }
            return !started
        }
        guard first else { waitUntilStopped(); return }
        logger.notice("shutting down", metadata: ["timeout_s": "\(configuration.shutdownTimeout.inSeconds)"])
        flags.beginStopping(deadline: Clock.now() + configuration.shutdownTimeout.inSeconds + Self.settleGrace)
        quietDown()
        if !pool.waitForThreads(timeout: configuration.shutdownTimeout.inSeconds) {
            for execution in running.all where execution.abandon() {
                settlements.add(.init(job: execution.job, settlement: .requeue(payload: Self.interrupted(execution.job)),
                                      counts: [.processed, .failed]))
                running.remove(execution)  // after it is queued (a reconciliation reading in between sees it)
                logger.warning("job unfinished at shutdown; put back", metadata: [
                    "jid": "\(execution.payload?.jid ?? "-")", "class": "\(execution.payload?.className ?? "-")"])
            }
        }
        settlements.waitUntilDrained(timeout: flags.secondsUntilShutdownDeadline)
        settler.stopAndWait()  // returns once drained, or at the deadline if Redis cannot be written
        let unwritten = settlements.unwrittenCount
        if unwritten > 0 {
            logger.error("""
                Redis could not be written before the shutdown deadline: \(unwritten) in-flight job(s) left for \
                recovery; they stay in this process's working list and another worker's orphan sweep takes them \
                back once this process's heartbeat expires. A job that finished but whose acknowledgement was not \
                written runs again; ledger jobs skip their effects on that redelivery.
                """, metadata: ["unwritten": "\(unwritten)", "working_lists": "\(Keys.working(queue: "*", identity: identity))"])
        }
        for heartbeat in heartbeats { heartbeat.requestStop() }
        for housekeeper in housekeepers { housekeeper.requestStop() }
        watchdog.requestStop()
        // Bounded: a thread still inside a Redis call at the deadline is left to the process exit.
        let joinBound = max(flags.secondsUntilShutdownDeadline, Self.joinGrace)
        let joinUntil = Clock.now() + joinBound
        let joined = heartbeats.map { ("heartbeat", $0.wait(timeout: joinUntil - Clock.now())) }
            + housekeepers.map { ("housekeeper", $0.wait(timeout: joinUntil - Clock.now())) }
            + [("watchdog", watchdog.wait(timeout: joinUntil - Clock.now()))]
        for (name, done) in joined where !done {
            logger.warning("thread still busy at shutdown; not waiting for it", metadata: ["thread": "\(name)"])
        }
        for heartbeat in heartbeats { heartbeat.deregister() }  // one attempt each; with Redis down the entry expires by itself
        logger.notice("stopped", metadata: [
            "processed": "\(processedCount)", "failed": "\(failedCount)",
            "pickup_p50_ms": "\(Self.milliseconds(pickupLatency.percentile(0.5)))",
            "pickup_p99_ms": "\(Self.milliseconds(pickupLatency.percentile(0.99)))",
            "peak_rss_kb": "\(ProcessFigures.peakRSSKilobytes())",
        ])
        stopMetricsEndpoint()
        finished.signal()
    }

    private func stopMetricsEndpoint() {
        metricsServer.withLock { server in
            defer { server = nil }
            return server
        }?.stop()
    }

    /// Most seconds shutdown waits for the heartbeat, housekeeper and watchdog threads once the
    /// deadline has passed (each checks its stop flag at least every 0.1 s between Redis calls).
    static let joinGrace = 2.0

    /// The payload of an interrupted job, with `interrupted_count` + 1 (as gitlab's fetcher does).
    static func interrupted(_ job: FetchedJob) -> String {
        guard var payload = try? JobPayload(parsing: job.raw) else { return String(decoding: job.raw, as: UTF8.self) }
        payload.fields["interrupted_count"] = .int(Int64(payload.interruptedCount + 1))
        return payload.serialized()
    }

    // MARK: Signals

    private func installSignalHandlers() {
        let queue = DispatchQueue(label: "signals")
        for (number, action) in [(SIGTERM, "stop"), (SIGINT, "stop"), (SIGTSTP, "quiet"), (SIGTTIN, "dump")] {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: queue)
            source.setEventHandler { [self] in handle(signal: action) }
            source.resume()
            signalSources.append(source)
        }
    }

    private func handle(signal action: String) {
        switch action {
        case "stop": Thread.detachNewThread { [self] in shutdown() }
        case "quiet": Thread.detachNewThread { [self] in quietDown() }
        default: dumpRunning()
        }
    }

    /// A signal the heartbeat found in Sidekiq's signal list (`TSTP`, `TERM`, `TTIN`).
    private func handle(redisSignal signal: String) {
        switch signal {
        case "TSTP": Thread.detachNewThread { [self] in quietDown() }
        case "TERM": Thread.detachNewThread { [self] in shutdown() }
        case "TTIN": dumpRunning()
        default: break
        }
    }

    private func dumpRunning() {
        for execution in running.all {
            logger.notice("running", metadata: [
                "thread": "\(execution.threadID)", "jid": "\(execution.payload?.jid ?? "-")",
                "class": "\(execution.payload?.className ?? "-")",
                "seconds": "\(Int(Clock.now() - execution.startedAt))"])
        }
    }

    static func milliseconds(_ seconds: Double?) -> String {
        seconds.map { String(format: "%.2f", $0 * 1000) } ?? "-"
    }
}
