/// A value read from one Redis shard, with that shard's name (docs/sharding.md).
///
/// What the admin calls that read every shard return (`WorkersClient.queues()`, `findJob`, …), so
/// the caller can act on the shard the value came from (`WorkersClient.withConnection(shard:)`).
/// Without sharding the name is `ShardMap.defaultName`. Immutable.
public struct OnShard<Value> {
    /// The shard's name in the `ShardMap` (`default` for `REDIS_URL`).
    public let shard: String
    public let value: Value

    public init(shard: String, value: Value) {
        self.shard = shard
        self.value = value
    }
}

extension OnShard: Sendable where Value: Sendable {}
extension OnShard: Equatable where Value: Equatable {}
