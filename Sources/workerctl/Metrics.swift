import CoreMetrics
import Foundation
import Logging
import Prometheus
import WorkersQueue
import WorkersStorage
import Workers

/// The Prometheus side of `--metrics-port`: bootstraps swift-metrics with a Prometheus registry and builds the
/// runtime's `MetricsEndpoint` (served on `--metrics-host`): `/metrics` refreshes the queue gauges from Redis at
/// each scrape and renders the registry, `/readyz` is `ReadinessProbe`, `/healthz` the process's own health.
enum PrometheusEndpoint {
    /// The registry the Prometheus factory writes to; set once by `bootstrap` at start-up,
    /// before any other thread exists, and only read afterwards.
    nonisolated(unsafe) private static var registry: PrometheusCollectorRegistry?

    /// Must run before any metric handle is created (handles bind to the factory at creation).
    static func bootstrap() {
        let registry = PrometheusCollectorRegistry()
        MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))
        Self.registry = registry
    }

    /// The default of `--metrics-host` and `metrics_host`: reachable from this machine only.
    static let defaultHost = "127.0.0.1"

    /// True for a dotted IPv4 address (what `MetricsServer` binds), e.g. `0.0.0.0` or `10.0.0.5`.
    static func isIPv4Address(_ text: String) -> Bool {
        var address = in_addr()
        return inet_pton(AF_INET, text, &address) == 1
    }

    /// The endpoint of `--metrics-port` (port 0 picks a free port): a `WorkerProcess` given it starts it, logging
    /// the address; `listen` starts it for the scheduler. An invalid host or Redis URL is a usage error (exit 2).
    /// `databaseURL` nil: the process uses no PostgreSQL, so readiness does not check it.
    /// `keyStoreProblem`: why the worker's key store did not open at start (`UnusableKeyStore`), reported as the
    /// check `key_store`, degraded but ready (every class without personal arguments runs).
    static func endpoint(host: String = defaultHost, port: Int, redisURL: String,
                         databaseURL: String? = nil, keyStoreProblem: String? = nil) throws -> MetricsEndpoint {
        guard isIPv4Address(host) else { throw CLIError.usage("--metrics-host must be an IPv4 address, got '\(host)'") }
        let redis: RedisEndpoint
        do { redis = try RedisEndpoint(url: redisURL) } catch { throw CLIError.usage(error.description) }
        guard let registry else { preconditionFailure("PrometheusEndpoint.bootstrap() must run first") }
        let readiness = ReadinessProbe(redis: redis, databaseURL: databaseURL, keyStoreProblem: keyStoreProblem)
        let gauges = QueueGauges(endpoint: redis)
        return MetricsEndpoint(host: host, port: port, metrics: {
            gauges.refresh()
            var buffer: [UInt8] = []
            registry.emit(into: &buffer)
            return String(decoding: buffer, as: UTF8.self)
        }, readiness: { health in readiness.check(process: health) })
    }
}

extension PrometheusEndpoint {
    /// `endpoint`, started with `health` for a process that is no `WorkerProcess` (`workerctl scheduler`): a
    /// server that cannot start is a runtime error (exit 1); the address it listens on is logged as
    /// `metrics_listen` (host:port) and `metrics_url` (`MetricsEndpoint.start`).
    static func listen(host: String = defaultHost, port: Int, redisURL: String, logger: Logger,
                       health: @escaping @Sendable () -> (ok: Bool, detail: String)) throws -> MetricsServer {
        let endpoint = try endpoint(host: host, port: port, redisURL: redisURL)
        do {
            return try endpoint.start(health: health, logger: logger)
        } catch let error as MetricsServer.StartError {
            throw CLIError.runtime(error.description)
        }
    }
}

/// `/readyz`: may this process be sent work now? Ready when the process itself is healthy (the
/// `/healthz` check, given to `check`: running, not shutting down), Redis answers `PING`, and — for a process that
/// uses PostgreSQL — PostgreSQL answers and its schema has every migration this build ships
/// (`Migrator.status`, the check `workerctl worker` makes at start-up).
///
/// The answer is JSON: `{"ready":BOOL,"reason":"…","checks":{"process":…,"redis":…,"postgresql":…}}`,
/// `reason` naming each failing dependency (absent when ready). Reasons carry the server's error
/// text and redacted URLs, never a password.
///
/// Threading: `check()` is called by the metrics server's accept thread only, which alone
/// touches `redisConnection`; the PostgreSQL pool is thread-safe. Both are the probe's own
/// (one connection each, short timeouts), so a worker whose job pool is busy still answers.
final class ReadinessProbe: @unchecked Sendable {
    private let redis: RedisEndpoint
    private let databaseURL: String?
    private let postgres: PostgresPool?
    /// The runtime's migrator, then the app's (`BundledSchema`).
    private let migrators: [Migrator]?
    private var redisConnection: RedisConnection?
    /// Set once at start when the key store did not open (`UnusableKeyStore`): the `key_store` check's detail.
    private let keyStoreProblem: String?

    /// Seconds a probe waits per step (connect, command, checkout, statement). Kubernetes' default
    /// probe timeout is 1 s: set `timeoutSeconds` above the sum (docs/metrics-and-health.md).
    static let dependencyTimeout = 2

    init(redis: RedisEndpoint, databaseURL: String?, keyStoreProblem: String? = nil) {
        self.redis = redis
        self.keyStoreProblem = keyStoreProblem
        self.databaseURL = databaseURL
        if let databaseURL {
            let options = PostgresConnectionOptions(connectTimeout: Self.dependencyTimeout, applicationName: "workerctl-readyz",
                                                    statementTimeoutMilliseconds: Self.dependencyTimeout * 1000)
            postgres = PostgresPool(configuration: PostgresPoolConfiguration(
                url: databaseURL, maxConnections: 1, checkoutTimeout: .seconds(Self.dependencyTimeout),
                connectionOptions: options), logger: Logger(label: "workerctl.readyz"))
            migrators = try? BundledSchema.migrators()
        } else {
            postgres = nil
            migrators = nil
        }
    }

    /// `health`: the process's own (`/healthz`) answer, reported as the check `process`.
    func check(process health: (ok: Bool, detail: String)) -> (ok: Bool, json: String) {
        var checks = JSONObject()
        var failures: [String] = []
        func record(_ name: String, _ problem: String?, detail: String? = nil) {
            var entry: JSONObject = ["ok": .bool(problem == nil)]
            if let problem {
                entry["reason"] = .string(problem)
                failures.append("\(name): \(problem)")
            } else if let detail {
                entry["detail"] = .string(detail)
            }
            checks[name] = .object(entry)
        }
        record("process", health.ok ? nil : health.detail, detail: health.detail)
        let redis = redisProblem()
        record("redis", redis.problem, detail: redis.degraded)
        if databaseURL != nil {
            record("postgresql", postgresProblem())
        } else {
            checks["postgresql"] = .object(["ok": .bool(true), "detail": .string("not used by this process")])
        }
        if let keyStoreProblem {
            // Degraded, still ready: the other classes run; a restart with the fixed KEK configuration ends it.
            checks["key_store"] = .object(["ok": .bool(true), "detail": .string(
                "degraded: the key store did not open at start (\(keyStoreProblem)); jobs with personal arguments and erasures wait")])
        }
        var body: JSONObject = ["ready": .bool(failures.isEmpty)]
        if !failures.isEmpty { body["reason"] = .string(failures.joined(separator: "; ")) }
        body["checks"] = .object(checks)
        return (failures.isEmpty, JSONValue.object(body).serialized())
    }

    /// `problem` nil when Redis answered `PING` (else why not); `degraded` when it answers but is full (`used_memory`
    /// at `maxmemory`, docs/redis-full.md): a worker draining a full Redis stays ready, the detail says so. A failed
    /// connection is dropped and reopened by the next probe.
    private func redisProblem() -> (problem: String?, degraded: String?) {
        do {
            if redisConnection == nil {
                redisConnection = try RedisConnection(endpoint: redis, commandTimeout: .seconds(Self.dependencyTimeout))
            }
            let replies = try redisConnection!.pipeline([["PING"], ["INFO", "memory"]])
            try replies[0].checked()
            guard let memory = RedisMemoryReading(info: replies[1].string ?? ""), memory.isFull else { return (nil, nil) }
            return (nil, "degraded: Redis is full (used_memory \(memory.used) of maxmemory \(memory.max)); writes that grow it wait, the drain goes on")
        } catch {
            redisConnection?.close()
            redisConnection = nil
            return ("unreachable (\(error))", nil)
        }
    }

    /// nil when PostgreSQL answered and the schema is current; otherwise why not.
    private func postgresProblem() -> String? {
        guard let postgres, let databaseURL else { return nil }
        guard let migrators else { return "cannot read this build's migrations" }
        let states: [MigrationStatus]
        do { states = try postgres.withConnection { connection in try migrators.map { try $0.status(on: connection) } } } catch {
            return "unreachable at \(PostgresURL.redacted(databaseURL)) (\(error))"
        }
        if states.allSatisfy(\.isUpToDate) { return nil }
        let pending = states.flatMap(\.pending)
        let modified = states.flatMap(\.modified)
        var problems: [String] = []
        if !pending.isEmpty { problems.append("pending: \(pending.map(\.description).joined(separator: ", "))") }
        if !modified.isEmpty { problems.append("modified: \(modified.map { String(format: "%04d", $0) }.joined(separator: ", "))") }
        return "schema behind this build (\(problems.joined(separator: "; "))); run `workerctl migrate`"
    }
}

/// Queue sizes and latency, and the scheduled/retry/dead sizes, read from Redis at scrape time.
///
/// Bounded (review L7, M5): at most `maxQueues` queues get gauges per scrape — the largest (`LargestQueues`: each
/// scrape compares the next `scrapeNames` names of a rolling `SSCAN` with the previous largest, so a scrape costs
/// the same with 200,000 names as with 2,000, and every name is compared within ⌈names / 2,000⌉ scrapes); `workers_queue_gauges_truncated` says how many others there are (0 normally). The
/// gauges of a queue that is gone from the `queues` set, or no longer among the exported, are removed from the
/// registry, so the scrape's size follows the queues that exist, not every name ever seen.
///
/// Threading: only the metrics server's serving thread calls `refresh` (it alone touches `connection` and
/// `exported`).
final class QueueGauges: @unchecked Sendable {
    static let maxQueues = 1000

    private let endpoint: RedisEndpoint
    private var connection: RedisConnection?
    /// The largest queues over successive scrapes (a rolling, bounded read of `queues`).
    private let largest = LargestQueues(limit: maxQueues, namesPerCall: scrapeNames)
    /// Names of `queues` a scrape compares (about 2 µs of Redis time each): a scrape stays under 10 ms of Redis
    /// time with 200,000 names (bench/request_budget.sh).
    static let scrapeNames = 2_000
    /// The per-queue gauges registered by earlier scrapes, by queue name.
    private var exported: [String: (size: CoreMetrics.Gauge, latency: CoreMetrics.Gauge?)] = [:]

    init(endpoint: RedisEndpoint) { self.endpoint = endpoint }

    func refresh() {
        do {
            if connection == nil { connection = try RedisConnection(endpoint: endpoint, commandTimeout: .seconds(2)) }
            let connection = connection!
            let sample = try largest.next(connection)
            let (queues, total) = (sample.queues, sample.total)
            var current: [String: (size: CoreMetrics.Gauge, latency: CoreMetrics.Gauge?)] = [:]
            for queue in queues {
                let size = Gauge(label: "workers_queue_size", dimensions: [("queue", queue.name)])
                size.record(queue.size)
                var latency: CoreMetrics.Gauge?
                if let seconds = queue.latency {
                    latency = Gauge(label: "workers_queue_latency_seconds", dimensions: [("queue", queue.name)])
                    latency?.record(seconds)
                } else {
                    exported[queue.name]?.latency?.destroy()  // unknown now: no stale value
                }
                current[queue.name] = (size, latency)
            }
            for (name, gauges) in exported where current[name] == nil {
                gauges.size.destroy()
                gauges.latency?.destroy()
            }
            exported = current
            Gauge(label: "workers_queue_gauges_truncated").record(max(0, total - queues.count))
            let sets = try connection.pipeline([["ZCARD", Keys.schedule], ["ZCARD", Keys.retry], ["ZCARD", Keys.dead],
                                                ["SCARD", Keys.processes]])
            for reply in sets { try reply.checked() }
            Gauge(label: "workers_set_size", dimensions: [("set", "scheduled")]).record(Int(sets[0].integer ?? 0))
            Gauge(label: "workers_set_size", dimensions: [("set", "retry")]).record(Int(sets[1].integer ?? 0))
            Gauge(label: "workers_set_size", dimensions: [("set", "dead")]).record(Int(sets[2].integer ?? 0))
            Gauge(label: "workers_processes").record(Int(sets[3].integer ?? 0))
        } catch {
            connection?.close()
            connection = nil
            Counter(label: "workers_dependency_errors_total", dimensions: [("dependency", "Redis")]).increment()
        }
    }
}
