import Foundation
import Queue

/// The relay's Redis connections, one per shard (docs/sharding.md), and the routing of outbox rows
/// to the shard holding their queue. With one Redis it is one connection and today's single pipeline.
///
/// Thread rules: owned by the relay thread (like the connection it replaces); never shared.
final class OutboxShards {
    let map: ShardMap
    /// Index = shard index; every one open (the relay drops the whole value on any failure).
    private let connections: [RedisConnection]

    init(map: ShardMap) throws(RedisError) {
        self.map = map
        var open: [RedisConnection] = []
        for shard in map.shards { open.append(try RedisConnection(endpoint: shard.endpoint)) }
        connections = open
    }

    func close() { for connection in connections { connection.close() } }

    /// `rows` grouped by the shard of their queue, each group in row order.
    func byShard(_ rows: [OutboxRow]) -> [(connection: RedisConnection, rows: [OutboxRow])] {
        if map.isSingle { return [(connections[0], rows)] }
        var groups = [[OutboxRow]](repeating: [], count: connections.count)
        for row in rows { groups[map.shardIndex(forQueue: row.queue)].append(row) }
        return groups.indices.filter { !groups[$0].isEmpty }.map { (connections[$0], groups[$0]) }
    }

    /// Pushes `rows`, each on its queue's shard (one pipeline per shard touched). Returns the rows
    /// whose payload could not be built (not pushed). A Redis failure throws: shards already written
    /// keep their jobs, and the caller's transaction rolls back, so those rows are pushed again later
    /// with the same jid (a duplicate delivery the ledger absorbs, as after a crash after the push).
    func push(_ rows: [OutboxRow], now: Double) throws -> [(OutboxRow, String)] {
        var failed: [(OutboxRow, String)] = []
        for (connection, group) in byShard(rows) {
            let (commands, bad) = OutboxRow.pushCommands(group, now: now)
            failed += bad
            if !commands.isEmpty {
                for reply in try connection.pipeline(commands) { try reply.checked() }
            }
        }
        return failed
    }

    /// The jids of `rows` found in none of the places a job can be on its queue's shard.
    func missing(_ rows: [OutboxRow]) throws -> Set<String> {
        var missing: Set<String> = []
        for (connection, group) in byShard(rows) {
            missing.formUnion(try JidSearch.missing(Set(group.map(\.jid)), in: connection))
        }
        return missing
    }
}
