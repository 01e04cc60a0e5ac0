import WorkersQueue

/// Which of some jids appear in no job container of Redis: any `queue:*` or `working:queue:*` list, `schedule`,
/// `retry` or `dead` (docs/outbox.md, "Cost of looking for a jid in Redis").
///
/// Redis has no index by jid, so every member is read — but never in one long call: containers are found with
/// `SCAN … COUNT 1000`, and each is read in pages of at most `pageSize` members, one short Lua call per page
/// (its cost is bounded by the page, whatever Redis holds). A search stops as soon as every wanted jid is found.
///
/// Not atomic: a job moving between containers during a pass (from one not yet read to one already read, or
/// within a list whose indices shift as jobs are pushed and popped) can be missed. `missing` therefore makes a
/// second, confirming pass for the jids the first one did not find; what can still slip through is in
/// docs/outbox.md. Every `"jid":"…"` in a member counts (one inside `args` too): a false "found" only leaves a
/// job alone. Stateless; the caller's thread owns the connection.
public enum JidSearch {
    /// Most members one Lua call reads.
    public static let pageSize = 1000

    /// The jids of `wanted` found in no container after two passes (the second only over those the first
    /// missed).
    public static func missing(_ wanted: Set<String>, in redis: RedisConnection) throws(RedisError) -> Set<String> {
        let afterFirst = try pass(wanted, in: redis)
        if afterFirst.isEmpty { return afterFirst }
        return try pass(afterFirst, in: redis)
    }

    /// One pass over every container: the jids of `wanted` it did not find.
    static func pass(_ wanted: Set<String>, in redis: RedisConnection) throws(RedisError) -> Set<String> {
        var missing = wanted
        var containers = try redis.scanKeys(matching: Keys.queuePattern).map { ($0, "list") }
        containers += try redis.scanKeys(matching: Keys.workingPattern).map { ($0, "list") }
        containers += [Keys.schedule, Keys.retry, Keys.dead].map { ($0, "zset") }
        for (key, kind) in containers {
            var first = 0
            while !missing.isEmpty {
                let arguments: [any RedisArgument] = [kind, first] + missing.map { $0 as any RedisArgument }
                let reply = try redis.evaluate(pageScript, keys: [key], arguments: arguments)
                guard let parts = reply.array, let length = parts.first?.integer else {
                    throw .unexpectedReply("jid page returned \(reply)")
                }
                for found in parts.dropFirst().compactMap(\.string) { missing.remove(found) }
                first += pageSize
                if first >= length { break }
            }
            if missing.isEmpty { break }
        }
        return missing
    }
}
