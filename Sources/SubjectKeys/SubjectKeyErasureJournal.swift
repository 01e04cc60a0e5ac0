import Foundation
import WorkersQueue

/// Erasures, written where a PostgreSQL backup does not reach (issue 50 point 4, docs/jobs-privacy.md "Restoring a
/// backup"): every Redis shard keeps a sorted set `subject-keys:erasures` of the **person digests**
/// (`SubjectKeyStore.personDigest`, HMAC under the lookup key that only the KEK unwraps) whose data keys an erasure
/// deleted, scored by when. After PostgreSQL is restored from a backup taken at time T, the restored `subject_keys`
/// holds the keys of everyone erased since T again; `ErasureRecovery` (Jobs) reads the journal since T and erases
/// them again before workers serve.
///
/// A member names no one: without the KEK (which unwraps the lookup key) a digest cannot be matched to a `users.id`,
/// so a copy of Redis plus a PostgreSQL dump do not tell who was erased. Entries older than `retention` are trimmed at
/// each record: keep it longer than the oldest backup you may restore (docs: the KEK destruction schedule uses the
/// same number). `export` gives the journal as text lines to ship elsewhere (a Redis restored to the same old time
/// loses it too). Thread rules: a value; any thread.
public struct SubjectKeyErasureJournal: Sendable {
    /// The sorted set on every shard.
    public static let key = ErasureKeys.erasures
    /// How long entries are kept by default: 400 days (backups kept a year, and a margin).
    public static let defaultRetention: Duration = .seconds(400 * 86_400)

    public let pools: [RedisPool]
    public let retention: Duration

    public init(pools: [RedisPool], retention: Duration = defaultRetention) {
        self.pools = pools
        self.retention = retention
    }

    /// One journaled erasure: the person's digest (32 bytes) and when it was first recorded.
    public struct Entry: Sendable, Equatable {
        public let personDigest: Data
        public let erasedAt: Date
        public init(personDigest: Data, erasedAt: Date) {
            self.personDigest = personDigest
            self.erasedAt = erasedAt
        }

        /// `<unix seconds> <base64url digest>`: one line of `export`, read back by `parse(line:)`.
        public var line: String {
            "\(Bounded.int(erasedAt.timeIntervalSince1970, in: 0...253_402_300_799)) \(Self.member(personDigest))"
        }

        static func member(_ digest: Data) -> String {
            digest.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
                .replacingOccurrences(of: "=", with: "")
        }

        static func digest(member: String) -> Data? {
            guard member.utf8.count == 43, member.utf8.allSatisfy({ $0 < 128 }) else { return nil }
            let base64 = member.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/") + "="
            guard let data = Data(base64Encoded: base64), data.count == 32 else { return nil }
            return data
        }

        /// An entry from a line of `export`, or nil when the line is not one.
        public static func parse(line: String) -> Entry? {
            let parts = line.split(separator: " ", omittingEmptySubsequences: true)
            guard parts.count == 2, let seconds = Int64(parts[0]), (0...Int64(Bounded.maxEpochSeconds)).contains(seconds),
                  let digest = digest(member: String(parts[1])) else { return nil }
            return Entry(personDigest: digest, erasedAt: Date(timeIntervalSince1970: Double(seconds)))
        }
    }

    /// Records that the keys of the person with `personDigest` were erased, on every shard (again on a later run of
    /// the same erasure: the member is the same, its time the first one's). Call after the erasure committed.
    public func record(personDigest: Data, at time: Date = Date()) throws {
        let seconds = time.timeIntervalSince1970
        let horizon = seconds - Double(retention.components.seconds)
        for pool in pools {
            try pool.withConnection { connection in
                for reply in try connection.pipeline([
                    ["ZADD", Self.key, "NX", seconds, Entry.member(personDigest)],
                    ["ZREMRANGEBYSCORE", Self.key, "-inf", "(\(horizon)"],
                ]) { _ = try reply.checked() }
            }
        }
    }

    /// Every erasure journaled at or after `since`, on any shard (each once, its earliest time), oldest first.
    /// Members `record` did not write, and scores that are no epoch time (any Redis writer may set 1e300), are skipped.
    public func entries(since: Date) throws -> [Entry] {
        var found: [Data: Date] = [:]
        for pool in pools {
            let reply = try pool.withConnection {
                try $0.command("ZRANGEBYSCORE", Self.key, since.timeIntervalSince1970, "+inf", "WITHSCORES").checked()
            }
            let parts = reply.array ?? []
            for index in stride(from: 0, to: parts.count - 1, by: 2) {
                guard let member = parts[index].string, let digest = Entry.digest(member: member),
                      let score = parts[index + 1].string.flatMap(Double.init).flatMap(Bounded.epochSeconds) else { continue }
                let time = Date(timeIntervalSince1970: score)
                if let known = found[digest], known <= time { continue }
                found[digest] = time
            }
        }
        return found.map { Entry(personDigest: $0.key, erasedAt: $0.value) }
            .sorted { ($0.erasedAt, $0.line) < ($1.erasedAt, $1.line) }
    }

    /// The journal since `since` as text, one `Entry.line` per erasure: what an operator ships next to the
    /// PostgreSQL backups (`workerctl keys journal`), read back by `workerctl keys recover --journal-file`.
    public func export(since: Date) throws -> String {
        try entries(since: since).map { $0.line + "\n" }.joined()
    }
}
