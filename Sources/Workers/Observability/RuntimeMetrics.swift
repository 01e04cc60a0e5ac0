import CoreMetrics
import Foundation
import Synchronization

/// The runtime's metrics through swift-metrics (a Prometheus backend is bootstrapped by
/// `workerctl worker --metrics-port`; without one they cost a no-op call).
///
/// Handles are cached per (class, queue) so the hot path does one mutex-guarded dictionary lookup
/// per job. Class names come only from the registry (unregistered ones are reported as
/// `_unregistered`), so bad input cannot blow up the label cardinality. Any thread may call.
package final class RuntimeMetrics: Sendable {
    struct JobHandles: Sendable {
        let processed: Counter
        let failed: Counter
        let runTime: CoreMetrics.Timer
        let pickup: CoreMetrics.Timer
    }

    private let handles = Mutex<[String: JobHandles]>([:])
    let busyThreads = Gauge(label: "workers_busy_threads")
    let orphansRecovered = Counter(label: "workers_orphan_jobs_recovered_total")
    /// 1 while a housekeeper's last shard-map check found another map in use or stranded jobs (`ShardMapCheck`).
    let shardMapMismatch = Gauge(label: "workers_shard_map_mismatch")
    /// Connection failures by dependency (`Redis` from the runtime's loops, `PostgreSQL` from jobs).
    static func dependencyError(_ dependency: String) {
        Counter(label: "workers_dependency_errors_total", dimensions: [("dependency", dependency)]).increment()
    }
    let jobTimeouts = Counter(label: "workers_job_timeouts_total")
    /// `used_memory / maxmemory` of a shard's Redis at the last heartbeat (0 without a `maxmemory`): `RedisRoom`.
    static func redisMemoryRatio(_ ratio: Double, shard: Int) {
        Gauge(label: "workers_redis_memory_used_ratio", dimensions: [("shard", "\(shard)")]).record(ratio)
    }
    /// 1 while a shard's Redis is full (`RedisRoom`): the runtime drains it without growing it.
    static func redisFull(_ full: Bool, shard: Int) {
        Gauge(label: "workers_redis_full", dimensions: [("shard", "\(shard)")]).record(full ? 1 : 0)
    }

    public init() {}

    /// The handles for (class, queue). `cache` is the calling thread's own (no lock); the shared
    /// table is consulted only on a miss.
    func job(className: String, queue: String, cache: inout [String: JobHandles]) -> JobHandles {
        let key = className + "\u{0}" + queue
        if let local = cache[key] { return local }
        let found = job(className: className, queue: queue)
        cache[key] = found
        return found
    }

    func job(className: String, queue: String) -> JobHandles {
        let key = className + "\u{0}" + queue
        if let cached = handles.withLock({ $0[key] }) { return cached }
        let dimensions = [("class", className), ("queue", queue)]
        let made = JobHandles(
            processed: Counter(label: "workers_jobs_processed_total", dimensions: dimensions),
            failed: Counter(label: "workers_jobs_failed_total", dimensions: dimensions),
            runTime: CoreMetrics.Timer(label: "workers_job_run_seconds", dimensions: dimensions, preferredDisplayUnit: .seconds),
            pickup: CoreMetrics.Timer(label: "workers_job_pickup_seconds", dimensions: [("queue", queue)],
                                      preferredDisplayUnit: .seconds))
        handles.withLock { $0[key] = made }
        return made
    }

    /// One finished run: counts it, its failure if any, and its run time.
    static func finished(_ handles: JobHandles, failed: Bool, runSeconds: Double) {
        handles.processed.increment()
        if failed { handles.failed.increment() }
        handles.runTime.recordNanoseconds(Int64(max(0, runSeconds) * 1e9))
    }
}
