import WorkersBoundary
import Foundation

/// Catches a mismatched shard map (review M12): docs/sharding.md says every process must be given the same map,
/// and a producer or relay with a stale `QUEUE_SHARDS` pushes to a shard where no worker fetches that queue — the
/// jobs wait there, silently.
///
/// Two checks, both read on one shard:
/// - **Maps in use.** Every process that checks writes its map's `ShardMap.digest` with the time into the shard's
///   `shard-maps` hash and reads the others: a different digest written within `freshness` seconds is a process
///   using another map.
/// - **Stranded queues.** A queue in the shard's `queues` set that holds jobs there although this map puts it on
///   another shard: whoever pushed it had another map (or none), and no worker of this map will fetch it.
///
/// Neither refuses to start: during a rolling deploy that changes the map, old and new processes overlap for a while,
/// and refusing would stop the deploy. The caller logs an alert (`WorkerProcess`'s housekeeper: `shard_map_mismatch`)
/// while a finding lasts. Pure apart from its Redis calls; any thread, one connection.
package enum ShardMapCheck {
    /// HASH `shard-maps`: map digest → epoch seconds it was last written.
    public static let key = Keys.shardMaps
    /// Entries older than this are deleted by the next check (processes gone or maps retired).
    public static let retention: Double = 3_600

    public struct Finding: Sendable, Equatable {
        /// Digests of other maps written on this shard within `freshness` seconds, newest first.
        public var otherMaps: [String] = []
        /// Queues holding jobs on this shard that the map puts on another shard: (queue, jobs, the map's shard).
        public var stranded: [Stranded] = []

        public init(otherMaps: [String] = [], stranded: [Stranded] = []) {
            self.otherMaps = otherMaps
            self.stranded = stranded
        }

        public var isEmpty: Bool { otherMaps.isEmpty && stranded.isEmpty }
    }

    public struct Stranded: Sendable, Equatable {
        public let queue: String
        public let jobs: Int
        public let mappedTo: String

        public init(queue: String, jobs: Int, mappedTo: String) {
            self.queue = queue
            self.jobs = jobs
            self.mappedTo = mappedTo
        }
    }

    /// Records `map` on shard `shard` (an index into `map.shards`, reached through `connection`) and reports what
    /// disagrees with it. `freshness`: how recent another map's entry must be to count (a few heartbeat intervals).
    public static func check(_ connection: RedisConnection, map: ShardMap, shard: Int, freshness: Double = 120,
                             now: Double = Clock.now()) throws(RedisError) -> Finding {
        let digest = map.digest
        var finding = Finding()
        // With one shard every queue is "here": no queue can be stranded, and the `queues` set is not read.
        var commands: [[any RedisArgument]] = [["HSET", key, digest, now], ["HGETALL", key]]
        if !map.isSingle { commands.append(["SMEMBERS", Keys.queues]) }
        let replies = try connection.pipeline(commands)
        for reply in replies { try reply.checked() }
        let entries = replies[1].strings
        var others: [(String, Double)] = []
        var expired: [String] = []
        for index in stride(from: 0, to: entries.count - 1, by: 2) {
            let (other, seen) = (entries[index], Double(entries[index + 1]) ?? 0)
            if other == digest { continue }
            if now - seen > retention { expired.append(other) } else if now - seen <= freshness { others.append((other, seen)) }
        }
        finding.otherMaps = others.sorted { $0.1 > $1.1 }.map(\.0)
        if !expired.isEmpty { _ = try connection.send(["HDEL", key] + expired) }
        let elsewhere = (replies.count > 2 ? replies[2].strings : []).sorted().filter { map.shardIndex(forQueue: $0) != shard }
        if !elsewhere.isEmpty {
            let lengths = try connection.pipeline(elsewhere.map { ["LLEN", Keys.queue($0)] })
            for (queue, length) in zip(elsewhere, lengths) {
                if let jobs = length.integer, jobs > 0 {
                    finding.stranded.append(Stranded(queue: queue, jobs: Int(jobs), mappedTo: map.shard(forQueue: queue).name))
                }
            }
        }
        return finding
    }
}

extension ShardMap {
    /// What every process must agree on: the shard names in order and which queue each explicitly mapped queue goes
    /// to, as the first 16 hex digits of a SHA-256. URLs are left out (processes may reach one Redis by different
    /// names), and so are passwords.
    public var digest: String {
        var text = shards.map(\.name).joined(separator: ",")
        for (queue, shard) in mappedQueues { text += "\n\(queue)=\(shard)" }
        return ContentHash.hex(ContentHash.sha256(Array(text.utf8)).prefix(8))
    }
}
