import Foundation

/// One `RedisPool` per shard of a `ShardMap`, for producers that route by queue (`JobClient`).
///
/// Immutable after `init`; each pool is thread-safe, so share one instance per process. At most
/// `maxConnections` connections are open per shard.
package final class ShardPools: Sendable {
    public let map: ShardMap
    /// Index = shard index in `map`.
    public let pools: [RedisPool]

    public init(map: ShardMap, maxConnections: Int = 4, commandTimeout: Duration = .seconds(10)) {
        self.map = map
        pools = map.shards.map { RedisPool(endpoint: $0.endpoint, maxConnections: maxConnections, commandTimeout: commandTimeout) }
    }

    /// The pool of the shard holding `queue`.
    public func pool(forQueue queue: String) -> RedisPool { pools[map.shardIndex(forQueue: queue)] }
}
