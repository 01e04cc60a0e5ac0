import Foundation
import WorkersQueue
import Workers
import Yams

/// `config/workers.yaml`: the worker settings an operator keeps in a file. Flags and
/// environment variables override it. Unknown keys are refused, so a typo does not pass silently.
struct WorkerConfigFile {
    static let knownKeys: Set<String> = [
        "redis_url", "database_url", "concurrency", "queues", "prefetch", "shutdown_timeout", "heartbeat_interval",
        "fetcher_heartbeat_ttl", "orphan_sweep_interval", "interrupt_limit", "poll_interval", "unknown_class_grace", "job_timeout",
        "dead_max_jobs", "dead_max_age_days", "dead_max_bytes", "fetch_max_payload_bytes", "tag", "labels", "pg_pool_size", "pg_prepared_statements", "commit_batch", "commit_window", "blocking_waiters",
        "metrics_host", "metrics_port", "redis_wait_replicas", "redis_wait_timeout_ms",
        "redis_shards", "queue_shards",
    ]

    var configuration = WorkerConfiguration()
    var redisURL: String?
    var databaseURL: String?
    var pgPoolSize: Int?
    /// `pg_prepared_statements: false`: statements are not prepared per session (behind PgBouncer's
    /// transaction pooling); `--no-prepared-statements` does the same.
    var pgPreparedStatements: Bool?
    /// `metrics_host` / `metrics_port`: where `/metrics`, `/healthz`, `/readyz` listen (the flags win).
    var metricsHost: String?
    var metricsPort: Int?
    /// `redis_shards` (shard name → URL) and `queue_shards` (queue → shard name), docs/sharding.md;
    /// `REDIS_SHARDS` / `QUEUE_SHARDS` win. Sorted by name.
    var redisShards: [(name: String, url: String)] = []
    var queueShards: [(queue: String, shard: String)] = []

    static func load(path: String) throws -> WorkerConfigFile {
        let text: String
        do { text = try String(contentsOfFile: path, encoding: .utf8) } catch {
            throw CLIError.usage("cannot read config file \(path): \(error.localizedDescription)")
        }
        let node: Any?
        do { node = try Yams.load(yaml: text) } catch { throw CLIError.usage("config file \(path) is not valid YAML: \(error)") }
        guard let map = node as? [String: Any] else { throw CLIError.usage("config file \(path) must be a YAML mapping") }
        let unknown = Set(map.keys).subtracting(knownKeys)
        if !unknown.isEmpty { throw CLIError.usage("config file \(path): unknown keys \(unknown.sorted().joined(separator: ", "))") }

        var file = WorkerConfigFile()
        func number(_ key: String) throws -> Double? {
            guard let value = map[key] else { return nil }
            if let int = value as? Int { return Double(int) }
            if let double = value as? Double { return double }
            throw CLIError.usage("config file \(path): \(key) must be a number")
        }
        func integer(_ key: String) throws -> Int? {
            guard let value = map[key] else { return nil }
            guard let int = value as? Int else { throw CLIError.usage("config file \(path): \(key) must be an integer") }
            return int
        }
        file.redisURL = map["redis_url"] as? String
        file.databaseURL = map["database_url"] as? String
        file.pgPoolSize = try integer("pg_pool_size")
        if let value = map["pg_prepared_statements"] {
            guard let flag = value as? Bool else { throw CLIError.usage("config file \(path): pg_prepared_statements must be true or false") }
            file.pgPreparedStatements = flag
        }
        if let value = map["metrics_host"] {
            guard let host = value as? String, PrometheusEndpoint.isIPv4Address(host) else {
                throw CLIError.usage("config file \(path): metrics_host must be an IPv4 address such as 127.0.0.1 or 0.0.0.0")
            }
            file.metricsHost = host
        }
        if let port = try integer("metrics_port") {
            guard (0...65535).contains(port) else { throw CLIError.usage("config file \(path): metrics_port must be within 0...65535") }
            file.metricsPort = port
        }
        do {
            file.configuration.replicaWait = try ReplicaWait.parse(replicas: try integer("redis_wait_replicas").map(String.init),
                                                                   timeoutMilliseconds: try integer("redis_wait_timeout_ms").map(String.init))
        } catch let error as ReplicaWaitError { throw CLIError.usage("config file \(path): \(error)") }
        if let value = try integer("concurrency") { file.configuration.concurrency = value }
        if let value = try integer("prefetch") { file.configuration.prefetch = value }
        if let value = try number("shutdown_timeout") { file.configuration.shutdownTimeout = .configured(seconds: value) }
        if let value = try number("heartbeat_interval") { file.configuration.heartbeatInterval = .configured(seconds: value) }
        if let value = try number("fetcher_heartbeat_ttl") { file.configuration.fetcherHeartbeatTTL = .configured(seconds: value) }
        if let value = try number("orphan_sweep_interval") { file.configuration.orphanSweepInterval = .configured(seconds: value) }
        if let value = try integer("interrupt_limit") { file.configuration.interruptLimit = value }
        if let value = try number("poll_interval") { file.configuration.pollInterval = .configured(seconds: value) }
        if let value = try number("unknown_class_grace") { file.configuration.unknownClassGrace = .configured(seconds: value) }
        if let value = try number("job_timeout") { file.configuration.defaultTimeout = .configured(seconds: value) }
        if let value = try integer("commit_batch") { file.configuration.commitBatch = value }
        if let value = try number("commit_window") { file.configuration.commitWindow = .configured(seconds: value) }
        if let value = try integer("blocking_waiters") { file.configuration.blockingWaiters = value }
        if let value = try integer("dead_max_jobs") { file.configuration.deadLimits.maxJobs = value }
        if let value = try number("dead_max_age_days") { file.configuration.deadLimits.maxAge = .configured(seconds: value * 86_400) }
        if let value = try integer("dead_max_bytes") { file.configuration.deadLimits.maxBytes = value }
        if let value = try integer("fetch_max_payload_bytes") { file.configuration.fetchMaxPayloadBytes = value }
        if let value = map["tag"] as? String { file.configuration.tag = value }
        if let value = map["labels"] as? [String] { file.configuration.labels = value }
        func stringMap(_ key: String) throws -> [(String, String)] {
            guard let value = map[key] else { return [] }
            guard let entries = value as? [String: Any] else { throw CLIError.usage("config file \(path): \(key) must be a mapping") }
            return try entries.keys.sorted().map { name in
                guard let text = entries[name] as? String else { throw CLIError.usage("config file \(path): \(key).\(name) must be a string") }
                return (name, text)
            }
        }
        file.redisShards = try stringMap("redis_shards").map { (name: $0.0, url: $0.1) }
        file.queueShards = try stringMap("queue_shards").map { (queue: $0.0, shard: $0.1) }
        if let queues = map["queues"] {
            guard let list = queues as? [Any] else { throw CLIError.usage("config file \(path): queues must be a list") }
            file.configuration.queues = try list.map { item in
                do { return try QueueWeight(parsing: "\(item)") } catch {
                    throw CLIError.usage("config file \(path): \(error)")
                }
            }
        }
        return file
    }

    /// The shard map: default shard `defaultURL`, then `REDIS_SHARDS` / `QUEUE_SHARDS` from the
    /// environment, else this file's entries. Nil when no other shard is configured (one Redis).
    func shardMap(defaultURL: String, environment: [String: String] = ProcessInfo.processInfo.environment) throws -> ShardMap? {
        let map: ShardMap
        do {
            map = try ShardMap.from(environment: environment, defaultURL: defaultURL, fileShards: redisShards,
                                    fileQueues: queueShards)
        } catch { throw CLIError.usage(error.description) }
        return map.isSingle ? nil : map
    }
}

extension Duration {
    /// A number of seconds from a flag or the config file as a `Duration`, for `WorkerConfiguration.validate()` to
    /// judge: kept as it is except that NaN becomes -1 s and magnitudes beyond 1e12 s are cut to ±1e12 s (all
    /// refused by `validate()`), since `Duration.seconds(_: Double)` traps on NaN, ±∞ and beyond ~9.2e18 s.
    static func configured(seconds value: Double) -> Duration {
        guard !value.isNaN else { return .seconds(-1) }
        return .seconds(Swift.min(Swift.max(value, -1e12), 1e12))
    }
}
