import Foundation
import Queue
import Storage

/// Erasures, written where a PostgreSQL backup does not reach (issue 50 point 4, docs/jobs-privacy.md "Restoring a
/// backup"): every shard's Redis keeps a sorted set `subject-keys:erasures` of the persons (and requests) whose data
/// keys an erasure deleted, scored by when. After PostgreSQL is restored from a backup taken at time T, the restored
/// `subject_keys` holds the keys of everyone erased since T again; `recover(since: T)` deletes them again (and records
/// the persons in `subject_key_erasures`) before any worker serves, so the erased persons' jobs die `SubjectErased`,
/// and hands back the deletion requests to run again (their anonymisation was rolled back with the rest).
///
/// Members are `person:<users.id>|request:<deletion request id>`: pseudonymous ids that the anonymised account row
/// keeps anyway, no address. Entries older than `retention` are trimmed at each record: keep it longer than the
/// oldest backup you may restore. Thread rules: a value; any thread.
public struct SubjectKeyErasureJournal: Sendable {
    /// The sorted set on every shard.
    public static let key = "subject-keys:erasures"
    /// How long entries are kept by default: 400 days (backups kept a year, and a margin).
    public static let defaultRetention: Duration = .seconds(400 * 86_400)

    public let pools: [RedisPool]
    public let retention: Duration

    public init(pools: [RedisPool], retention: Duration = defaultRetention) {
        self.pools = pools
        self.retention = retention
    }

    /// One journaled erasure.
    public struct Entry: Sendable, Equatable {
        public let personID: UUID
        public let requestID: UUID
        public let erasedAt: Date
    }

    /// Records that `personID`'s keys were erased for `requestID`, on every shard (again on a later run: the member is
    /// the same, its time the first one's). Call after the erasure committed.
    public func record(personID: UUID, requestID: UUID, at time: Date = Date()) throws {
        let member = "person:\(personID.uuidString.lowercased())|request:\(requestID.uuidString.lowercased())"
        let seconds = time.timeIntervalSince1970
        let horizon = seconds - Double(retention.components.seconds)
        for pool in pools {
            try pool.withConnection { connection in
                for reply in try connection.pipeline([
                    ["ZADD", Self.key, "NX", seconds, member],
                    ["ZREMRANGEBYSCORE", Self.key, "-inf", "(\(horizon)"],
                ]) { try reply.checked() }
            }
        }
    }

    /// Every erasure journaled at or after `since`, on any shard (each once), oldest first. Unreadable members (not
    /// written by `record`) are skipped.
    public func entries(since: Date) throws -> [Entry] {
        var found: [String: Entry] = [:]
        for pool in pools {
            let reply = try pool.withConnection { try $0.command("ZRANGEBYSCORE", Self.key, since.timeIntervalSince1970, "+inf", "WITHSCORES") }
            let parts = reply.array ?? []
            for index in stride(from: 0, to: parts.count - 1, by: 2) {
                guard let member = parts[index].string, let score = parts[index + 1].double, score.isFinite,
                      let entry = Self.entry(member, score: score) else { continue }
                if let known = found[member], known.erasedAt <= entry.erasedAt { continue }
                found[member] = entry
            }
        }
        return found.values.sorted { ($0.erasedAt, $0.personID.uuidString) < ($1.erasedAt, $1.personID.uuidString) }
    }

    static func entry(_ member: String, score: Double) -> Entry? {
        let fields = member.split(separator: "|")
        guard fields.count == 2, fields[0].hasPrefix("person:"), fields[1].hasPrefix("request:"),
              let person = UUID(uuidString: String(fields[0].dropFirst("person:".count))),
              let request = UUID(uuidString: String(fields[1].dropFirst("request:".count))) else { return nil }
        return Entry(personID: person, requestID: request, erasedAt: Date(timeIntervalSince1970: score))
    }

    /// What `recover` did.
    public struct Recovery: Sendable, Equatable {
        /// Journaled erasures since the backup's time.
        public let entries: [Entry]
        /// Data keys the restore had brought back, deleted again.
        public let keysErased: Int
    }

    /// After a restore of PostgreSQL from a backup taken at `since`: deletes again, in one transaction, the data keys
    /// of every person erased since then (and records them in `subject_key_erasures`), then announces the erasure to
    /// every worker. Run it before workers serve; then enqueue each entry's deletion request again
    /// (`workerctl keys recover` does both).
    public func recover(since: Date, on database: PostgresPool) throws -> Recovery {
        let entries = try entries(since: since)
        let erased = try database.withConnection { conn in
            try conn.transaction { conn in
                try entries.reduce(0) { $0 + (try SubjectKeyStore.erase(personID: $1.personID, on: conn)) }
            }
        }
        if !entries.isEmpty { try SubjectKeyInvalidation.announce(on: pools) }
        return Recovery(entries: entries, keysErased: erased)
    }
}
