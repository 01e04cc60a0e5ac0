/// The keys of unique jobs (docs/unique-jobs.md), in the `Keys` namespace.
extension Keys {
    /// STRING `unique:<digest>` = owning jid, `PX` TTL (safety net only).
    public static func uniqueLock(_ digest: String) -> String { "unique:" + digest }
    /// The digest of a lock key (`unique:<digest>` ⇒ `<digest>`), nil for any other key.
    public static func uniqueDigest(fromLock key: String) -> String? {
        let prefix = uniqueLock("")
        return key.hasPrefix(prefix) ? String(key.dropFirst(prefix.count)) : nil
    }
    /// HASH `unique-jid:<jid>` = {lock, for, until, class, queue}: which lock a jid owns, with the
    /// same TTL as the lock. Lets every exit path release by jid alone (admin, recovery).
    public static func uniqueOwner(_ jid: String) -> String { "unique-jid:" + jid }
    /// Pattern matching every lock (`unique:` + 64 hex digits).
    public static let uniqueLockPattern = "unique:*"
    /// STRING counter: duplicates dropped at fetch (pushed by clients that do not check).
    public static let uniqueDropped = "stat:unique_dropped"
    /// LIST `unique-purge:<token>`: a queue parked by `UniqueLocks.purgeQueue` while its jobs' locks are released
    /// (expires in an hour if the purge dies first).
    public static func uniquePurge(_ token: String) -> String { "unique-purge:" + token }
}
