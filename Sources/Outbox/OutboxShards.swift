import Foundation
import Logging
import WorkersQueue

/// The relay's Redis connections, one per shard (docs/sharding.md), and the routing of outbox rows
/// to the shard holding their queue. With one Redis it is one connection and one pipeline.
///
/// Invariants:
/// - A shard is connected lazily, on the first batch with a row for it; one that cannot be reached, or that
///   refuses a write (`-OOM`, `-MISCONF`, `-READONLY`, `-NOREPLICAS`, any error reply, a broken link), is
///   *down* for a back-off (0.25 s doubling to 5 s) and its rows are left alone meanwhile: the other shards
///   go on (`unavailable` tells the relay which queues not to take).
/// - `push` never throws for Redis: it says which rows a shard acknowledged (`pushed`), which could not become a
///   payload (`refused`, to be marked `error`) and which were not written (`skipped`, left unpushed). A row is in
///   `pushed` only when the reply to the very command that carried it was not an error.
/// - Every row passes `middleware` (`OutboxRow.prepared(by:)`, e.g. the personal-arguments sealer) before any
///   shard is written: a middleware failure that is not the row's fault throws from `push` with nothing written,
///   so no row is ever pushed without it (in clear, when it is the sealer).
///
/// Thread rules: owned by one thread (the relay's, or the thread running one finder round); never shared.
final class OutboxShards {
    let map: ShardMap
    private let logger: Logger
    /// Index = shard index; nil until first used, and again after a failure.
    private var connections: [RedisConnection?]
    /// Index = shard index: the shard is down until then (`.distantPast`: not down).
    private var downUntil: [Date]
    /// Index = shard index: consecutive failures (for the back-off).
    private var failures: [Int]

    /// Applied to each row's job before its payload is built (`OutboxRelaySettings.middleware`).
    let middleware: [any EnqueueMiddleware]

    init(map: ShardMap, middleware: [any EnqueueMiddleware] = [], logger: Logger = Logger(label: "outbox.shards")) {
        self.map = map
        self.middleware = middleware
        self.logger = logger
        connections = Array(repeating: nil, count: map.shards.count)
        downUntil = Array(repeating: .distantPast, count: map.shards.count)
        failures = Array(repeating: 0, count: map.shards.count)
    }

    func close() {
        for index in connections.indices {
            connections[index]?.close()
            connections[index] = nil
        }
    }

    /// Shards in their back-off now (their rows are not to be taken).
    func unavailable(now: Date = Date()) -> Set<Int> {
        Set(downUntil.indices.filter { downUntil[$0] > now })
    }

    /// The batch filter that leaves out the rows of `down` shards: queues not to take (mapped to a down shard
    /// other than the default), and, when the default shard is down, the only queues to take (mapped to a
    /// healthy other shard). `onlyQueues` nil: no such restriction.
    func filter(down: Set<Int>) -> (excludeQueues: [String], onlyQueues: [String]?) {
        let mapped = map.mappedQueues.map { (queue: $0.queue, index: map.shardIndex(forQueue: $0.queue)) }
        let exclude = mapped.filter { down.contains($0.index) }.map(\.queue)
        let only = down.contains(0) ? mapped.filter { !down.contains($0.index) }.map(\.queue) : nil
        return (exclude, only)
    }

    /// The open connection of shard `index`, connecting if needed; nil while the shard is down or when the
    /// connect fails (which puts it down).
    private func connection(_ index: Int) -> RedisConnection? {
        if downUntil[index] > Date() { return nil }
        if let open = connections[index] { return open }
        do {
            let open = try RedisConnection(endpoint: map.shards[index].endpoint)
            connections[index] = open
            return open
        } catch {
            markDown(index, error)
            return nil
        }
    }

    /// Puts shard `index` down for its back-off and drops its connection. Logs the first failure and every
    /// 30th (the error text names the server and the reply, never a payload).
    private func markDown(_ index: Int, _ error: any Error) {
        connections[index]?.close()
        connections[index] = nil
        failures[index] += 1
        let delay = min(5, 0.25 * Double(1 << min(failures[index] - 1, 5)))
        downUntil[index] = Date(timeIntervalSinceNow: delay)
        if failures[index] == 1 || failures[index] % 30 == 0 {
            logger.warning("outbox: Redis shard unavailable; its rows wait, the other shards go on", metadata: [
                "shard": "\(map.shards[index].name)", "error": "\(error)", "failures": "\(failures[index])",
                "retry_in": "\(delay)"])
        }
    }

    private func markUp(_ index: Int) {
        if failures[index] > 0 {
            logger.notice("outbox: Redis shard available again", metadata: [
                "shard": "\(map.shards[index].name)", "after_failures": "\(failures[index])"])
        }
        failures[index] = 0
        downUntil[index] = .distantPast
    }

    /// `rows` grouped by the index of their queue's shard, each group in row order.
    func byShard(_ rows: [OutboxRow]) -> [(shard: Int, rows: [OutboxRow])] {
        if map.isSingle { return rows.isEmpty ? [] : [(0, rows)] }
        var groups = [[OutboxRow]](repeating: [], count: map.shards.count)
        for row in rows { groups[map.shardIndex(forQueue: row.queue)].append(row) }
        return groups.indices.filter { !groups[$0].isEmpty }.map { ($0, groups[$0]) }
    }

    /// What `push` did with each row.
    struct PushOutcome {
        /// Written to Redis (the reply to its command was not an error): mark `pushed_at`.
        var pushed: [OutboxRow] = []
        /// Could not become a payload, or too large: mark `error` with the reason (never pushed).
        var refused: [(OutboxRow, String)] = []
        /// Not written (its shard is down or refused the write): leave unpushed, for a later batch.
        var skipped: [OutboxRow] = []
    }

    /// Pushes `rows`, each on its queue's shard (one pipeline per shard touched). A shard that is down, or
    /// fails, costs only its own rows (`skipped`); the others are pushed and reported as such. Throws
    /// (`OutboxPrepareError.failed`) only when a middleware fails for a reason that is not the row's, before
    /// anything is written.
    func push(_ rows: [OutboxRow], now: Double, maxPayloadBytes: Int) throws(OutboxPrepareError) -> PushOutcome {
        var outcome = PushOutcome()
        var prepared: [OutboxRow] = []
        prepared.reserveCapacity(rows.count)
        for row in rows {
            do { prepared.append(try row.prepared(by: middleware)) } catch {
                guard case .refused(let reason) = error else { throw error }
                outcome.refused.append((row, reason))
            }
        }
        for (shard, group) in byShard(prepared) {
            let built = OutboxRow.pushCommands(group, now: now, maxPayloadBytes: maxPayloadBytes)
            outcome.refused += built.refused
            if built.commands.isEmpty { continue }
            guard let connection = connection(shard) else {
                outcome.skipped += built.commands.flatMap(\.rows)
                continue
            }
            let replies: [RedisReply]
            do {
                replies = try connection.pipeline(built.commands.map(\.command))
            } catch {
                // Unknown which commands the server applied: none is marked (a later batch pushes them again,
                // as after a relay crash between push and commit).
                markDown(shard, error)
                outcome.skipped += built.commands.flatMap(\.rows)
                continue
            }
            var refusal: RedisError?
            for (command, reply) in zip(built.commands, replies) {
                do {
                    try reply.checked()
                    outcome.pushed += command.rows
                } catch {
                    refusal = refusal ?? error
                    outcome.skipped += command.rows
                }
            }
            if let refusal { markDown(shard, refusal) } else { markUp(shard) }
        }
        return outcome
    }

    /// The jids of `rows` found in none of the places a job can be on its queue's shard. Rows of a shard that is
    /// down or fails are not reported missing (they are looked for in a later round).
    func missing(_ rows: [OutboxRow]) -> Set<String> {
        var missing: Set<String> = []
        for (shard, group) in byShard(rows) {
            guard let connection = connection(shard) else { continue }
            do {
                missing.formUnion(try JidSearch.missing(Set(group.map(\.jid)), in: connection))
            } catch {
                markDown(shard, error)
            }
        }
        return missing
    }
}
