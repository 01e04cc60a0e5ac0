import Foundation
import Logging
import WorkersQueue
import Synchronization

/// Whether each Redis this process writes to has room for writes that grow it, as last seen (docs/redis-full.md).
///
/// A Redis at `maxmemory` with `noeviction` refuses every command that may grow memory (`-OOM …`), and a MULTI
/// holding one, but still runs the commands that shrink or keep it (`LREM`, `LTRIM`, `EXPIRE`, `DEL`, reads) and a
/// script past its first write. While a shard is full the runtime takes only those paths: the heartbeat keeps its
/// keys alive with `EXPIRE` (`Scripts.fullBeat`), the fetcher fetches without the blocking wait, the settler writes
/// what frees memory (acknowledgements, give-backs, drops) and holds in the process what would grow it (retry,
/// dead, schedule, batch outcomes, the `stat:*` counters) until there is room, and the housekeeper skips the orphan
/// sweep (its lease is a `SET`). So a full Redis drains, and what runs meanwhile adds no net memory.
///
/// Full is entered on any `-OOM` reply (`noteRefused`) or a heartbeat's `INFO memory` showing `used_memory` at
/// `maxmemory`; left when a reading shows `used_memory` below `roomFraction` of it (hysteresis: a drain that frees a
/// little does not flap). Readings also feed the `workers_redis_memory_used_ratio` gauge and the warning logged once
/// each time the ratio crosses `warningFraction` (80 % by default).
///
/// Thread rules: any thread. The heartbeat of a shard records its readings; any thread that meets `-OOM` notes it;
/// the fetcher, settler and housekeeper read `isFull`. State under one mutex, never held across I/O.
final class RedisRoom: Sendable {
    /// Below this share of `maxmemory` a full Redis has room again.
    static let roomFraction = 0.95
    /// At or above this share of `maxmemory` a warning is logged once (and the gauge shows it).
    let warningFraction: Double

    private struct Shard {
        var full = false
        var warned = false
        var used = 0
        var max = 0
    }
    private let shards = Mutex<[Int: Shard]>([:])
    private let logger: Logger

    init(logger: Logger, warningFraction: Double = 0.8) {
        self.logger = logger
        self.warningFraction = warningFraction
    }

    /// True while shard `shard`'s Redis was last seen full.
    func isFull(shard: Int) -> Bool { shards.withLock { $0[shard]?.full ?? false } }

    /// A write to shard `shard` was refused with `-OOM`.
    func noteRefused(shard: Int, _ error: RedisError) {
        let entered = shards.withLock { shards -> Bool in
            var state = shards[shard] ?? Shard()
            defer { shards[shard] = state }
            if state.full { return false }
            state.full = true
            return true
        }
        if entered { announceFull(shard: shard, reason: "\(error)") }
    }

    /// A reading of `INFO memory` on shard `shard`.
    func noteMemory(shard: Int, _ reading: RedisMemoryReading) {
        let (used, max, ratio) = (reading.used, reading.max, reading.ratio)
        RuntimeMetrics.redisMemoryRatio(ratio, shard: shard)
        let (entered, left, warn) = shards.withLock { shards -> (Bool, Bool, Bool) in
            var state = shards[shard] ?? Shard()
            defer { shards[shard] = state }
            state.used = used
            state.max = max
            var entered = false, left = false, warn = false
            if reading.isFull && !state.full {
                state.full = true
                entered = true
            } else if state.full && (max == 0 || ratio < Self.roomFraction) {
                state.full = false
                left = true
            }
            if max > 0 && ratio >= warningFraction {
                if !state.warned { state.warned = true; warn = true }
            } else {
                state.warned = false
            }
            return (entered, left, warn)
        }
        if warn {
            logger.warning("Redis memory nears maxmemory: at noeviction it will refuse writes (docs/deploy.md, sizing maxmemory)", metadata: [
                "alert": "redis_memory_high", "shard": "\(shard)", "used_bytes": "\(used)", "maxmemory_bytes": "\(max)",
                "used_ratio": "\(String(format: "%.2f", ratio))"])
        }
        if entered { announceFull(shard: shard, reason: "used_memory \(used) of maxmemory \(max)") }
        if left {
            RuntimeMetrics.redisFull(false, shard: shard)
            logger.notice("Redis has room again: held settlements, counters and the process record are written", metadata: [
                "shard": "\(shard)", "used_bytes": "\(used)", "maxmemory_bytes": "\(max)"])
        }
    }

    /// The last reading of shard `shard` (bytes; zeros before the first).
    func memory(shard: Int) -> (used: Int, max: Int) { shards.withLock { ($0[shard]?.used ?? 0, $0[shard]?.max ?? 0) } }

    private func announceFull(shard: Int, reason: String) {
        RuntimeMetrics.redisFull(true, shard: shard)
        logger.error("Redis is full (maxmemory): draining without growing it; retries, dead jobs and counters wait in this process", metadata: [
            "alert": "redis_full", "shard": "\(shard)", "reason": "\(reason)"])
    }
}
