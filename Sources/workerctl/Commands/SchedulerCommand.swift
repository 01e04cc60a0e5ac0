import ArgumentParser
import Foundation
import Logging
import WorkersQueue
import WorkersScheduler
import Workers

/// The schedule file and scheduler settings: shared by `workerctl scheduler` and `workerctl run`.
struct ScheduleOptions: ParsableArguments {
    static let defaultPath = "config/schedule.yaml"

    @Option(name: .long, help: "Schedule file (YAML list of entries). Default: \(ScheduleOptions.defaultPath).")
    var schedule: String = ScheduleOptions.defaultPath

    @Option(name: .customLong("history-size"), help: "Fires kept per entry in cron_job:NAME:jid_history (sidekiq-cron: 10).")
    var historySize = 10

    @Option(name: .customLong("max-sleep"), help: "Most seconds between rounds (status changes are seen within this).")
    var maxSleep: Double = 1

    mutating func validate() throws {
        if !(1...1000).contains(historySize) { throw ValidationError("--history-size must be within 1...1000") }
        if !(maxSleep.isFinite && maxSleep > 0 && maxSleep <= 60) { throw ValidationError("--max-sleep must be within (0, 60]") }
    }

    /// Parses the schedule file; any problem ⇒ usage error (exit 2) naming each entry and reason.
    func loadFile() throws -> ScheduleFile {
        do { return try ScheduleFile.load(path: schedule) } catch { throw CLIError.usage(error.description) }
    }

    /// Connects to Redis (failure ⇒ exit 1), writes the entries into Redis and returns the runner.
    func makeRunner(file: ScheduleFile, redisURL: String) throws -> SchedulerRunner {
        let endpoint: RedisEndpoint
        do { endpoint = try RedisEndpoint(url: redisURL) } catch { throw CLIError.usage(error.description) }
        return try makeRunner(file: file, endpoint: endpoint, owns: nil, shardName: nil)
    }

    /// One runner per shard (docs/sharding.md), each owning the entries whose queue lives on its
    /// shard: the cron claim and the push are one script, so an entry's `cron_job:*` keys live next
    /// to its queue. With no shard map: `[makeRunner(file:redisURL:)]`.
    func makeRunners(file: ScheduleFile, redisURL: String, shardMap: ShardMap?) throws -> [SchedulerRunner] {
        guard let shardMap, !shardMap.isSingle else { return [try makeRunner(file: file, redisURL: redisURL)] }
        return try shardMap.shards.enumerated().map { index, shard in
            try makeRunner(file: file, endpoint: shard.endpoint,
                           owns: { shardMap.shardIndex(forQueue: $0.queue) == index }, shardName: shard.name)
        }
    }

    private func makeRunner(file: ScheduleFile, endpoint: RedisEndpoint, owns: (@Sendable (ScheduleEntry) -> Bool)?,
                            shardName: String?) throws -> SchedulerRunner {
        let connection: RedisConnection
        do { connection = try RedisConnection(endpoint: endpoint) } catch {
            throw CLIError.runtime((shardName.map { "shard \($0): " } ?? "") + error.description)
        }
        var logger = Logger(label: "workerctl.scheduler")
        logger[metadataKey: "schedule"] = "\(schedule)"
        if let shardName { logger[metadataKey: "shard"] = "\(shardName)" }
        let runner = SchedulerRunner(entries: file.entries, store: CronStore(connection: connection, historySize: historySize),
                                     maxSleep: maxSleep, schedulePath: schedule, logger: logger, owns: owns)
        do { _ = try runner.sync() } catch let error as RedisError {
            // Redis answered but refused a write: a cron key of another type (anyone with Redis access can write
            // one). The scheduler runs on, as after a reload it could not write; each entry's fire names its own
            // key (`cannot fire entry`). A Redis it cannot reach still ends the start (exit 1).
            guard case .server = error else { throw CLIError.runtime(error.description) }
            logger.error("schedule not synced to Redis: a cron key holds a value of another type; fixing or deleting it lets the next reload sync",
                         metadata: ["error": "\(error)"])
        }
        return runner
    }
}

/// Health of several runners (one per shard): ok when all are.
func combinedHealth(_ runners: [SchedulerRunner]) -> (ok: Bool, detail: String) {
    let all = runners.map(\.health)
    if all.count == 1 { return all[0] }
    return (all.allSatisfy(\.ok), all.map(\.detail).joined(separator: "; "))
}

/// The scheduler's signals: SIGHUP asks the runner to reload its schedule file
/// (`SchedulerRunner.requestReload`, applied on the scheduler's own thread between rounds);
/// SIGTERM/SIGINT stop it when `onStop` is given. Keep the value alive as long as the handlers should be.
///
/// In a process that also runs a `WorkerProcess` (`workerctl run`), pass no `onStop`: libdispatch
/// installs its sigaction when the first source for a signal is created, and a later
/// `signal(_, SIG_IGN)` (as WorkerProcess does before creating its own SIGTERM/SIGINT sources)
/// would silence every source for that signal. WorkerProcess does not handle SIGHUP, so the
/// reload source is ours alone in both commands. SIGHUP's default action (terminate) is replaced
/// as soon as this value exists.
final class SchedulerSignals {
    private var sources: [any DispatchSourceSignal] = []

    convenience init(runner: SchedulerRunner, onStop: (@Sendable () -> Void)? = nil) {
        self.init(runners: [runner], onStop: onStop)
    }

    /// One source per signal whatever the number of runners (one per shard): SIGHUP reloads each.
    init(runners: [SchedulerRunner], onStop: (@Sendable () -> Void)? = nil) {
        let queue = DispatchQueue(label: "scheduler-signals")
        var handlers: [(Int32, @Sendable () -> Void)] = [(SIGHUP, { for runner in runners { runner.requestReload() } })]
        if let onStop { handlers += [(SIGTERM, onStop), (SIGINT, onStop)] }
        for (number, handler) in handlers {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: queue)
            source.setEventHandler(handler: handler)
            source.resume()
            sources.append(source)
        }
    }

    deinit { for source in sources { source.cancel() } }
}

struct SchedulerCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "scheduler",
        abstract: "Run the cron scheduler: enqueue the jobs of the schedule file at their ticks.",
        discussion: """
            Several schedulers may run against the same Redis: each tick of each entry is enqueued once \
            (an atomic claim in Redis). Missed ticks are caught up per entry (catch_up). An invalid schedule \
            file is refused (exit 2). SIGHUP: read the schedule file again between rounds (added, changed and \
            removed entries; an invalid file keeps the previous schedule and logs why). SIGTERM/SIGINT: finish \
            the current round and exit 0. See docs/scheduler.md.
            """
    )

    @OptionGroup var redis: RedisOptions
    @OptionGroup var options: ScheduleOptions

    @Flag(name: .long, help: "Only check the schedule file and list its entries; do not connect to Redis.")
    var check = false

    @Option(name: .customLong("metrics-port"), help: "Serve Prometheus /metrics, /healthz and /readyz on PORT (0: any free port, logged).")
    var metricsPort: Int?

    @Option(name: .customLong("metrics-host"), help: "IPv4 address the metrics endpoint binds: 127.0.0.1 (default) or 0.0.0.0 (every interface).")
    var metricsHost = PrometheusEndpoint.defaultHost

    func validate() throws {
        if let metricsPort, !(0...65535).contains(metricsPort) { throw ValidationError("--metrics-port must be within 0...65535") }
    }

    func run() throws {
        let file = try options.loadFile()
        if check {
            for entry in file.entries {
                print("\(entry.name)\t\(entry.cron.source)\t\(entry.timeZone.identifier)\t\(entry.className)\t\(entry.queue)\t"
                      + "catch_up=\(entry.catchUp)\tpass_tick=\(entry.tickArgument)\(entry.enabled ? "" : "\tdisabled")")
            }
            print("\(options.schedule): \(file.entries.count) entr\(file.entries.count == 1 ? "y" : "ies"), OK")
            return
        }
        // A SIGHUP before the handlers exist (during the first sync) must not end the process.
        signal(SIGHUP, SIG_IGN)
        // Metric handles bind to the factory when created: bootstrap before the runner exists.
        if metricsPort != nil { PrometheusEndpoint.bootstrap() }
        let redisURL = redis.resolvedURL()
        let shardMap = try WorkerConfigFile().shardMap(defaultURL: redisURL)
        let runners = try options.makeRunners(file: file, redisURL: redisURL, shardMap: shardMap)
        let server = try metricsPort.map { port in
            try PrometheusEndpoint.listen(host: metricsHost, port: port, redisURL: redisURL, logger: Logger(label: "workerctl.scheduler"),
                                       health: { combinedHealth(runners) })
        }
        let signals = SchedulerSignals(runners: runners, onStop: { for runner in runners { runner.stop() } })
        // The first runner on this thread; with several shards the others on their own threads.
        for runner in runners.dropFirst() { runner.start() }
        runners[0].run()
        for runner in runners.dropFirst() { runner.waitUntilStopped() }
        withExtendedLifetime((signals, server)) {}
    }
}
