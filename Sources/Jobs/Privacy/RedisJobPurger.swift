import Foundation
import Queue

/// Finds and removes job payloads that name one person, wherever a job can sit in our Redis job state.
///
/// A job names the person when a string anywhere in its `args` (any depth) contains the user id or, when
/// given, the e-mail address, in any letter case (a mail job may carry only the address, e.g.
/// `"Alice <ALICE@example.org>"`). Places, in this order (a job moving between two of them during a pass
/// is caught by the later one or by the next pass):
/// 1. in-flight lists (`working:queue:<q>:<identity>`) of **dead** processes (fetcher heartbeat expired),
///    which the orphan sweep would otherwise put back into a queue; a live process's list is left alone
///    (its jobs are running: see docs/jobs-privacy.md);
/// 2. the `schedule`, `retry` and `dead` sorted sets, scanned with `ZSCAN … MATCH` (a case-insensitive glob
///    of each needle prefilters on the server; an address JSON might escape is scanned without the filter);
/// 3. every queue (`queue:*` lists), page by page.
/// Each candidate is parsed with `JobPayload(parsing:)` and checked before it is removed by its exact bytes
/// (`ZREM`, `LREM`; in a dead process's list only while its heartbeat is still absent).
/// With several Redis shards (docs/sharding.md) every step runs on every shard, one after the other: a user's
/// jobs may sit in any queue, so on any shard.
/// Thread-safe: borrows connections from the pools per call. Not atomic across keys (nor across shards).
public struct RedisJobPurger: Sendable {
    /// One pool per shard (index 0 the default shard); one element without sharding.
    public let pools: [RedisPool]
    public var pool: RedisPool { pools[0] }
    public var pageSize = 500

    public init(pool: RedisPool) { self.pools = [pool] }

    /// Purges on every shard of `shards`.
    public init(shards: ShardPools) { self.pools = shards.pools }

    /// What `purge` removed, per key.
    public struct Report: Sendable, Equatable {
        public var removedByKey: [String: Int] = [:]
        public var total: Int { removedByKey.values.reduce(0, +) }
    }

    /// KEYS[1] working list, KEYS[2] its process's fetcher heartbeat; ARGV[1] member. Removes the member
    /// only while the process is still dead (-1 when its heartbeat came back).
    static let removeFromDeadWorkingList = RedisScript("""
        if redis.call('EXISTS', KEYS[2]) == 1 then return -1 end
        return redis.call('LREM', KEYS[1], 0, ARGV[1])
        """)

    /// Removes every job of a dead process's in-flight list, the scheduled, retry and dead sets, and the
    /// queues whose `args` contain `userID` or `email` (any case).
    public func purge(userID: UUID, email: String? = nil) throws -> Report {
        let needles = Self.needles(userID: userID, email: email)
        let matches: ([UInt8]) -> Bool = { Self.arguments(of: $0, containAnyOf: needles) }
        var report = Report()
        func note(_ key: String, _ removed: Int) { if removed > 0 { report.removedByKey[key, default: 0] += removed } }
        /// Jids of removed jobs: a removed job releases the unique lock it owns (docs/unique-jobs.md).
        var removedJids: [String] = []
        func noteRemoved(_ key: String, _ member: [UInt8], _ count: Int) {
            note(key, count)
            if count > 0, let jid = (try? JobPayload(parsing: member))?.jid { removedJids.append(jid) }
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
                    let removed = try conn.evaluate(Self.removeFromDeadWorkingList, keys: [key, heartbeat],
                                                    arguments: [member]).checked().integer ?? 0
                    noteRemoved(key, member, Int(max(0, removed)))
                }
            }
            // 2. Scheduled, retrying and dead jobs.
            let patterns = Self.matchPatterns(for: needles)
            for key in [Keys.schedule, Keys.retry, Keys.dead] {
                for pattern in patterns {
                    var found: [[UInt8]] = []
                    try scanSortedSet(conn, key: key, match: pattern) { if matches($0) { found.append($0) } }
                    for member in found { noteRemoved(key, member, Int(try conn.command("ZREM", key, member).checked().integer ?? 0)) }
                }
            }
            // 3. Queues.
            for queue in try conn.command("SMEMBERS", Keys.queues).checked().strings {
                let key = Keys.queue(queue)
                var found: [[UInt8]] = []
                try scanList(conn, key: key) { if matches($0) { found.append($0) } }
                for member in found { noteRemoved(key, member, Int(try conn.command("LREM", key, 0, member).checked().integer ?? 0)) }
            }
            try UniqueLocks.release(conn, jids: removedJids)
          }
        }
        return report
    }

    /// ZSCAN patterns that together prefilter every member holding one of `needles`: one case-insensitive
    /// glob per needle, or the single pattern `*` when a needle holds a character JSON may write escaped
    /// (non-ASCII, `"`, `\`, `/`, control characters), so the text in Redis may not equal the needle.
    static func matchPatterns(for needles: [String]) -> [String] {
        let escapable = needles.contains { needle in
            needle.unicodeScalars.contains { !$0.isASCII || $0.value < 0x20 || "\"\\/".unicodeScalars.contains($0) }
        }
        if escapable { return ["*"] }
        return needles.map { "*" + caseInsensitiveGlob($0) + "*" }
    }

    /// `request_id`s (lowercased) of `AccountDeletionJob`s that are scheduled, waiting for a retry,
    /// enqueued, or running (in a working list). Dead jobs do not count as pending.
    public func pendingDeletionRequestIDs() throws -> Set<String> {
        var ids: Set<String> = []
        func note(_ member: [UInt8]) {
            guard let payload = try? JobPayload(parsing: member), payload.className == AccountDeletionJob.className,
                  let request = payload.args.first?.objectValue?["request_id"]?.stringValue else { return }
            ids.insert(request.lowercased())
        }
        for pool in pools {
          try pool.withConnection { conn in
            let pattern = "*" + AccountDeletionJob.className + "*"
            for key in [Keys.schedule, Keys.retry] {
                try scanSortedSet(conn, key: key, match: pattern, note)
            }
            var lists = try conn.command("SMEMBERS", Keys.queues).checked().strings.map(Keys.queue)
            lists += try conn.scanKeys(matching: Keys.workingPattern)
            for key in Set(lists) { try scanList(conn, key: key, note) }
          }
        }
        return ids
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

    // MARK: - Matching

    /// What names the person (lowercase): the user id, and the address when given. `OutboxJobPurger` looks for
    /// the same needles in `job_outbox`, so both places agree on which jobs name the user.
    static func needles(userID: UUID, email: String?) -> [String] {
        var needles = [userID.uuidString.lowercased()]
        if let email = email?.trimmingCharacters(in: .whitespacesAndNewlines).lowercased(), !email.isEmpty {
            needles.append(email)
        }
        return needles
    }

    /// True when `member` parses as a job payload whose `args` hold `id` (lowercase uuid) as a string value,
    /// at any depth, in any letter case.
    static func arguments(of member: [UInt8], contain id: String) -> Bool {
        arguments(of: member, containAnyOf: [id])
    }

    /// True when `member` parses as a job payload with a string in `args`, at any depth, that contains one
    /// of `needles` (lowercase) in any letter case, as a whole token: the characters around it are not
    /// letters, digits or `. _ % + -`, so `bob@example.org` does not match `jimbob@example.org`.
    static func arguments(of member: [UInt8], containAnyOf needles: [String]) -> Bool {
        guard let payload = try? JobPayload(parsing: member) else { return false }
        return arguments(payload.args, containAnyOf: needles)
    }

    /// The same test on parsed `args`.
    static func arguments(_ args: [JSONValue], containAnyOf needles: [String]) -> Bool {
        args.contains { contains($0, needles) }
    }

    private static func contains(_ value: JSONValue, _ needles: [String]) -> Bool {
        switch value {
        case .string(let s):
            let lowered = s.lowercased()
            return needles.contains { containsToken(lowered, $0) }
        case .array(let items): return items.contains { contains($0, needles) }
        case .object(let object): return object.contains { contains($0.value, needles) }
        default: return false
        }
    }

    static func containsToken(_ text: String, _ needle: String) -> Bool {
        func isTokenCharacter(_ ch: Character) -> Bool { ch.isLetter || ch.isNumber || "._%+-".contains(ch) }
        var searchRange = text.startIndex..<text.endIndex
        while let found = text.range(of: needle, range: searchRange) {
            let clearBefore = found.lowerBound == text.startIndex || !isTokenCharacter(text[text.index(before: found.lowerBound)])
            let clearAfter = found.upperBound == text.endIndex || !isTokenCharacter(text[found.upperBound])
            if clearBefore && clearAfter { return true }
            searchRange = text.index(after: found.lowerBound)..<text.endIndex
        }
        return false
    }

    /// A Redis glob matching `text` in any letter case (`ab-1` → `[aA][bB]-1`); the glob metacharacters
    /// `* ? [ ] \` are escaped with a backslash.
    static func caseInsensitiveGlob(_ text: String) -> String {
        text.map { ch in
            if "*?[]\\".contains(ch) { return "\\" + String(ch) }
            let lower = ch.lowercased(), upper = ch.uppercased()
            return lower == upper ? String(ch) : "[\(lower)\(upper)]"
        }.joined()
    }
}

public struct PurgeError: Error, CustomStringConvertible {
    public let reason: String
    public var description: String { "Redis purge: \(reason)" }
}
