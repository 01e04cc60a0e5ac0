/// How many entries one operator read may look at, and until when (review M5): a dashboard GET over a queue of
/// millions reads at most `maxEntries` of them, then stops and says so, instead of loading the whole queue.
///
/// One budget is shared by every scan one request makes (a search over five states, a jid looked up in every
/// queue): each scan takes from what the previous ones left. `nil` where a budget is optional means unlimited (the
/// `workerctl` commands, which an operator runs on purpose and which stream).
///
/// Invariant: `scanned <= maxEntries`; once `remaining` is 0 no scan reads another entry. Threading: used by one
/// thread at a time (the request's, on a `WorkersClient` thread); not locked.
public final class ScanBudget: @unchecked Sendable {
    /// The dashboard's budget per shard and request: 10,000 entries.
    public static let webEntries = 10_000
    /// A `workerctl` read's budget per shard (`jobs ls`, `jobs show`; `jobs explain`'s default): 100,000 entries.
    public static let cliEntries = 100_000

    public let maxEntries: Int
    /// No scan reads past this instant (nil: no deadline).
    public let deadline: ContinuousClock.Instant?
    /// Entries read so far (list elements, set members; a `ZSCAN` step counts as its `COUNT`).
    public private(set) var scanned = 0
    /// True once a scan stopped with entries left unread because the budget or the deadline ran out.
    public private(set) var exhausted = false

    public init(maxEntries: Int, deadline: ContinuousClock.Instant? = nil) {
        self.maxEntries = max(0, maxEntries)
        self.deadline = deadline
    }

    public var isPastDeadline: Bool { deadline.map { ContinuousClock.now >= $0 } ?? false }

    /// How many more entries a scan may read now (0 when spent or past the deadline).
    public var remaining: Int { isPastDeadline ? 0 : maxEntries - scanned }

    /// Counts `count` entries read (never past `maxEntries`).
    public func consume(_ count: Int) { scanned = min(maxEntries, scanned + max(0, count)) }

    /// Records that a scan stopped early.
    public func stop() { exhausted = true }

    /// Runs `visit` (one queue of a search) and charges one entry if it read none (an empty queue still costs a
    /// round trip): a search over many empty queues stops at the budget like one over long queues.
    public func chargeVisit<E: Error>(_ visit: () throws(E) -> Void) throws(E) {
        let before = scanned
        try visit()
        if scanned == before { consume(1) }
    }
}

extension Optional where Wrapped == ScanBudget {
    /// `remaining` of a budget, `Int.max` without one.
    var remaining: Int { self?.remaining ?? Int.max }
}

extension ScanBudget {
    /// The most entries one `SSCAN`/`SCAN` step asks for (its `COUNT`).
    public static let scanStep = 1000

    /// Members of the set `key` (`queues`, `processes`, a batch's jid sets: sets any producer can grow), read by
    /// `SSCAN … COUNT` within what this budget has left: each step costs its `COUNT` (or the members it returned,
    /// if more), so a set of millions costs at most `remaining / scanStep + 1` round trips. Stops early, marking the
    /// budget `exhausted`, when the budget is spent before the cursor came back to 0. Members are returned once each,
    /// in no particular order. The step that ends the walk costs only what it returned.
    public func members(of key: String, _ connection: RedisConnection) throws(RedisError) -> [String] {
        var cursor = "0"
        return try members(of: key, connection, from: &cursor)
    }

    /// `members(of:_:)` continuing a walk at `cursor` (a rolling reader's: `LargestQueues`), leaving in `cursor`
    /// where this budget stopped it, or "0" once the walk came round.
    public func members(of key: String, _ connection: RedisConnection, from cursor: inout String) throws(RedisError) -> [String] {
        var seen: Set<String> = []
        var out: [String] = []
        try scan(connection, ["SSCAN", key], cursor: &cursor) { for member in $0 where seen.insert(member).inserted { out.append(member) } }
        return capped(out)
    }

    /// At most `maxEntries` of `found` (a step may return more than its `COUNT`); cutting marks the budget exhausted.
    private func capped(_ found: [String]) -> [String] {
        guard found.count > maxEntries else { return found }
        stop()
        return Array(found.prefix(maxEntries))
    }

    /// Keys matching `pattern` (the whole keyspace: `limit:*`, `unique:*`), read by `SCAN … MATCH … COUNT` within
    /// this budget as `members(of:_:)` reads a set: each step costs its `COUNT` keys looked at, matching or not.
    public func keys(matching pattern: String, _ connection: RedisConnection) throws(RedisError) -> [String] {
        var seen: Set<String> = []
        var out: [String] = []
        var cursor = "0"
        try scan(connection, ["SCAN"], match: pattern, cursor: &cursor) { for key in $0 where seen.insert(key).inserted { out.append(key) } }
        return capped(out)
    }

    /// One `SCAN`-family walk (`prefix` is the command and its key, the cursor follows) bounded by this budget.
    private func scan(_ connection: RedisConnection, _ prefix: [any RedisArgument], match: String? = nil,
                      cursor: inout String, _ body: ([String]) -> Void) throws(RedisError) {
        repeat {
            let step = Swift.min(Self.scanStep, remaining)
            if step <= 0 { stop(); return }
            var arguments = prefix + [cursor]
            if let match { arguments += ["MATCH", match] }
            arguments += ["COUNT", step]
            let reply = try connection.send(arguments).checked()
            guard let parts = reply.array, parts.count == 2, let next = parts[0].string else {
                throw .unexpectedReply("\(prefix.first.map { "\($0)" } ?? "SCAN") returned an unexpected reply")
            }
            let found = parts[1].strings
            // A step that ended the walk costs what it returned (a small set is cheap); any other its `COUNT`.
            consume(next == "0" ? found.count : Swift.max(step, found.count))
            body(found)
            cursor = next
        } while cursor != "0"
    }
}
