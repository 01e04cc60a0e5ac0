import Foundation

/// One unique lock as Redis holds it (docs/unique-jobs.md): `unique:<digest>` = owner jid, and the
/// owner's record `unique-jid:<jid>` (class, queue, until, for). `ownerRecordMatches` is false when
/// the record is missing or names another lock (the lock then only waits for its TTL).
public struct UniqueLockInfo: Sendable, Equatable {
    package var lock: UniqueLockKey
    public var jid: String
    /// Seconds the lock still lives (its TTL, the safety net); nil if it has none.
    public var ttl: Double?
    public var className: String?
    public var queue: String?
    public var until: String?
    public var uniqueFor: Double?
    public var ownerRecordMatches: Bool
}

/// The admin API of unique locks (`workerctl unique ls|show|release`). Reads a consistent-enough
/// view per lock (GET, PTTL, HGETALL in one pipeline); any thread with its own connection.
public struct UniqueAdmin {
    public let connection: RedisConnection

    public init(connection: RedisConnection) { self.connection = connection }

    /// Duplicates dropped at fetch so far on this Redis (`stat:unique_dropped`; with several shards each
    /// shard counts the jobs fetched from it, and `workerctl unique ls` adds them up).
    public func droppedCount() throws(RedisError) -> Int {
        Int(try connection.command("GET", Keys.uniqueDropped).string.flatMap { Int($0) } ?? 0)
    }

    /// How many keys of the keyspace one listing looks at by default (`SCAN unique:*`: 10 steps of 1,000).
    public static let scannedKeys = 10_000
    /// The most locks one listing reads (two round trips each); past it the listing is partial.
    public static let maxLocks = 200

    /// The locks found, sorted by class then digest (`SCAN unique:*`; `unique-jid:*` records are not locks).
    /// Bounded whatever the keyspace holds (review M5): the walk stays within `budget` (each step costs its
    /// `COUNT`) and at most `maxLocks` locks are read; when either stops it, `budget.exhausted` is set and the
    /// reader says "partial".
    public func list(budget: ScanBudget = ScanBudget(maxEntries: scannedKeys)) throws(RedisError) -> [UniqueLockInfo] {
        var digests: Set<String> = []
        for key in try budget.keys(matching: Keys.uniqueLockPattern, connection) {
            if let digest = Keys.uniqueDigest(fromLock: key), Self.isDigest(digest) { digests.insert(digest) }
        }
        var locks: [UniqueLockInfo] = []
        if digests.count > Self.maxLocks { budget.stop() }
        for digest in digests.sorted().prefix(Self.maxLocks) {
            if let info = try show(UniqueLockKey(digest: digest)) { locks.append(info) }
        }
        return locks.sorted { ($0.className ?? "", $0.lock.digest) < ($1.className ?? "", $1.lock.digest) }
    }

    /// One lock, or nil if it is not held.
    package func show(_ lock: UniqueLockKey) throws(RedisError) -> UniqueLockInfo? {
        guard let jid = try connection.command("GET", lock.redisKey).string else { return nil }
        let replies = try connection.pipeline([["PTTL", lock.redisKey], ["HGETALL", Keys.uniqueOwner(jid)]])
        let pttl = replies[0].integer ?? -1
        let pairs = replies[1].strings
        var fields: [String: String] = [:]
        var index = 0
        while index + 1 < pairs.count { fields[pairs[index]] = pairs[index + 1]; index += 2 }
        return UniqueLockInfo(lock: lock, jid: jid, ttl: pttl >= 0 ? Double(pttl) / 1000 : nil,
                              className: fields["class"], queue: fields["queue"], until: fields["until"],
                              uniqueFor: fields["for"].flatMap(Double.init), ownerRecordMatches: fields["lock"] == lock.redisKey)
    }

    /// The lock a jid owns, if any.
    public func lock(ownedBy jid: String) throws(RedisError) -> UniqueLockInfo? {
        guard let key = try connection.command("HGET", Keys.uniqueOwner(jid), "lock").string,
              let digest = Keys.uniqueDigest(fromLock: key), Self.isDigest(digest) else { return nil }
        let info = try show(UniqueLockKey(digest: digest))
        return info?.jid == jid ? info : nil
    }

    /// The held lock `text` names: `unique:<digest>`, the bare digest, or a jid that owns one
    /// (`workerctl unique show|release`). Throws `AdminError.invalidArgument` when `text` is none of
    /// these, `.uniqueLockNotHeld` / `.noUniqueLockOwned` when this Redis holds no such lock (with
    /// several shards: look on the next one, `AdminError.isNotFound`), `RedisError` on I/O.
    public func held(_ text: String) throws -> UniqueLockInfo {
        if let lock = Self.parseLock(text) {
            guard let info = try show(lock) else { throw AdminError.uniqueLockNotHeld(lock: lock.redisKey) }
            return info
        }
        do { try JobAdmin.validate(jid: text) } catch {
            throw AdminError.invalidArgument("'\(text)' is neither a lock (unique:<64 hex digits>) nor a jid")
        }
        guard let info = try lock(ownedBy: text) else { throw AdminError.noUniqueLockOwned(jid: text) }
        return info
    }

    /// Deletes a lock whoever holds it (for a lock whose job is known to be gone). Returns the jid
    /// that held it, nil if it was not held.
    package func release(_ lock: UniqueLockKey) throws(RedisError) -> String? {
        try UniqueLocks.forceRelease(connection, lock: lock)
    }

    /// `unique:<64 hex>` or the bare digest → the lock; else nil.
    package static func parseLock(_ text: String) -> UniqueLockKey? {
        let digest = Keys.uniqueDigest(fromLock: text) ?? text
        return isDigest(digest) ? UniqueLockKey(digest: digest) : nil
    }

    static func isDigest(_ text: String) -> Bool {
        text.utf8.count == 64 && text.utf8.allSatisfy { (48...57).contains($0) || (97...102).contains($0) }
    }
}
