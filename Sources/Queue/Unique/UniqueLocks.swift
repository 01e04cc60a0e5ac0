import Foundation

/// What a unique push did.
public enum UniquePush: Sendable, Equatable {
    /// The lock was free: the job was pushed (or scheduled) with this jid, which now owns the lock.
    case enqueued(jid: String)
    /// The lock is held: nothing was pushed; this is the jid of the job that holds it.
    case duplicate(of: String)

    /// The jid a caller tracks either way.
    public var jid: String {
        switch self {
        case .enqueued(let jid), .duplicate(let jid): return jid
        }
    }
}

/// What the fetch-time check decided for one fetched unique job.
package enum UniqueClaim: Sendable, Equatable {
    /// Run it; it owns its lock (until success), which the settlement releases or keeps.
    case holding
    /// Run it; it holds no lock (until start: released now, or never taken).
    case free
    /// Another job (`holder`) owns the lock: this one is a duplicate and must not run.
    case duplicate(holder: String)
}

/// The unique-lock operations (their Lua: `UniqueScripts`, Queue/Scripts/UniqueScripts.swift). Invariant: the
/// lock's value is its owner's jid, and `unique-jid:<jid>` names the lock that jid owns; every release checks
/// `GET lock == jid` first, so a job only ever releases its own lock. Any thread may call with its own connection.
package enum UniqueLocks {
    /// Deletes the queue `name` (and forgets the name), releasing the unique locks its jobs own:
    /// the list is moved aside atomically first, then read page by page for jids, then unlinked.
    /// Returns the number of jobs deleted.
    public static func purgeQueue(_ connection: RedisConnection, name: String) throws(RedisError) -> Int {
        let parked = Keys.uniquePurge(Identifiers.jid())
        let count = Int(try connection.evaluate(UniqueScripts.parkQueue, keys: [parked], arguments: [name]).integer ?? 0)
        if count == 0 { return 0 }
        var start = 0
        while start < count {
            let page = try connection.command("LRANGE", parked, start, start + 499).array ?? []
            if page.isEmpty { break }
            try release(connection, jids: page.compactMap { $0.bytes.flatMap { try? JobPayload(parsing: $0) }?.jid })
            start += page.count
        }
        try connection.command("UNLINK", parked)
        return count
    }

    /// Milliseconds a lock lives: at least 1 s.
    /// Milliseconds a lock lives: at least 1 s, at most `UniquePolicy.maxSeconds` plus a scheduled job's delay
    /// (both clamped where they are read; clamped again here so no value traps, review M1).
    static func ttlMilliseconds(_ seconds: Double) -> Int {
        max(1000, Bounded.milliseconds(seconds, maxSeconds: 2 * UniquePolicy.maxSeconds + Bounded.maxIntervalSeconds))
    }

    /// Pushes `payload` (now, or scheduled at `at`) unless `lock` is held; one atomic script.
    /// The lock lives `policy.seconds` (plus the delay for a scheduled job, as Sidekiq Enterprise).
    public static func push(_ connection: RedisConnection, payload: JobPayload, lock: UniqueLockKey,
                            policy: UniquePolicy, at: Double?, now: Double = Clock.now()) throws(RedisError) -> UniquePush {
        let jid = payload.jid ?? ""
        let ttl = ttlMilliseconds(policy.seconds + max(0, (at ?? now) - now))
        let arguments: [any RedisArgument] = [jid, ttl, policy.until.rawValue, policy.seconds,
                                              payload.className, payload.queue ?? "default", payload.serialized(),
                                              at.map { "\($0)" } ?? ""]
        let reply = try connection.evaluate(UniqueScripts.push, keys: [lock.redisKey], arguments: arguments)
        guard let parts = reply.array, parts.count == 2, let flag = parts[0].integer, let other = parts[1].string else {
            throw .unexpectedReply("unique push returned \(reply)")
        }
        return flag == 1 ? .enqueued(jid: other) : .duplicate(of: other)
    }

    /// One fetched job to check: its payload, policy and lock. `ttl` is the lock's lifetime from
    /// now if this job takes it (the worker passes at least the job's timeout, so a running job's
    /// lock cannot expire under it).
    public struct Candidate: Sendable {
        public let jid: String
        public let lock: UniqueLockKey
        public let policy: UniquePolicy
        public let className: String
        public let queue: String
        public let ttlSeconds: Double

        public init(jid: String, lock: UniqueLockKey, policy: UniquePolicy, className: String, queue: String,
                    ttlSeconds: Double) {
            self.jid = jid
            self.lock = lock
            self.policy = policy
            self.className = className
            self.queue = queue
            self.ttlSeconds = ttlSeconds
        }
    }

    /// The fetch-time check for `candidates`, in one script call; one claim per candidate.
    public static func claim(_ connection: RedisConnection, _ candidates: [Candidate]) throws(RedisError) -> [UniqueClaim] {
        if candidates.isEmpty { return [] }
        var arguments: [any RedisArgument] = []
        for c in candidates {
            arguments += [c.lock.redisKey, c.jid, ttlMilliseconds(c.ttlSeconds), c.policy.until.rawValue, c.policy.seconds,
                          c.className, c.queue]
        }
        let reply = try connection.evaluate(UniqueScripts.claim, arguments: arguments)
        let items = reply.array ?? []
        guard items.count == candidates.count else { throw .unexpectedReply("unique claim returned \(reply)") }
        return items.map { item in
            switch item.string {
            case "hold": return .holding
            case "free": return .free
            default: return .duplicate(holder: item.string ?? "")
            }
        }
    }

    /// Releases the locks these jids own (a lock another jid owns is left alone). Returns how many
    /// locks were deleted.
    @discardableResult
    public static func release(_ connection: RedisConnection, jids: [String]) throws(RedisError) -> Int {
        let jids = jids.filter { !$0.isEmpty }
        if jids.isEmpty { return 0 }
        return Int(try connection.evaluate(UniqueScripts.releaseJids, arguments: jids).integer ?? 0)
    }

    /// Deletes a lock whoever holds it (operator repair); returns the jid that held it.
    public static func forceRelease(_ connection: RedisConnection, lock: UniqueLockKey) throws(RedisError) -> String? {
        try connection.evaluate(UniqueScripts.releaseLock, keys: [lock.redisKey]).string
    }
}
