import ArgumentParser
import WorkersBenchJobs
import Foundation
import Logging
import WorkersOutbox
import WorkersQueue
import WorkersStorage
import WorkersSubjectKeys
import Workers

/// The outbox flags shared by `worker`, `run` (`--outbox-relay`) and `relay` (docs/outbox.md).
struct OutboxRelayOptions: ParsableArguments {
    @Flag(name: .customLong("outbox-relay"), help: "Also run the outbox relay (job_outbox -> Redis) and the lost-job finder in this process.")
    var enabled = false

    @Option(name: .customLong("outbox-batch"), help: "Most outbox rows one relay transaction moves (default 500).")
    var batch: Int = 500

    @Option(name: .customLong("outbox-poll-interval"), help: "Seconds between polls of job_outbox when no NOTIFY came (default 1).")
    var pollInterval: Double = 1

    @Option(name: .customLong("lost-job-interval"), help: "Seconds between rounds of the lost-job finder (default 60; 0 turns it off).")
    var lostJobInterval: Double = 60

    @Option(name: .customLong("outbox-retention"), help: "Seconds pushed outbox rows are kept, and so how far back a lost job is found (default 604800 = 7 days). Expired rows are deleted by the retention loop, which always runs.")
    var retention: Double = 7 * 86_400

    @Option(name: .customLong("ledger-retention"), help: "Seconds finished job_ledger rows are kept (default 2592000 = 30 days; never less than --outbox-retention). Purged by the same loop.")
    var ledgerRetention: Double = 30 * 86_400

    @Option(name: .customLong("outbox-retention-interval"), help: "Seconds between retention passes (default 10); a pass deletes in batches until nothing expired is left or its 20 s budget is spent.")
    var retentionInterval: Double = 10

    @Option(name: .customLong("outbox-max-payload"), help: "Largest job payload, in bytes, the relay pushes (default 1048576); a larger row is marked as an error. SQL's limit is the setting workers.max_payload_bytes.")
    var maxPayload: Int = OutboxRelaySettings.defaultMaxPayloadBytes

    @Option(name: .customLong("outbox-batch-bytes"), help: "Most bytes of args and extra one relay batch carries (default 16777216).")
    var batchBytes: Int = OutboxRelaySettings.defaultMaxBatchBytes

    func validate() throws {
        if !(1...10_000).contains(batch) { throw ValidationError("--outbox-batch must be within 1...10000") }
        for value in [pollInterval, lostJobInterval, retention, ledgerRetention, retentionInterval]
        where !(value.isFinite && value >= 0) {
            throw ValidationError("outbox durations must be non-negative numbers")
        }
        if pollInterval < 0.01 { throw ValidationError("--outbox-poll-interval must be at least 0.01") }
        if retentionInterval < 0.05 { throw ValidationError("--outbox-retention-interval must be at least 0.05") }
        for (name, value) in [("--outbox-retention", retention), ("--ledger-retention", ledgerRetention)]
        where !(1...OutboxRetentionSettings.maxRetention.inSeconds).contains(value) {
            throw ValidationError("\(name) must be within 1...\(Int(OutboxRetentionSettings.maxRetention.inSeconds)) seconds")
        }
        for (name, value) in [("--outbox-max-payload", maxPayload), ("--outbox-batch-bytes", batchBytes)]
        where !(1024...OutboxRelaySettings.maxBytes).contains(value) {
            throw ValidationError("\(name) must be within 1024...\(OutboxRelaySettings.maxBytes) bytes")
        }
    }

    /// The relay settings; the lost-job finder re-pushes only classes of `registry` that use the ledger.
    func settings(redisURL: String, databaseURL: String, registry: JobRegistry, shardMap: ShardMap? = nil,
                  middleware: [any EnqueueMiddleware] = []) -> OutboxRelaySettings {
        let ledgerClasses = registry.classNames.filter { registry.options(for: $0)?.usesLedger == true }
        // The flags are seconds (`validate()` checked them); a `Duration` is built through `Bounded` (an interval
        // of 1e300 s would trap `Duration.seconds`): intervals up to a year, retentions up to `maxRetention`.
        func interval(_ seconds: Double) -> Duration { Bounded.duration(seconds: seconds) }
        let maxRetention = OutboxRetentionSettings.maxRetention.inSeconds
        let retention = Bounded.duration(seconds: retention, max: maxRetention)
        let lostJobs = lostJobInterval > 0
            ? LostJobSettings(interval: interval(lostJobInterval), retention: retention, ledgerClasses: ledgerClasses) : nil
        let retentionSettings = OutboxRetentionSettings(interval: interval(retentionInterval), outboxRetention: retention,
                                                        ledgerRetention: Bounded.duration(seconds: ledgerRetention, max: maxRetention))
        return OutboxRelaySettings(databaseURL: databaseURL, redisURL: redisURL, batchSize: batch,
                                   pollInterval: interval(pollInterval), lostJobs: lostJobs, shardMap: shardMap,
                                   retention: retentionSettings, maxPayloadBytes: maxPayload, maxBatchBytes: batchBytes,
                                   middleware: middleware)
    }

    /// The relay a worker runs when `--outbox-relay` is given (nil otherwise). `middleware`: applied to each row's
    /// job (`SubjectKeysSetup.relayMiddleware`).
    func makeRelay(redisURL: String, noDatabase: Bool, databaseURL: String, registry: JobRegistry,
                   shardMap: ShardMap? = nil, middleware: [any EnqueueMiddleware] = []) throws -> OutboxRelay? {
        guard enabled else { return nil }
        if noDatabase { throw CLIError.usage("--outbox-relay needs PostgreSQL; it cannot run with --no-database") }
        return OutboxRelay(settings: settings(redisURL: redisURL, databaseURL: databaseURL, registry: registry, shardMap: shardMap,
                                              middleware: middleware),
                           logger: Logger(label: "workerctl.outbox"))
    }
}

struct RelayCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "relay",
        abstract: "Move committed job_outbox rows to Redis (transactional enqueue; docs/outbox.md).",
        discussion: """
            Woken by NOTIFY workers_outbox at each commit, with a fallback poll. Any number of relays may run: \
            rows are taken with FOR UPDATE SKIP LOCKED. The lost-job finder runs with it only when given the \
            ledger job classes (--bench-jobs adds ProbeInsert; workers started with --outbox-relay know every \
            class they run). SIGTERM/SIGINT: finish the current batch and exit 0.
            """
    )

    @OptionGroup var redis: RedisOptions
    @OptionGroup var database: DatabaseOptions
    @OptionGroup var outbox: OutboxRelayOptions

    @Flag(name: .customLong("bench-jobs"), help: ArgumentHelp("Let the lost-job finder push again the bench job ProbeInsert.", visibility: .hidden))
    var benchJobs = false

    func run() throws {
        var registry = JobRegistry()
        if benchJobs { registry = BenchJobs.registry() }
        // Rows written in clear get their personal arguments encrypted on the way to Redis (docs/jobs-privacy.md).
        let keys = try SubjectKeysSetup.configuration().map { configuration in
            try SubjectKeysSetup.store(pool: PostgresPool(url: database.resolvedURL(), maxConnections: 2), configuration: configuration)
        }
        let relay = OutboxRelay(settings: outbox.settings(redisURL: redis.resolvedURL(), databaseURL: database.resolvedURL(),
                                                          registry: registry,
                                                          shardMap: try WorkerConfigFile().shardMap(defaultURL: redis.resolvedURL()),
                                                          middleware: try SubjectKeysSetup.relayMiddleware(store: keys, redisURL: redis.resolvedURL())),
                                logger: Logger(label: "workerctl.relay"))
        let stopped = DispatchSemaphore(value: 0)
        var sources: [any DispatchSourceSignal] = []
        for number in [SIGTERM, SIGINT] {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { stopped.signal() }
            source.resume()
            sources.append(source)
        }
        relay.start()
        stopped.wait()
        relay.stop()
        withExtendedLifetime(sources) {}
    }
}
