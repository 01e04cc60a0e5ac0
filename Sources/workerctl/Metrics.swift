import CoreMetrics
import Foundation
import Logging
import Prometheus
import Queue
import Workers

/// The Prometheus side of `--metrics-port`: bootstraps swift-metrics with a Prometheus registry,
/// refreshes the queue gauges from Redis at each scrape, and serves `/metrics` and `/healthz`.
enum MetricsEndpoint {
    /// The registry the Prometheus factory writes to; set once by `bootstrap` at start-up,
    /// before any other thread exists, and only read afterwards.
    nonisolated(unsafe) private static var registry: PrometheusCollectorRegistry?

    /// Must run before any metric handle is created (handles bind to the factory at creation).
    static func bootstrap() {
        let registry = PrometheusCollectorRegistry()
        MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))
        Self.registry = registry
    }

    static func serve(port: Int, redis: RedisEndpoint,
                      health: @escaping @Sendable () -> (ok: Bool, detail: String)) throws -> MetricsServer {
        guard let registry else { preconditionFailure("MetricsEndpoint.bootstrap() must run first") }
        let gauges = QueueGauges(endpoint: redis)
        return try MetricsServer(port: port, metrics: {
            gauges.refresh()
            var buffer: [UInt8] = []
            registry.emit(into: &buffer)
            return String(decoding: buffer, as: UTF8.self)
        }, health: health)
    }
}

extension MetricsEndpoint {
    /// `serve`, for `--metrics-port`: a server that cannot start is a runtime error (exit 1); the
    /// address it listens on is logged as `metrics_url` (port 0 picks a free port).
    static func listen(port: Int, redisURL: String, logger: Logger,
                       health: @escaping @Sendable () -> (ok: Bool, detail: String)) throws -> MetricsServer {
        let endpoint: RedisEndpoint
        do { endpoint = try RedisEndpoint(url: redisURL) } catch { throw CLIError.usage(error.description) }
        let server: MetricsServer
        do { server = try serve(port: port, redis: endpoint, health: health) } catch let error as MetricsServer.StartError {
            throw CLIError.runtime(error.description)
        }
        logger.info("metrics endpoint listening", metadata: ["metrics_url": "http://127.0.0.1:\(server.port)/metrics"])
        return server
    }
}

/// Queue sizes and latency, and the scheduled/retry/dead sizes, read from Redis at scrape time
/// (only the scrape thread touches the connection).
final class QueueGauges: @unchecked Sendable {
    private let endpoint: RedisEndpoint
    private var connection: RedisConnection?

    init(endpoint: RedisEndpoint) { self.endpoint = endpoint }

    func refresh() {
        do {
            if connection == nil { connection = try RedisConnection(endpoint: endpoint, commandTimeout: 2) }
            let stats = try Stats.load(connection!)
            for queue in stats.queues {
                Gauge(label: "workers_queue_size", dimensions: [("queue", queue.name)]).record(queue.size)
                Gauge(label: "workers_queue_latency_seconds", dimensions: [("queue", queue.name)]).record(queue.latency)
            }
            Gauge(label: "workers_set_size", dimensions: [("set", "scheduled")]).record(stats.scheduled)
            Gauge(label: "workers_set_size", dimensions: [("set", "retry")]).record(stats.retries)
            Gauge(label: "workers_set_size", dimensions: [("set", "dead")]).record(stats.dead)
            Gauge(label: "workers_processes").record(stats.processes)
        } catch {
            connection?.close()
            connection = nil
            Counter(label: "workers_dependency_errors_total", dimensions: [("dependency", "Redis")]).increment()
        }
    }
}
