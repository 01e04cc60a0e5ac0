import Foundation
import Logging
import Metrics
import Prometheus
import ServiceLifecycle
import Workers
import WorkersClient

/// A service that runs its own jobs in its own process: a `WorkersClient` (enqueue) and a `WorkerProcess` (fetch,
/// run, settle, heartbeat) in one `ServiceGroup`, which owns SIGTERM/SIGINT and stops them in reverse order: the
/// worker finishes its running jobs first (graceful stop), then the client closes.
///
/// Environment: `REDIS_URL` (default `redis://127.0.0.1:6379/0`), `METRICS_PORT` (default 9187; 0 picks a free port)
/// for `/metrics`, `/healthz`, `/readyz`, `CONCURRENCY` (default 4).
/// Demo mode (`scripts/test` runs it): `APPWORKER_DEMO=N` enqueues N jobs of each kind, typed, waits until their
/// effects are in Redis, prints `demo: …`, and stops the group by sending itself SIGTERM (exit status 0). With
/// `APPWORKER_DEMO_HOLD_KEY=key` it waits (at most 30 s) until that Redis key exists before stopping, so a script can
/// look at the running process (`workerctl workers ls`, `/metrics`) first.
@main
struct AppWorker {
    /// Exit status 1, with the reason on stderr, when start-up fails or a service (the demo) throws.
    static func main() async {
        do {
            try await run()
        } catch {
            FileHandle.standardError.write(Data("appworker: \(error)\n".utf8))
            exit(1)
        }
    }

    static func run() async throws {
        let environment = ProcessInfo.processInfo.environment
        // The executable, not the library, chooses the log and metrics backends.
        LoggingSystem.bootstrap(StreamLogHandler.standardError)
        let prometheus = PrometheusCollectorRegistry()
        MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: prometheus))
        var logger = Logger(label: "appworker")
        logger.logLevel = environment["LOG_LEVEL"].flatMap(Logger.Level.init(rawValue:)) ?? .info

        let redisURL = environment["REDIS_URL"] ?? "redis://127.0.0.1:6379/0"
        let client = try WorkersClient(url: redisURL, maxConnections: 4)
        let effects = Effects(client: client)
        var registry = JobRegistry()
        registry.register(SendWelcomeMail(effects: effects))
        registry.register(ResizeAvatar(effects: effects))

        var configuration = WorkerConfiguration(redisURL: redisURL, queues: [QueueWeight(name: "mail", weight: 2),
                                                                              QueueWeight(name: "default")],
                                                concurrency: environment["CONCURRENCY"].flatMap(Int.init) ?? 4)
        configuration.tag = "appworker"
        let endpoint = MetricsEndpoint(port: environment["METRICS_PORT"].flatMap(Int.init) ?? 9187, metrics: {
            prometheus.emitToString()
        })
        let worker = try WorkerProcess(configuration: configuration, registry: registry, logger: logger,
                                       metricsEndpoint: endpoint)

        // Started in this order, stopped in the reverse one.
        var services: [any Service] = [client, worker]
        if let count = environment["APPWORKER_DEMO"].flatMap(Int.init) {
            services.append(Demo(client: client, count: count, holdKey: environment["APPWORKER_DEMO_HOLD_KEY"],
                                 identity: worker.identity, logger: logger))
        }
        let group = ServiceGroup(configuration: ServiceGroupConfiguration(
            services: services, gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        try await group.run()
        logger.info("appworker stopped", metadata: ["processed": "\(worker.processedCount)"])
    }
}
