import Foundation

/// A batch as `workerctl batches ls|show` shows it (docs/batches.md).
public struct BatchSummary: Sendable, Equatable {
    public var bid: String
    public var description: String
    public var createdAt: Double
    public var total: Int
    /// Jobs not yet succeeded (dead ones stay pending, as in Sidekiq Pro).
    public var pending: Int
    /// Jobs that failed at least once and have not succeeded.
    public var failures: Int
    /// Jobs finished without success (dead set, or dropped with `retry: false`).
    public var dead: Int
    /// When the `complete` / `success` event fired (nil: not yet).
    public var completeAt: Double?
    public var successAt: Double?
    public var onComplete: String?
    public var onSuccess: String?

    /// `success`, `complete` (all finished, some without success) or `running`.
    public var state: String { successAt != nil ? "success" : completeAt != nil ? "complete" : "running" }
}

/// A batch in detail: the summary plus the jids that failed and died (all of them, or the first `limit` of each read
/// by `detail(_:bid:limit:)`; `failedCount` and `deadCount` are the sets' sizes either way).
public struct BatchDetail: Sendable, Equatable {
    public var summary: BatchSummary
    public var failedJids: [String]
    public var deadJids: [String]
    public var failedCount = 0
    public var deadCount = 0

    /// True when some jids were left unread.
    public var isPartial: Bool { failedJids.count < failedCount || deadJids.count < deadCount }
}

/// Reads batches (the `b-BID*` keys and the `batches` ZSET written by `BatchScripts`). Read-only.
public enum BatchAdmin {
    /// The newest `limit` batches, newest first. Batches whose keys expired are left out (and their
    /// `batches` entries removed).
    public static func list(_ connection: RedisConnection, limit: Int = 100) throws(RedisError) -> [BatchSummary] {
        let bids = try connection.command("ZREVRANGE", Keys.batches, 0, max(limit, 1) - 1).strings
        var out: [BatchSummary] = []
        var expired: [String] = []
        for bid in bids {
            if let summary = try summary(connection, bid: bid) { out.append(summary) } else { expired.append(bid) }
        }
        if !expired.isEmpty { try connection.send(["ZREM", Keys.batches] + expired).checked() }
        return out
    }

    /// One batch, or nil if it does not exist (never created, or expired).
    public static func summary(_ connection: RedisConnection, bid: String) throws(RedisError) -> BatchSummary? {
        let replies = try connection.pipeline([
            ["HMGET", Keys.batch(bid), "total", "pending", "dead", "created_at", "description", "complete_at", "success_at",
             "cb_complete_head", "cb_success_head"],
            ["SCARD", Keys.batch(bid) + "-failed"],
        ])
        let fields = try replies[0].checked().array ?? []
        guard fields.count == 9, let total = fields[0].string.flatMap({ Int($0) }) else { return nil }
        return BatchSummary(bid: bid, description: fields[4].string ?? "",
                            createdAt: fields[3].string.flatMap { Double($0) } ?? 0,
                            total: total, pending: fields[1].string.flatMap { Int($0) } ?? 0,
                            failures: Int(try replies[1].checked().integer ?? 0),
                            dead: fields[2].string.flatMap { Int($0) } ?? 0,
                            completeAt: fields[5].string.flatMap { Double($0) },
                            successAt: fields[6].string.flatMap { Double($0) },
                            onComplete: fields[7].string.flatMap(callbackClass),
                            onSuccess: fields[8].string.flatMap(callbackClass))
    }

    /// The batch and its failed and dead jids: every one without a `limit`; with one, at most `limit` of each set
    /// (`SSCAN`, review M5: a batch of a million failed jobs is read in a bounded number of commands), the sets'
    /// sizes still exact (`SCARD`).
    public static func detail(_ connection: RedisConnection, bid: String, limit: Int? = nil) throws(RedisError) -> BatchDetail? {
        guard let summary = try summary(connection, bid: bid) else { return nil }
        let failed = Keys.batch(bid) + "-failed", died = Keys.batch(bid) + "-died"
        let sizes = try connection.pipeline([["SCARD", failed], ["SCARD", died]])
        let failedCount = Bounded.int(try sizes[0].checked().integer ?? 0, in: 0...Bounded.maxCounter)
        let deadCount = Bounded.int(try sizes[1].checked().integer ?? 0, in: 0...Bounded.maxCounter)
        var detail = BatchDetail(summary: summary, failedJids: [], deadJids: [], failedCount: failedCount, deadCount: deadCount)
        if let limit {
            detail.failedJids = Array(try ScanBudget(maxEntries: limit).members(of: failed, connection).sorted().prefix(limit))
            detail.deadJids = Array(try ScanBudget(maxEntries: limit).members(of: died, connection).sorted().prefix(limit))
        } else {
            let replies = try connection.pipeline([["SMEMBERS", failed], ["SMEMBERS", died]])
            detail.failedJids = try replies[0].checked().strings.sorted()
            detail.deadJids = try replies[1].checked().strings.sorted()
        }
        return detail
    }

    /// `detail`, throwing `AdminError.batchNotFound` when this Redis has no such batch (with several
    /// shards: look on the next one, `AdminError.isNotFound`).
    public static func existing(_ connection: RedisConnection, bid: String, limit: Int? = nil) throws -> BatchDetail {
        guard let detail = try detail(connection, bid: bid, limit: limit) else { throw AdminError.batchNotFound(bid: bid) }
        return detail
    }

    /// The newest `limit` batches of several shards together, newest first (ties: shard order, then
    /// each shard's order). `perShard` is each shard's `list(_:limit:)` with the same `limit`, so the
    /// newest `limit` overall are among them.
    public static func newest(_ perShard: [OnShard<[BatchSummary]>], limit: Int) -> [OnShard<BatchSummary>] {
        let all = perShard.flatMap { list in list.value.map { OnShard(shard: list.shard, value: $0) } }
        let ranked = all.enumerated().sorted { lhs, rhs in
            lhs.element.value.createdAt != rhs.element.value.createdAt
                ? lhs.element.value.createdAt > rhs.element.value.createdAt : lhs.offset < rhs.offset
        }
        return ranked.prefix(max(limit, 0)).map { $0.element }
    }

    /// The class name in a callback payload head (`{"retry":…,"class":"X","args":[`).
    static func callbackClass(_ head: String) -> String? {
        guard let range = head.range(of: "\"class\":\"") else { return nil }
        let rest = head[range.upperBound...]
        return rest.firstIndex(of: "\"").map { String(rest[..<$0]) }
    }
}
