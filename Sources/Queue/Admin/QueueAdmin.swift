import Foundation

/// A queue as `queues ls` shows it.
public struct QueueSummary: Sendable, Equatable {
    public var name: String
    public var size: Int
    /// Seconds since the oldest job was enqueued (0 when empty); nil when unknown: the oldest job's time is not a
    /// time (`JobQueue.knownLatency`).
    public var latency: Double?
    /// Member of the `paused` set: our workers skip it; Ruby Sidekiq OSS ignores it.
    public var paused: Bool
}

/// Queue-level operations (wire doc §7 "Queues"), plus pausing through the `paused` SET, which
/// our workers honour and Ruby Sidekiq OSS processes ignore.
public enum QueueAdmin {
    /// Queue names: the `queues` SET plus paused names not in it, sorted by name.
    public static func names(_ connection: RedisConnection) throws(RedisError) -> [String] {
        let replies = try connection.pipeline([["SMEMBERS", Keys.queues], ["SMEMBERS", Keys.paused]])
        return Set(try replies[0].checked().strings + (try replies[1].checked().strings)).sorted()
    }

    /// Every queue with size, latency and paused flag, sorted by name (two round trips).
    public static func list(_ connection: RedisConnection, now: Double = Clock.now()) throws(RedisError) -> [QueueSummary] {
        let names = try names(connection)
        if names.isEmpty { return [] }
        let paused = Set(try connection.command("SMEMBERS", Keys.paused).strings)
        var commands: [[any RedisArgument]] = []
        for name in names {
            commands.append(["LLEN", Keys.queue(name)])
            commands.append(["LRANGE", Keys.queue(name), -1, -1])
        }
        let replies = try connection.pipeline(commands)
        return names.enumerated().map { index, name in
            QueueSummary(name: name, size: Int(replies[2 * index].integer ?? 0),
                         latency: JobQueue.knownLatency(tail: replies[2 * index + 1].array?.first?.bytes, now: now),
                         paused: paused.contains(name))
        }
    }

    /// The `limit` largest queues (by size, then name), sorted by name, with their latency and paused flag, and how
    /// many queues there are in all (review L7: a `queues` set of 60,000 names must not make every scrape or page
    /// hold 60,000 rows). Sizes are read in pipelines of 1,000; latency and paused only for the queues returned.
    public static func largest(_ connection: RedisConnection, limit: Int,
                               now: Double = Clock.now()) throws(RedisError) -> (queues: [QueueSummary], total: Int) {
        let all = try names(connection)
        if all.count <= limit { return (try list(connection, now: now), all.count) }
        var sizes: [Int] = []
        sizes.reserveCapacity(all.count)
        var start = 0
        while start < all.count {
            let chunk = all[start..<min(start + 1000, all.count)]
            sizes += try connection.pipeline(chunk.map { ["LLEN", Keys.queue($0)] }).map { Int($0.integer ?? 0) }
            start += 1000
        }
        let chosen = zip(all, sizes).sorted { $0.1 != $1.1 ? $0.1 > $1.1 : $0.0 < $1.0 }.prefix(max(0, limit))
            .sorted { $0.0 < $1.0 }
        if chosen.isEmpty { return ([], all.count) }
        let tails = try connection.pipeline(chosen.map { ["LRANGE", Keys.queue($0.0), -1, -1] })
        let paused = Set(try connection.command("SMEMBERS", Keys.paused).strings)
        let queues = zip(chosen, tails).map { entry, tail in
            QueueSummary(name: entry.0, size: entry.1, latency: JobQueue.knownLatency(tail: tail.array?.first?.bytes, now: now),
                         paused: paused.contains(entry.0))
        }
        return (queues, all.count)
    }

    public static func summary(_ connection: RedisConnection, name: String, now: Double = Clock.now()) throws(RedisError) -> QueueSummary {
        let queue = JobQueue(name)
        let replies = try connection.pipeline([["LLEN", queue.key], ["LRANGE", queue.key, -1, -1],
                                               ["SISMEMBER", Keys.paused, name]])
        return QueueSummary(name: name, size: Int(try replies[0].checked().integer ?? 0),
                            latency: JobQueue.knownLatency(tail: try replies[1].checked().array?.first?.bytes, now: now),
                            paused: try replies[2].checked().integer == 1)
    }

    /// True if the name is in `queues` or the list has jobs.
    public static func exists(_ connection: RedisConnection, name: String) throws(RedisError) -> Bool {
        let replies = try connection.pipeline([["SISMEMBER", Keys.queues, name], ["EXISTS", Keys.queue(name)]])
        return replies.contains { $0.integer == 1 }
    }

    /// `SADD paused NAME`. Returns false if it was already paused.
    @discardableResult
    public static func pause(_ connection: RedisConnection, name: String) throws(RedisError) -> Bool {
        try connection.command("SADD", Keys.paused, name).integer == 1
    }

    /// `SREM paused NAME`. Returns false if it was not paused.
    @discardableResult
    public static func resume(_ connection: RedisConnection, name: String) throws(RedisError) -> Bool {
        try connection.command("SREM", Keys.paused, name).integer == 1
    }

    /// Ruby's `Queue#clear` (`UNLINK queue:NAME` + `SREM queues NAME`; returns how many jobs
    /// went), plus the release of the unique locks the deleted jobs own (`UniqueLocks.purgeQueue`:
    /// the list is renamed aside atomically, read for jids, then unlinked). The paused flag is kept.
    @discardableResult
    public static func clear(_ connection: RedisConnection, name: String) throws(RedisError) -> Int {
        try UniqueLocks.purgeQueue(connection, name: name)
    }
}

/// `INFO` fields an operator looks at.
public struct RedisServerInfo: Sendable, Equatable {
    public var version: String
    public var usedMemory: Int
    public var usedMemoryHuman: String
    public var connectedClients: Int
    public var uptimeSeconds: Int

    /// Parses `INFO` text (`key:value` lines); missing fields become "" / 0.
    public init(infoText: String) {
        var fields: [Substring: Substring] = [:]
        for line in infoText.split(whereSeparator: \.isNewline) {
            guard let colon = line.firstIndex(of: ":"), !line.hasPrefix("#") else { continue }
            fields[line[..<colon]] = line[line.index(after: colon)...]
        }
        version = fields["redis_version"].map(String.init) ?? ""
        usedMemory = fields["used_memory"].flatMap { Int($0) } ?? 0
        usedMemoryHuman = fields["used_memory_human"].map(String.init) ?? ""
        connectedClients = fields["connected_clients"].flatMap { Int($0) } ?? 0
        uptimeSeconds = fields["uptime_in_seconds"].flatMap { Int($0) } ?? 0
    }

    public static func load(_ connection: RedisConnection) throws(RedisError) -> RedisServerInfo {
        let reply = try connection.command("INFO")
        return RedisServerInfo(infoText: reply.string ?? "")
    }
}

/// A snapshot of the numbers `Sidekiq::Stats` shows (wire doc §7 "Stats"), with the same
/// definitions so they match Ruby's: `processes` is the raw `SCARD processes` (stale members
/// count until pruned) and `busy` is Σ `HGET IDENTITY busy` over those members.
public struct Stats: Sendable, Equatable {
    public var processed: Int
    public var failed: Int
    /// The UTC day the `*Today` counters are for (`YYYY-MM-DD`).
    public var day: String
    public var processedToday: Int
    public var failedToday: Int
    /// Σ LLEN over the `queues` set.
    public var enqueued: Int
    public var scheduled: Int
    public var retries: Int
    public var dead: Int
    public var processes: Int
    public var busy: Int
    public var queues: [QueueSummary]
    public var redis: RedisServerInfo

    public static func load(_ connection: RedisConnection, now: Double = Clock.now()) throws(RedisError) -> Stats {
        let day = Clock.utcDay(now)
        let fast = try connection.pipeline([
            ["GET", Keys.statProcessed], ["GET", Keys.statFailed],
            ["GET", Keys.statProcessed(day: day)], ["GET", Keys.statFailed(day: day)],
            ["ZCARD", Keys.schedule], ["ZCARD", Keys.retry], ["ZCARD", Keys.dead],
            ["SMEMBERS", Keys.processes], ["SMEMBERS", Keys.queues], ["INFO"],
        ])
        for reply in fast { try reply.checked() }
        let members = fast[7].strings
        let busyReplies = try connection.pipeline(members.map { ["HGET", Keys.process($0), "busy"] })
        let queueNames = Set(fast[8].strings)
        let queues = try QueueAdmin.list(connection, now: now)
        // Counters anyone may have written (a Sidekiq client, a process hash): clamped, and their totals saturate.
        func int(_ reply: RedisReply) -> Int { Bounded.int(reply.integer ?? 0, in: 0...Bounded.maxCounter) }
        return Stats(
            processed: int(fast[0]), failed: int(fast[1]), day: day,
            processedToday: int(fast[2]), failedToday: int(fast[3]),
            enqueued: queues.filter { queueNames.contains($0.name) }.reduce(0) { Bounded.sum($0, $1.size) },
            scheduled: int(fast[4]), retries: int(fast[5]), dead: int(fast[6]),
            processes: members.count, busy: busyReplies.reduce(0) { Bounded.sum($0, int($1)) },
            queues: queues, redis: RedisServerInfo(infoText: fast[9].string ?? ""))
    }
}

extension Stats {
    /// Several shards' stats as one (docs/sharding.md): the counters, set sizes, `processes` and `busy`
    /// added up, the queues concatenated in the given order (a queue lives on one shard); `day` and
    /// `redis` are the first part's (pass the default shard first). A process fetching from k shards
    /// is registered on each, so `processes` counts it k times. `parts` must not be empty.
    public static func total(_ parts: [Stats]) -> Stats {
        precondition(!parts.isEmpty, "Stats.total of no shard")
        var sum = parts[0]
        for part in parts.dropFirst() {
            sum.processed = Bounded.sum(sum.processed, part.processed)
            sum.failed = Bounded.sum(sum.failed, part.failed)
            sum.processedToday = Bounded.sum(sum.processedToday, part.processedToday)
            sum.failedToday = Bounded.sum(sum.failedToday, part.failedToday)
            sum.enqueued = Bounded.sum(sum.enqueued, part.enqueued)
            sum.scheduled = Bounded.sum(sum.scheduled, part.scheduled)
            sum.retries = Bounded.sum(sum.retries, part.retries)
            sum.dead = Bounded.sum(sum.dead, part.dead)
            sum.processes = Bounded.sum(sum.processes, part.processes)
            sum.busy = Bounded.sum(sum.busy, part.busy)
            sum.queues += part.queues
        }
        return sum
    }
}
