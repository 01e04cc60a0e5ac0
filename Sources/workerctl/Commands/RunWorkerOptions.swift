import ArgumentParser
import WorkersBenchJobs
import Foundation
import WorkersHTTP
import WorkersAppJobs
import Logging
import WorkersOutbox
import WorkersQueue
import WorkersStorage
import WorkersSubjectKeys
import Workers

/// The worker's flags and how they become a `WorkerProcess`: shared by `workerctl worker` and
/// `workerctl run` (workers and scheduler in one process), so both start workers the same way.
struct WorkerOptions: ParsableArguments {
    @OptionGroup var redis: RedisOptions
    @OptionGroup var database: DatabaseOptions
    @OptionGroup var outbox: OutboxRelayOptions

    @Flag(name: .customLong("no-database"), help: "Run without PostgreSQL (only jobs that do not need it can run).")
    var noDatabase = false

    @Option(name: .long, help: "Pool threads running jobs (default 10, or the config file's).")
    var concurrency: Int?

    @Option(name: .long, help: "A queue to serve, NAME or NAME:WEIGHT; repeat for more. Without weights the order is strict.")
    var queue: [String] = []

    @Option(name: .long, help: "YAML config file (see config/workers.yaml).")
    var config: String?

    @Option(name: .customLong("shutdown-timeout"), help: "Seconds SIGTERM waits for running jobs.")
    var shutdownTimeout: Double?

    @Option(name: .customLong("heartbeat-ttl"), help: "Seconds after a crash before other processes take back this one's jobs.")
    var heartbeatTTL: Double?

    @Option(name: .customLong("heartbeat-interval"), help: "Seconds between heartbeats.")
    var heartbeatInterval: Double?

    @Option(name: .customLong("orphan-sweep-interval"), help: "Seconds between sweeps for dead processes' jobs.")
    var orphanSweepInterval: Double?

    @Option(name: .customLong("poll-interval"), help: "Average seconds between polls of the schedule and retry sets.")
    var pollInterval: Double?

    @Option(name: .customLong("unknown-class-grace"), help: "Seconds a job whose class no live process serving its queue knows is given back before it goes to dead (default 3600; 0: at once); or unknown_class_grace in the config file (docs/deploy.md, \"Rolling deploys\").")
    var unknownClassGrace: Double?

    @Option(name: .customLong("job-timeout"), help: "Default job timeout in seconds (classes may set less).")
    var jobTimeout: Double?

    @Option(name: .customLong("commit-batch"), help: "Most group-commit jobs sharing one PostgreSQL COMMIT (default 50; 1 commits each job alone).")
    var commitBatch: Int?

    @Flag(name: .customLong("no-prepared-statements"), help: "Do not prepare statements per PostgreSQL session (behind PgBouncer in transaction mode); or pg_prepared_statements: false in the config file.")
    var noPreparedStatements = false

    @Option(name: .customLong("commit-window"), help: "Longest a shared group-commit transaction stays open, in seconds (default 0.05).")
    var commitWindow: Double?

    @Option(name: .customLong("blocking-waiters"), help: "Extra Redis connections waiting for the next job when one queue is served and drained: lower pickup latency for more CPU per job (default 0, 0...16); or blocking_waiters in the config file.")
    var blockingWaiters: Int?

    @Option(name: .customLong("fetch-max-payload"), help: "Largest job payload, in bytes, a fetch hands to the pool (default 1048576, 1024...536870912); a larger one goes to dead as a stub with its size and first 1 KB, never run; or fetch_max_payload_bytes in the config file.")
    var fetchMaxPayload: Int?

    @Flag(name: .customLong("bench-jobs"), help: ArgumentHelp(
        "Also run the bench/test job ProbeInsert (needs `workerctl migrate --bench-tables`). For the benchmarks, the chaos run and the demo; never in production.",
        visibility: .hidden))
    var benchJobs = false

    @Option(name: .customLong("bench-args-version"), help: ArgumentHelp(
        "With --bench-jobs: announce RunLogProbe as decoding only this args_version (a stand-in for another release in the rolling-deploy tests).",
        visibility: .hidden))
    var benchArgsVersion: Int?

    @Option(name: .customLong("metrics-port"), help: "Serve Prometheus /metrics, /healthz and /readyz on PORT (0: any free port, logged); or metrics_port in the config file.")
    var metricsPort: Int?

    @Option(name: .customLong("metrics-host"), help: "IPv4 address the metrics endpoint binds: 127.0.0.1 (default, this machine only) or 0.0.0.0 (every interface); or metrics_host in the config file.")
    var metricsHost: String?

    mutating func validate() throws {
        if let concurrency, !(1...1000).contains(concurrency) { throw ValidationError("--concurrency must be within 1...1000") }
        if let metricsPort, !(0...65535).contains(metricsPort) { throw ValidationError("--metrics-port must be within 0...65535") }
        if let metricsHost, !PrometheusEndpoint.isIPv4Address(metricsHost) {
            throw ValidationError("--metrics-host must be an IPv4 address such as 127.0.0.1 or 0.0.0.0")
        }
        if let commitBatch, !(1...WorkerConfiguration.maxCommitBatch).contains(commitBatch) {
            throw ValidationError("--commit-batch must be within 1...\(WorkerConfiguration.maxCommitBatch)")
        }
        if let blockingWaiters, !(0...16).contains(blockingWaiters) { throw ValidationError("--blocking-waiters must be within 0...16") }
        if let fetchMaxPayload, !WorkerConfiguration.fetchMaxPayloadRange.contains(fetchMaxPayload) {
            let range = WorkerConfiguration.fetchMaxPayloadRange
            throw ValidationError("--fetch-max-payload must be within \(range.lowerBound)...\(range.upperBound)")
        }
        if let commitWindow, !(commitWindow.isFinite && (0...60).contains(commitWindow)) {
            throw ValidationError("--commit-window must be within 0...60 seconds")
        }
        for value in [shutdownTimeout, heartbeatTTL, heartbeatInterval, orphanSweepInterval, pollInterval, jobTimeout, unknownClassGrace] {
            if let value, !(value.isFinite && value >= 0) { throw ValidationError("durations must be non-negative numbers") }
        }
    }

    /// Builds the worker process from the config file, environment and flags (flags win).
    /// Bad settings ⇒ usage error (exit 2); a schema behind this build ⇒ runtime error (exit 1).
    func makeProcess() throws -> WorkerProcess { try makeProcessAndRelay().process }

    /// The worker process, and the outbox relay thread when `--outbox-relay` asks for one (docs/outbox.md).
    func makeProcessAndRelay() throws -> (process: WorkerProcess, relay: OutboxRelay?) {
        let file = try loadConfigFile()
        var configuration = file.configuration
        configuration.redisURL = redis.resolvedURL(configured: file.redisURL)
        configuration.shardMap = try file.shardMap(defaultURL: configuration.redisURL)
        do {  // REDIS_WAIT_REPLICAS / REDIS_WAIT_TIMEOUT_MS win over the file (docs/redis-ha.md)
            if let wait = try ReplicaWait.from(environment: ProcessInfo.processInfo.environment) { configuration.replicaWait = wait }
        } catch { throw CLIError.usage("\(error)") }
        if let concurrency { configuration.concurrency = concurrency }
        if !queue.isEmpty {
            configuration.queues = try queue.map { text in
                do { return try QueueWeight(parsing: text) } catch { throw CLIError.usage("\(error)") }
            }
        }
        if let shutdownTimeout { configuration.shutdownTimeout = .configured(seconds: shutdownTimeout) }
        if let heartbeatTTL { configuration.fetcherHeartbeatTTL = .configured(seconds: heartbeatTTL) }
        if let heartbeatInterval { configuration.heartbeatInterval = .configured(seconds: heartbeatInterval) }
        if let orphanSweepInterval { configuration.orphanSweepInterval = .configured(seconds: orphanSweepInterval) }
        if let pollInterval { configuration.pollInterval = .configured(seconds: pollInterval) }
        if let unknownClassGrace { configuration.unknownClassGrace = .configured(seconds: unknownClassGrace) }
        if let jobTimeout { configuration.defaultTimeout = .configured(seconds: jobTimeout) }
        if let commitBatch { configuration.commitBatch = commitBatch }
        if let commitWindow { configuration.commitWindow = .configured(seconds: commitWindow) }
        if let blockingWaiters { configuration.blockingWaiters = blockingWaiters }
        if let fetchMaxPayload { configuration.fetchMaxPayloadBytes = fetchMaxPayload }
        do { try configuration.validate() } catch { throw CLIError.usage("\(error)") }

        // Metric handles bind to the factory when created: bootstrap before the process exists.
        if metricsAddress(file: file) != nil { PrometheusEndpoint.bootstrap() }
        var registry = JobRegistry.builtins()
        if benchJobs {
            BenchJobs.register(into: &registry)
            BenchJobs.registerAsync(into: &registry)
            if let benchArgsVersion { registry.register(RunLogProbeJob(), argumentVersions: benchArgsVersion...benchArgsVersion) }
            if try SubjectKeysSetup.configuration() != nil { BenchJobs.registerSealedProbe(into: &registry) }  // personal args
            LimitProbes.register(into: &registry, redisURL: configuration.redisURL)
            TraceProbes.register(into: &registry, redisURL: configuration.redisURL)
            SteerProbes.register(into: &registry, redisURL: configuration.redisURL)
        }
        let jobDatabase = noDatabase ? nil : try openDatabase(configured: file.databaseURL,
                                                               poolSize: file.pgPoolSize ?? configuration.concurrency,
                                                               preparesStatements: !noPreparedStatements && file.pgPreparedStatements != false)
        // Encrypted personal arguments (docs/jobs-privacy.md): the key store (the deletion job erases e-mail subjects'
        // keys with it, the relay seals with it), or a refusal to start without one.
        let keyStore = try SubjectKeysSetup.openWorkerStore(database: jobDatabase)
        registerDomainJobs(into: &registry, redisURL: configuration.redisURL, shardMap: configuration.shardMap,
                           subjectKeys: keyStore.store)
        try SubjectKeysSetup.install(into: &registry, keyStore: keyStore, database: jobDatabase, redisURL: configuration.redisURL)
        let relay = try outbox.makeRelay(redisURL: configuration.redisURL, noDatabase: noDatabase,
                                         databaseURL: database.resolvedURL(configured: file.databaseURL), registry: registry,
                                         shardMap: configuration.shardMap,
                                         middleware: !outbox.enabled ? [] : try keyStore.unusable.map { [$0] }
                                             ?? SubjectKeysSetup.relayMiddleware(store: keyStore.store, redisURL: configuration.redisURL))
        let metricsEndpoint = try metricsAddress(file: file).map { address in
            try PrometheusEndpoint.endpoint(host: address.host, port: address.port, redisURL: configuration.redisURL,
                                            databaseURL: noDatabase ? nil : database.resolvedURL(configured: file.databaseURL),
                                            keyStoreProblem: keyStore.unusable?.reason)
        }
        do {
            return (try WorkerProcess(configuration: configuration, registry: registry, database: jobDatabase,
                                      logger: Logger(label: "workerctl.worker"), metricsEndpoint: metricsEndpoint), relay)
        } catch let error as RedisError {
            throw CLIError.usage(error.description)
        }
    }

    /// Runs the process (and its metrics endpoint, when asked) until SIGTERM/SIGINT (or Sidekiq's
    /// TERM through Redis) has shut it down. An endpoint that cannot listen is a runtime error (exit 1).
    func run(_ process: WorkerProcess, relay: OutboxRelay? = nil) throws {
        relay?.start()
        defer { relay?.stop() }
        do {
            try process.runHandlingSignals()
        } catch let error as RedisError {
            throw CLIError.runtime(error.description)
        } catch let error as MetricsServer.StartError {
            throw CLIError.runtime(error.description)
        }
    }

    func loadConfigFile() throws -> WorkerConfigFile {
        try config.map { try WorkerConfigFile.load(path: $0) } ?? WorkerConfigFile()
    }

    /// Where `/metrics`, `/healthz` and `/readyz` listen, from the flags and the config file (flags
    /// win; the host defaults to loopback). nil: no port anywhere, no endpoint.
    func metricsAddress(file: WorkerConfigFile) -> (host: String, port: Int)? {
        guard let port = metricsPort ?? file.metricsPort else { return nil }
        return (metricsHost ?? file.metricsHost ?? PrometheusEndpoint.defaultHost, port)
    }

    /// The domain jobs, configured from the environment (`docs/jobs-*.md`). An area that is not
    /// configured is logged once here and its jobs retry until a configured worker runs them.
    private func registerDomainJobs(into registry: inout JobRegistry, redisURL: String, shardMap: ShardMap?,
                                    subjectKeys: SubjectKeyStore?) {
        let logger = Logger(label: "workerctl.worker")
        guard CurlRuntime.prepareAtStartup(), let pool = try? RedisPool(url: redisURL, maxConnections: 4) else {
            logger.error("domain jobs not registered: libcurl or the Redis URL could not be initialised")
            return
        }
        let http = HTTPClient(configuration: HTTPClientConfiguration())
        for status in DomainJobs.register(into: &registry, environment: ProcessInfo.processInfo.environment,
                                          redis: pool, http: http,
                                          shards: shardMap.map { ShardPools(map: $0, maxConnections: 4) },
                                          subjectKeys: subjectKeys) {
            if let problem = status.problem {
                logger.warning("jobs not configured on this worker; they will retry until a configured worker runs them",
                               metadata: ["area": "\(status.area)", "problem": "\(problem)"])
            }
        }
    }

    /// Connects the pool and refuses to start on a schema that is behind this build.
    /// `preparesStatements`: see `PostgresConnectionOptions.preparesStatements`.
    private func openDatabase(configured: String?, poolSize: Int, preparesStatements: Bool) throws -> JobDatabase {
        let url = database.resolvedURL(configured: configured)
        let pool = PostgresPool(configuration: PostgresPoolConfiguration(
                                    url: url, maxConnections: max(1, poolSize),
                                    connectionOptions: PostgresConnectionOptions(preparesStatements: preparesStatements)),
                                logger: Logger(label: "workerctl.postgres"))
        do {
            let states = try BundledSchema.status(pool: pool)
            let behind = states.filter { !$0.status.isUpToDate }
            if !behind.isEmpty {
                let pending = behind.flatMap { $0.status.pending.map(\.description) }
                let modified = behind.flatMap(\.status.modified)
                throw CLIError.runtime("the database schema is behind this build (pending: \(pending.joined(separator: ", "))"
                                       + "\(modified.isEmpty ? "" : "; modified: \(modified)")); run `workerctl migrate` first")
            }
        } catch let error as PostgresError {
            throw CLIError.runtime("cannot use PostgreSQL at \(PostgresURL.redacted(url)): \(error)")
        }
        return JobDatabase(pool: pool)
    }
}
