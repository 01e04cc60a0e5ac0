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
    /// Queue names: the `queues` SET plus paused names not in it, sorted by name. Reads every name: for a command
    /// an operator runs on purpose (and the bulk POSTs); a request reads `names(_:budget:)`.
    public static func names(_ connection: RedisConnection) throws(RedisError) -> [String] {
        let replies = try connection.pipeline([["SMEMBERS", Keys.queues], ["SMEMBERS", Keys.paused]])
        return Set(try replies[0].checked().strings + (try replies[1].checked().strings)).sorted()
    }

    /// The names `budget` allows (review M5: any producer can add names to `queues`): `SSCAN queues`, each name one
    /// entry of the budget, plus at most `sampleNames` paused names (`paused` only grows by operators' pauses);
    /// sorted by name. `budget.exhausted` once some names of `queues` were left unread. Without a budget, every name
    /// (`names(_:)`).
    public static func names(_ connection: RedisConnection, budget: ScanBudget?) throws(RedisError) -> [String] {
        guard let budget else { return try names(connection) }
        let queued = try budget.members(of: Keys.queues, connection)
        let paused = try ScanBudget(maxEntries: sampleNames, deadline: budget.deadline).members(of: Keys.paused, connection)
        return Set(queued + paused).sorted()
    }

    /// The queues a search with `budget` looks through (a jid, a filter over every queue): every name without a
    /// budget; with one, the first `sampleNames` read by `SSCAN` (a name left unread marks `budget` exhausted, so
    /// the answer says it may be incomplete). Each queue the search then visits costs at least one entry of
    /// `budget`, empty or not (`chargeVisit`), so a search's round trips are bounded whatever `queues` holds, and
    /// several searches sharing one budget (the bulk route's jids) together too.
    public static func searchNames(_ connection: RedisConnection, budget: ScanBudget?) throws(RedisError) -> [String] {
        guard let budget else { return try names(connection) }
        let names = ScanBudget(maxEntries: sampleNames, deadline: budget.deadline)
        let read = try self.names(connection, budget: names)
        if names.exhausted { budget.stop() }
        return read
    }

    /// How many queue names a dashboard page, the live view, `stats` and `top` read per shard and request
    /// (`sample`): the rest are counted (`SCARD`), not read.
    public static let sampleNames = 1_000
    /// How many queue names `largest` compares per call (`/queues`, a worker's `/metrics`, `queues ls`).
    public static let largestNames = 4_000

    /// Queues read within a budget: the rows, how many names `queues` holds in all, and whether some were left
    /// unread (`partial`: the page says "showing N of M queues — partial").
    public struct Sample: Sendable, Equatable {
        public var queues: [QueueSummary]
        /// `SCARD queues`.
        public var total: Int
        public var partial: Bool
    }

    /// The queues whose names `budget` allows (default `sampleNames`), with size, latency and paused flag, sorted by
    /// name: at most `budget.maxEntries / ScanBudget.scanStep + 3` round trips and 2 commands per name read,
    /// whatever `queues` holds.
    public static func sample(_ connection: RedisConnection, budget: ScanBudget = ScanBudget(maxEntries: sampleNames),
                              now: Double = Clock.now()) throws(RedisError) -> Sample {
        let names = try names(connection, budget: budget)
        let total = Int(try connection.command("SCARD", Keys.queues).integer ?? 0)
        return Sample(queues: try summaries(connection, names: names, now: now), total: total, partial: budget.exhausted)
    }

    /// Size, latency and paused flag of each of `names` (one pipeline); `sizes`, when the caller read them already,
    /// are not read again.
    static func summaries(_ connection: RedisConnection, names: [String], sizes known: [Int]? = nil,
                          now: Double) throws(RedisError) -> [QueueSummary] {
        if names.isEmpty { return [] }
        let perName = known == nil ? 2 : 1
        var commands: [[any RedisArgument]] = [["SMISMEMBER", Keys.paused] + names.map { $0 as any RedisArgument }]
        for name in names {
            if known == nil { commands.append(["LLEN", Keys.queue(name)]) }
            commands.append(["LRANGE", Keys.queue(name), -1, -1])
        }
        let replies = try connection.pipeline(commands)
        let paused = try replies[0].checked().array ?? []
        return names.enumerated().map { index, name in
            let base = 1 + perName * index
            let size = known.map { index < $0.count ? $0[index] : 0 }
                ?? Bounded.int(replies[base].integer ?? 0, in: 0...Bounded.maxCounter)
            return QueueSummary(name: name, size: size,
                                latency: JobQueue.knownLatency(tail: replies[base + perName - 1].array?.first?.bytes, now: now),
                                paused: index < paused.count && paused[index].integer == 1)
        }
    }

    /// Every queue with size, latency and paused flag, sorted by name (two round trips). Reads every name: for a
    /// caller that wants them all on purpose (`WorkersClient.queues`); pages and commands read `sample`/`largest`.
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

    /// The `limit` largest queues (by size, then name) among the names `budget` allows (default `largestNames`),
    /// sorted by name, with their latency and paused flag; `total` is `SCARD queues` (review L7 and M5: a `queues`
    /// set of 200,000 names must not make every page read 200,000 sizes). `partial`: names were left unread, so a
    /// larger queue may be missing. A reader called again and again (a scrape) keeps a `LargestQueues`, which
    /// finds the largest over successive calls.
    public static func largest(_ connection: RedisConnection, limit: Int,
                               budget: ScanBudget = ScanBudget(maxEntries: largestNames),
                               now: Double = Clock.now()) throws(RedisError) -> Sample {
        try LargestQueues(limit: limit).next(connection, budget: budget, now: now)
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

/// The largest queues, found over successive calls at a bounded cost each (review M5: a worker's `/metrics` read
/// the size of every name in `queues`, 0.85 s per scrape with 200,000 names). Each call reads the next names of a
/// rolling `SSCAN` of `queues` within its budget (default `QueueAdmin.largestNames`), compares their sizes with
/// those of the previous call's largest (still in `queues`), and keeps the `limit` largest: so every name is
/// compared within ⌈names / budget⌉ calls, and the largest queue, once seen, stays.
///
/// `Sample.partial` is true until one whole pass over `queues` was made. Threading: one thread at a time (the
/// metrics server's serving thread); not locked.
public final class LargestQueues: @unchecked Sendable {
    public let limit: Int
    /// How many names of `queues` each call reads when not given a budget.
    public let namesPerCall: Int
    private var cursor = "0"
    private var candidates: [String] = []
    private var passed = false

    public init(limit: Int, namesPerCall: Int = QueueAdmin.largestNames) {
        self.limit = max(0, limit)
        self.namesPerCall = max(1, namesPerCall)
    }

    public func next(_ connection: RedisConnection, budget: ScanBudget? = nil,
                     now: Double = Clock.now()) throws(RedisError) -> QueueAdmin.Sample {
        let budget = budget ?? ScanBudget(maxEntries: namesPerCall)
        let read = try budget.members(of: Keys.queues, connection, from: &cursor)
        if cursor == "0" { passed = true }
        let total = Int(try connection.command("SCARD", Keys.queues).integer ?? 0)
        // The previous largest that are still queues (a name gone from `queues` loses its row).
        var kept: [String] = []
        if !candidates.isEmpty {
            let member = try connection.send(["SMISMEMBER", Keys.queues] + candidates.map { $0 as any RedisArgument }).checked().array ?? []
            kept = candidates.enumerated().filter { $0.offset < member.count && member[$0.offset].integer == 1 }.map(\.element)
        }
        let all = Array(Set(kept + read))
        var sizes: [Int] = []
        sizes.reserveCapacity(all.count)
        var start = 0
        while start < all.count {
            let chunk = all[start..<min(start + 1000, all.count)]
            sizes += try connection.pipeline(chunk.map { ["LLEN", Keys.queue($0)] }).map {
                Bounded.int($0.integer ?? 0, in: 0...Bounded.maxCounter)
            }
            start += 1000
        }
        let chosen = zip(all, sizes).sorted { $0.1 != $1.1 ? $0.1 > $1.1 : $0.0 < $1.0 }.prefix(limit).sorted { $0.0 < $1.0 }
        candidates = chosen.map(\.0)
        return QueueAdmin.Sample(queues: try QueueAdmin.summaries(connection, names: candidates, sizes: chosen.map(\.1), now: now),
                                 total: total, partial: !passed)
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
    /// Σ LLEN over the names of `queues` read (all of them unless `partial`: then a lower bound).
    public var enqueued: Int
    public var scheduled: Int
    public var retries: Int
    public var dead: Int
    public var processes: Int
    /// Σ `busy` over the members of `processes` read (all of them unless `partial`).
    public var busy: Int
    /// The queues read (`QueueAdmin.sample`: at most `QueueAdmin.sampleNames` per shard), sorted by name.
    public var queues: [QueueSummary]
    public var redis: RedisServerInfo
    /// `SCARD queues`: how many queue names there are, read or not.
    public var queueNames: Int = 0
    /// True when the budget stopped before every queue name or process was read (review M5): `enqueued` and
    /// `busy` are then sums over what was read, and a reader says "partial".
    public var partial: Bool = false

    /// How many members of `processes` `load` reads for `busy` by default.
    public static let sampleProcesses = 1_000

    /// One shard's stats in a bounded number of commands whatever a producer added (review M5): the queue names
    /// `queues` allows (`QueueAdmin.sample`), at most `processes` members of `processes` (`SSCAN`; `processes` itself
    /// is `SCARD`, as Ruby counts it), counters and set sizes.
    public static func load(_ connection: RedisConnection, now: Double = Clock.now(),
                            queues queueBudget: ScanBudget = ScanBudget(maxEntries: QueueAdmin.sampleNames),
                            processes processBudget: ScanBudget = ScanBudget(maxEntries: sampleProcesses)) throws(RedisError) -> Stats {
        let day = Clock.utcDay(now)
        let fast = try connection.pipeline([
            ["GET", Keys.statProcessed], ["GET", Keys.statFailed],
            ["GET", Keys.statProcessed(day: day)], ["GET", Keys.statFailed(day: day)],
            ["ZCARD", Keys.schedule], ["ZCARD", Keys.retry], ["ZCARD", Keys.dead],
            ["SCARD", Keys.processes], ["INFO"],
        ])
        for reply in fast { try reply.checked() }
        let members = try processBudget.members(of: Keys.processes, connection)
        let busyReplies = try connection.pipeline(members.map { ["HGET", Keys.process($0), "busy"] })
        let sample = try QueueAdmin.sample(connection, budget: queueBudget, now: now)
        // Paused names outside `queues` are listed but, as in Ruby, not counted as enqueued.
        let member = sample.queues.isEmpty ? []
            : try connection.send(["SMISMEMBER", Keys.queues] + sample.queues.map { $0.name as any RedisArgument }).checked().array ?? []
        // Counters anyone may have written (a Sidekiq client, a process hash): clamped, and their totals saturate.
        func int(_ reply: RedisReply) -> Int { Bounded.int(reply.integer ?? 0, in: 0...Bounded.maxCounter) }
        let enqueued = sample.queues.enumerated().reduce(0) { sum, entry in
            entry.offset < member.count && member[entry.offset].integer == 1 ? Bounded.sum(sum, entry.element.size) : sum
        }
        return Stats(
            processed: int(fast[0]), failed: int(fast[1]), day: day,
            processedToday: int(fast[2]), failedToday: int(fast[3]),
            enqueued: enqueued, scheduled: int(fast[4]), retries: int(fast[5]), dead: int(fast[6]),
            processes: int(fast[7]), busy: busyReplies.reduce(0) { Bounded.sum($0, int($1)) },
            queues: sample.queues, redis: RedisServerInfo(infoText: fast[8].string ?? ""),
            queueNames: sample.total, partial: sample.partial || processBudget.exhausted)
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
            sum.queueNames = Bounded.sum(sum.queueNames, part.queueNames)
            sum.partial = sum.partial || part.partial
        }
        return sum
    }
}
