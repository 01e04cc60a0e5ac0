import Foundation
import Queue

/// Finds and removes job payloads in our own Redis job state.
///
/// Scans the `schedule`, `retry` and `dead` sorted sets with `ZSCAN … MATCH` (the server filters on the
/// id's text, case-insensitively built), then parses each candidate with `JobPayload(parsing:)` and checks
/// that the id really occurs as a string anywhere inside `args` before removing it with `ZREM` of the exact
/// member bytes. Queues (`queue:*` lists) are scanned page by page and matches removed with `LREM`.
/// Thread-safe: borrows connections from the pool per call. Not atomic across keys: a job moving between
/// sets during a scan may be missed by one pass (a rerun catches it).
public struct RedisJobPurger: Sendable {
    public let pool: RedisPool
    public var pageSize = 500

    public init(pool: RedisPool) { self.pool = pool }

    /// What `purge` removed, per key.
    public struct Report: Sendable, Equatable {
        public var removedByKey: [String: Int] = [:]
        public var total: Int { removedByKey.values.reduce(0, +) }
    }

    /// Removes every scheduled, retry, dead and enqueued job whose `args` contain `userID` (any case).
    public func purge(userID: UUID) throws -> Report {
        let id = userID.uuidString.lowercased()
        let pattern = "*" + Self.caseInsensitiveGlob(id) + "*"
        var report = Report()
        try pool.withConnection { conn in
            for key in [Keys.schedule, Keys.retry, Keys.dead] {
                var removed = 0
                try scanSortedSet(conn, key: key, match: pattern) { member in
                    guard Self.arguments(of: member, contain: id) else { return }
                    removed += Int(try conn.command("ZREM", key, member).checked().integer ?? 0)
                }
                if removed > 0 { report.removedByKey[key] = removed }
            }
            for queue in try conn.command("SMEMBERS", Keys.queues).checked().strings {
                let key = Keys.queue(queue)
                var matches: [[UInt8]] = []
                try scanList(conn, key: key) { member in
                    if Self.arguments(of: member, contain: id) { matches.append(member) }
                }
                var removed = 0
                for member in matches {
                    removed += Int(try conn.command("LREM", key, 0, member).checked().integer ?? 0)
                }
                if removed > 0 { report.removedByKey[key] = removed }
            }
        }
        return report
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
        try pool.withConnection { conn in
            let pattern = "*" + AccountDeletionJob.className + "*"
            for key in [Keys.schedule, Keys.retry] {
                try scanSortedSet(conn, key: key, match: pattern, note)
            }
            var lists = try conn.command("SMEMBERS", Keys.queues).checked().strings.map(Keys.queue)
            var cursor = "0"
            repeat {
                let reply = try conn.command("SCAN", cursor, "MATCH", Keys.workingPattern, "COUNT", 500).checked()
                guard let parts = reply.array, parts.count == 2, let next = parts[0].string else { break }
                lists += parts[1].strings
                cursor = next
            } while cursor != "0"
            for key in Set(lists) { try scanList(conn, key: key, note) }
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

    /// True when `member` parses as a job payload whose `args` hold `id` (lowercase uuid) as a string value,
    /// at any depth, in any letter case.
    static func arguments(of member: [UInt8], contain id: String) -> Bool {
        guard let payload = try? JobPayload(parsing: member) else { return false }
        return payload.args.contains { contains($0, id) }
    }

    private static func contains(_ value: JSONValue, _ id: String) -> Bool {
        switch value {
        case .string(let s): return s.lowercased().contains(id)
        case .array(let items): return items.contains { contains($0, id) }
        case .object(let object): return object.contains { contains($0.value, id) }
        default: return false
        }
    }

    /// A Redis glob matching `text` in any letter case (`ab-1` → `[aA][bB]-1`). `text` holds no glob
    /// metacharacters (a uuid).
    static func caseInsensitiveGlob(_ text: String) -> String {
        text.map { ch in
            let lower = ch.lowercased(), upper = ch.uppercased()
            return lower == upper ? String(ch) : "[\(lower)\(upper)]"
        }.joined()
    }
}

public struct PurgeError: Error, CustomStringConvertible {
    public let reason: String
    public var description: String { "Redis purge: \(reason)" }
}
