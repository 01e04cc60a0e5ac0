import Foundation

/// Removes the jobs a predicate selects wherever a job can sit in our Redis job state, and walks the places where a
/// job still waits to run. The runtime's reliability layout (in-flight lists, fetcher heartbeats, the Lua that removes
/// from a dead process's list) stays here in Queue; callers supply only the predicate (e.g. Privacy's erasure:
/// "its args name this person").
///
/// Places, in this order (a job moving between two of them during a pass is caught by the later one or by the next
/// pass):
/// 1. in-flight lists (`working:queue:<q>:<identity>`) of **dead** processes (fetcher heartbeat expired), which the
///    orphan sweep would otherwise put back into a queue; a live process's list is left alone (its jobs are running);
/// 2. the `schedule`, `retry` and `dead` sorted sets, scanned with `ZSCAN … MATCH` per prefilter glob;
/// 3. every queue (`queue:*` lists), page by page.
/// Each candidate is parsed with `JobPayload(parsing:)` and given to the predicate before it is removed by its exact
/// bytes (`ZREM`, `LREM`; in a dead process's list only while its heartbeat is still absent). A removed job releases
/// the unique lock it owns (docs/unique-jobs.md). With several Redis shards (docs/sharding.md) every step runs on every
/// shard, one after the other.
///
/// Thread rules: a value; borrows connections from the pools per call, so any thread may call. Not atomic across keys
/// (nor across shards).
package struct JobPurge: Sendable {
    /// One pool per shard (index 0 the default shard); one element without sharding.
    public let pools: [RedisPool]
    public var pageSize = 500

    public init(pools: [RedisPool]) { self.pools = pools }

    /// What `purge` removed, per key.
    public struct Report: Sendable, Equatable {
        public var removedByKey: [String: Int] = [:]
        public var total: Int { removedByKey.values.reduce(0, +) }
        public init() {}
    }

    /// Removes every job the predicate selects from dead processes' in-flight lists, the scheduled, retry and dead
    /// sets, and the queues. `prefilters` are `ZSCAN MATCH` globs that together match every member the predicate can
    /// select (`["*"]` when no narrower glob is safe).
    public func purge(prefilters: [String], where selects: (JobPayload) -> Bool) throws -> Report {
        var report = Report()
        func matches(_ member: [UInt8]) -> Bool { (try? JobPayload(parsing: member)).map(selects) ?? false }
        var removedJids: [String] = []
        func noteRemoved(_ key: String, _ member: [UInt8], _ count: Int) {
            guard count > 0 else { return }
            report.removedByKey[key, default: 0] += count
            if let jid = (try? JobPayload(parsing: member))?.jid { removedJids.append(jid) }
        }
        for pool in pools {
            removedJids = []  // a unique lock lives on its job's shard: released there
            try pool.withConnection { conn in
                // 1. In-flight lists of dead processes.
                for key in Set(try conn.scanKeys(matching: Keys.workingPattern)).sorted() {
                    guard let (_, identity) = Keys.parseWorking(key) else { continue }
                    let heartbeat = Keys.fetcherHeartbeat(identity: identity)
                    if try conn.command("EXISTS", heartbeat).checked().integer == 1 { continue }
                    var found: [[UInt8]] = []
                    try scanList(conn, key: key) { if matches($0) { found.append($0) } }
                    for member in found {
                        let removed = try conn.evaluate(AdminScripts.removeFromDeadWorkingList, keys: [key, heartbeat],
                                                        arguments: [member]).checked().integer ?? 0
                        noteRemoved(key, member, Int(max(0, removed)))
                    }
                }
                // 2. Scheduled, retrying and dead jobs.
                for key in [Keys.schedule, Keys.retry, Keys.dead] {
                    for pattern in prefilters {
                        var found: [[UInt8]] = []
                        try scanSortedSet(conn, key: key, match: pattern) { if matches($0) { found.append($0) } }
                        for member in found {
                            noteRemoved(key, member, Int(try conn.command("ZREM", key, member).checked().integer ?? 0))
                        }
                    }
                }
                // 3. Queues.
                for queue in try conn.command("SMEMBERS", Keys.queues).checked().strings {
                    let key = Keys.queue(queue)
                    var found: [[UInt8]] = []
                    try scanList(conn, key: key) { if matches($0) { found.append($0) } }
                    for member in found {
                        noteRemoved(key, member, Int(try conn.command("LREM", key, 0, member).checked().integer ?? 0))
                    }
                }
                try UniqueLocks.release(conn, jids: removedJids)
            }
        }
        return report
    }

    /// Every job still due to run — scheduled, waiting for a retry, enqueued, or in any in-flight list — whose raw
    /// bytes match the `ZSCAN` glob `prefilter` (sorted sets only; lists are read whole). Dead jobs are not visited.
    public func forEachPending(prefilter: String, _ body: (JobPayload) -> Void) throws {
        func visit(_ member: [UInt8]) { if let payload = try? JobPayload(parsing: member) { body(payload) } }
        for pool in pools {
            try pool.withConnection { conn in
                for key in [Keys.schedule, Keys.retry] { try scanSortedSet(conn, key: key, match: prefilter, visit) }
                var lists = try conn.command("SMEMBERS", Keys.queues).checked().strings.map(Keys.queue)
                lists += try conn.scanKeys(matching: Keys.workingPattern)
                for key in Set(lists) { try scanList(conn, key: key, visit) }
            }
        }
    }

    // MARK: - Scanning

    private func scanSortedSet(_ conn: RedisConnection, key: String, match: String,
                               _ body: ([UInt8]) throws -> Void) throws {
        var cursor = "0"
        repeat {
            let reply = try conn.command("ZSCAN", key, cursor, "MATCH", match, "COUNT", pageSize).checked()
            guard let parts = reply.array, parts.count == 2, let next = parts[0].string, let flat = parts[1].array else {
                throw PurgeError(reason: "unexpected ZSCAN reply for \(key)")
            }
            // [member, score, member, score, …]
            var index = 0
            while index < flat.count {
                if let member = flat[index].bytes { try body(member) }
                index += 2
            }
            cursor = next
        } while cursor != "0"
    }

    /// Pages through a list with LRANGE. A list that changes meanwhile may shift items across pages: an
    /// item can be seen twice (harmless) or skipped by one pass.
    private func scanList(_ conn: RedisConnection, key: String, _ body: ([UInt8]) throws -> Void) throws {
        var start = 0
        while true {
            let page = try conn.command("LRANGE", key, start, start + pageSize - 1).checked().array ?? []
            for item in page { if let bytes = item.bytes { try body(bytes) } }
            if page.count < pageSize { break }
            start += pageSize
        }
    }
}

package struct PurgeError: Error, CustomStringConvertible {
    public let reason: String
    public var description: String { "Redis purge: \(reason)" }
}
