import Foundation

/// One of Sidekiq's sorted sets of jobs (`schedule`, `retry`, `dead`), read the way Ruby's
/// `JobSet` reads it (wire doc §7): listings go from the **highest score down**, lookups by jid
/// use `ZSCAN MATCH *jid*` and then check the parsed jid.
public struct SortedJobSet: Sendable {
    public let state: JobState
    public let key: String

    /// `state` must be `scheduled`, `retry` or `dead`.
    public init(_ state: JobState) {
        precondition(state.setKey != nil, "\(state) is not a sorted set")
        self.state = state
        self.key = state.setKey!
    }

    static let chunk = 500

    public func size(_ connection: RedisConnection) throws(RedisError) -> Int {
        Int(try connection.command("ZCARD", key).integer ?? 0)
    }

    /// One page, highest score first. Without a filter only the page is read (`ZREVRANGE`);
    /// with one, the set is read in chunks to count the matches — all of it, or as much as `budget` allows.
    public func page(_ connection: RedisConnection, filter: JobFilter = JobFilter(),
                     page: PageRequest, budget: ScanBudget? = nil) throws(RedisError) -> Page<JobRecord> {
        if filter.isEmpty {
            let total = try size(connection)
            let items = try range(connection, start: page.offset, stop: page.lastIndex)
            return Page(items: items, request: page, total: total)
        }
        let available = try size(connection)
        return try Page.filtered(page, filter: filter, available: available) { (body) throws(RedisError) in
            try forEachDescending(connection, budget: budget, body)
        }
    }

    /// Every matching entry, highest score first (read in chunks of 500).
    public func all(_ connection: RedisConnection, filter: JobFilter = JobFilter()) throws(RedisError) -> [JobRecord] {
        var out: [JobRecord] = []
        try forEachDescending(connection) { if filter.matches($0) { out.append($0) } }
        return out
    }

    /// The `limit` entries with the highest scores.
    public func latest(_ connection: RedisConnection, limit: Int) throws(RedisError) -> [JobRecord] {
        limit <= 0 ? [] : try range(connection, start: 0, stop: limit - 1)
    }

    /// Entries by descending rank `start...stop`.
    func range(_ connection: RedisConnection, start: Int, stop: Int) throws(RedisError) -> [JobRecord] {
        let reply = try connection.command("ZREVRANGE", key, start, stop, "WITHSCORES")
        return Self.records(state: state, pairs: reply.array ?? [])
    }

    /// Walks the set from the highest score down. Entries added or removed meanwhile may be
    /// skipped or seen twice (as with Ruby's `JobSet#each`).
    /// Reads at most what `budget` has left (all without one), then stops and marks it exhausted.
    func forEachDescending(_ connection: RedisConnection, budget: ScanBudget? = nil,
                           _ body: (JobRecord) -> Void) throws(RedisError) {
        var start = 0
        while true {
            let allowed = min(Self.chunk, budget.remaining)
            if allowed <= 0 { budget?.stop(); return }
            let records = try range(connection, start: start, stop: start + allowed - 1)
            budget?.consume(records.count)
            records.forEach(body)
            if records.count < allowed { return }
            start += allowed
        }
    }

    /// Walks the set from the lowest score up, in pages of at most `pageSize` entries, so memory
    /// stays bounded however large the set is. Only entries up to the highest score present when
    /// the walk starts are visited (jobs added later with a higher score are not).
    ///
    /// The cursor is the last entry of the previous page (score and member); each page is one
    /// script (`AdminScripts.pageAfter`) that finds the cursor's position in Redis' order at that
    /// moment and reads what follows it. So `body` may remove entries of its page, and anyone may add
    /// or remove entries meanwhile: an entry present from the start of the walk to its end is visited
    /// exactly once, an entry added behind the cursor is not visited, one removed before the cursor
    /// reaches it is not visited.
    public func forEachPageAscending(_ connection: RedisConnection, pageSize: Int,
                                     _ body: ([JobRecord]) throws -> Void) throws {
        precondition(pageSize > 0, "pageSize must be positive")
        let top = try connection.command("ZREVRANGE", key, 0, 0, "WITHSCORES").array ?? []
        guard top.count == 2, let highest = top[1].string else { return }
        var cursor: [any RedisArgument] = []
        while true {
            let pairs = try connection.evaluate(AdminScripts.pageAfter, keys: [key],
                                                arguments: [highest, pageSize] + cursor).array ?? []
            guard pairs.count >= 2, let lastScore = pairs[pairs.count - 1].string,
                  let lastMember = pairs[pairs.count - 2].bytes else { return }
            try body(Self.records(state: state, pairs: pairs))
            if pairs.count / 2 < pageSize { return }
            cursor = [lastScore, lastMember]
        }
    }

    /// Every entry whose parsed `jid` is `jid` (normally zero or one): `ZSCAN key 0 MATCH *jid*
    /// COUNT 1000` until the cursor comes back to 0, like Ruby's `find_job`. With a `budget`, each step counts
    /// as the entries it examines (at most 1000) and the scan stops when the budget runs out.
    public func find(_ connection: RedisConnection, jid: String, budget: ScanBudget? = nil) throws(RedisError) -> [JobRecord] {
        var cursor = "0"
        var found: [JobRecord] = []
        var seen = Set<[UInt8]>()
        var left = try budget == nil ? 0 : size(connection)
        repeat {
            if let budget {
                if budget.remaining <= 0 { budget.stop(); return found }
                let step = min(1000, max(1, left))
                budget.consume(step)
                left -= step
            }
            let reply = try connection.command("ZSCAN", key, cursor, "MATCH", "*\(jid)*", "COUNT", 1000)
            guard let parts = reply.array, parts.count == 2, let next = parts[0].string else {
                throw .unexpectedReply("ZSCAN returned \(reply)")
            }
            cursor = next
            for record in Self.records(state: state, pairs: parts[1].array ?? []) where record.jid == jid {
                if seen.insert(record.raw).inserted { found.append(record) }
            }
        } while cursor != "0"
        return found
    }

    static func records(state: JobState, pairs: [RedisReply]) -> [JobRecord] {
        var out: [JobRecord] = []
        out.reserveCapacity(pairs.count / 2)
        var index = 0
        while index + 1 < pairs.count {
            if let raw = pairs[index].bytes {
                out.append(JobRecord(state: state, raw: raw, score: pairs[index + 1].double))
            }
            index += 2
        }
        return out
    }
}

/// One `queue:NAME` list, read like Ruby's `Sidekiq::Queue` (§7): newest job first (the head),
/// latency from the oldest (the tail).
public struct JobQueue: Sendable {
    public let name: String
    public var key: String { Keys.queue(name) }

    public init(_ name: String) { self.name = name }

    static let chunk = 500

    public func size(_ connection: RedisConnection) throws(RedisError) -> Int {
        Int(try connection.command("LLEN", key).integer ?? 0)
    }

    /// Seconds since the oldest job was enqueued: `now − enqueued_at` (else `created_at`) of
    /// `LRANGE queue:X -1 -1`, either timestamp unit; 0 if the queue is empty or that job has neither
    /// (Ruby's `Queue#latency`; the `created_at` fallback is Sidekiq 8's `calculate_latency`).
    public func latency(_ connection: RedisConnection, now: Double = Clock.now()) throws(RedisError) -> Double {
        let reply = try connection.command("LRANGE", key, -1, -1)
        return Self.latency(tail: reply.array?.first?.bytes, now: now)
    }

    /// `knownLatency`, with an unknown latency read as 0.
    static func latency(tail: [UInt8]?, now: Double) -> Double {
        knownLatency(tail: tail, now: now) ?? 0
    }

    /// The latency of a queue whose oldest entry is `tail`: 0 when it is empty, not a job or has no time (as
    /// Ruby); nil (unknown) when its time is not a time (`Bounded.epochSeconds`: `"enqueued_at":-1e300`, `1e300`,
    /// after 9999). Otherwise at most `now`, finite, never negative.
    static func knownLatency(tail: [UInt8]?, now: Double) -> Double? {
        guard let tail, let text = UTF8Text.validated(tail),
              let job = (try? JSONValue.parse(text))?.objectValue,
              let stamp = TimestampUnit.seconds(job["enqueued_at"]) ?? TimestampUnit.seconds(job["created_at"])
        else { return 0 }
        guard let enqueuedAt = Bounded.epochSeconds(stamp), now.isFinite else { return nil }
        return max(0, now - enqueuedAt)
    }

    /// One page, newest first. Without a filter (but the queue) only the page is read; with one, the list is
    /// read in chunks to count the matches — all of it, or as much as `budget` allows.
    public func page(_ connection: RedisConnection, filter: JobFilter = JobFilter(),
                     page: PageRequest, budget: ScanBudget? = nil) throws(RedisError) -> Page<JobRecord> {
        if filter.isEmpty || filter == JobFilter(queue: name) {
            let total = try size(connection)
            let items = try range(connection, start: page.offset, stop: page.lastIndex)
            return Page(items: items, request: page, total: total)
        }
        let available = try size(connection)
        return try Page.filtered(page, filter: filter, available: available) { (body) throws(RedisError) in
            try forEach(connection, budget: budget, body)
        }
    }

    public func all(_ connection: RedisConnection, filter: JobFilter = JobFilter()) throws(RedisError) -> [JobRecord] {
        var out: [JobRecord] = []
        try forEach(connection) { if filter.matches($0) { out.append($0) } }
        return out
    }

    func range(_ connection: RedisConnection, start: Int, stop: Int) throws(RedisError) -> [JobRecord] {
        let reply = try connection.command("LRANGE", key, start, stop)
        return (reply.array ?? []).compactMap { $0.bytes.map { JobRecord(state: .enqueued, raw: $0, listQueue: name) } }
    }

    /// Head (newest) to tail, in chunks of 500; at most what `budget` has left (all without one), then stops and
    /// marks it exhausted.
    func forEach(_ connection: RedisConnection, budget: ScanBudget? = nil, _ body: (JobRecord) -> Void) throws(RedisError) {
        var start = 0
        while true {
            let allowed = min(Self.chunk, budget.remaining)
            if allowed <= 0 { budget?.stop(); return }
            let records = try range(connection, start: start, stop: start + allowed - 1)
            budget?.consume(records.count)
            records.forEach(body)
            if records.count < allowed { return }
            start += allowed
        }
    }

    /// A linear scan for `jid` (Ruby's `Queue#find_job`); only entries whose bytes contain the
    /// jid are parsed. With a `budget`, at most what it has left is read.
    public func find(_ connection: RedisConnection, jid: String, budget: ScanBudget? = nil) throws(RedisError) -> [JobRecord] {
        let needle = Array(jid.utf8)
        var found: [JobRecord] = []
        var start = 0
        while true {
            let allowed = min(Self.chunk, budget.remaining)
            if allowed <= 0 { budget?.stop(); return found }
            let reply = try connection.command("LRANGE", key, start, start + allowed - 1)
            let items = reply.array ?? []
            budget?.consume(items.count)
            for item in items {
                guard let raw = item.bytes, ByteSearch.contains(raw, needle) else { continue }
                let record = JobRecord(state: .enqueued, raw: raw, listQueue: name)
                if record.jid == jid { found.append(record) }
            }
            if items.count < allowed { return found }
            start += allowed
        }
    }
}

/// The jobs live processes are running, from their `IDENTITY:workers` hashes (Sidekiq 6, and ours), else
/// their `IDENTITY:work` hashes (Sidekiq 7/8), like Ruby's `Sidekiq::Workers` (§10.4): members of
/// `processes` whose `IDENTITY` hash is gone are skipped.
public enum WorkSet {
    /// Busy jobs sorted by start time (oldest first), then identity and thread. With a `budget`, only the members of
    /// `processes` it allows are read (`SSCAN`, one entry each; `budget.exhausted` when some were left); without one,
    /// every member.
    public static func all(_ connection: RedisConnection, budget: ScanBudget? = nil) throws(RedisError) -> [JobRecord] {
        let members: [String]
        if let budget { members = try budget.members(of: Keys.processes, connection).sorted() } else {
            members = try connection.command("SMEMBERS", Keys.processes).strings.sorted()
        }
        if members.isEmpty { return [] }
        let exists = try connection.pipeline(members.map { ["EXISTS", Keys.process($0)] })
        let live = zip(members, exists).filter { $0.1.integer == 1 }.map(\.0)
        if live.isEmpty { return [] }
        let hashes = try connection.pipeline(live.flatMap { [["HGETALL", Keys.workers($0)], ["HGETALL", Keys.work($0)]] })
        var out: [JobRecord] = []
        for (position, identity) in live.enumerated() {
            let sixFields = hashes[2 * position].array ?? []
            let fields = sixFields.isEmpty ? hashes[2 * position + 1].array ?? [] : sixFields
            var index = 0
            while index + 1 < fields.count {
                defer { index += 2 }
                guard let thread = fields[index].string, let text = fields[index + 1].string,
                      let work = (try? JSONValue.parse(text))?.objectValue else { continue }
                // 6.4.1 stores the payload as a JSON string; a plain object is accepted too.
                let raw: [UInt8]
                switch work["payload"] {
                case .string(let payload)?: raw = Array(payload.utf8)
                case .object(let object)?: raw = Array(JSONValue.object(object).serialized().utf8)
                default: continue
                }
                let busy = BusyWork(identity: identity, thread: thread, runAt: work["run_at"]?.doubleValue ?? 0)
                out.append(JobRecord(state: .busy, raw: raw, listQueue: work["queue"]?.stringValue, work: busy))
            }
        }
        return out.sorted {
            ($0.work!.runAt, $0.work!.identity, $0.work!.thread) < ($1.work!.runAt, $1.work!.identity, $1.work!.thread)
        }
    }
}
