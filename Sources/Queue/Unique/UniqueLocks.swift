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
public enum UniqueClaim: Sendable, Equatable {
    /// Run it; it owns its lock (until success), which the settlement releases or keeps.
    case holding
    /// Run it; it holds no lock (until start: released now, or never taken).
    case free
    /// Another job (`holder`) owns the lock: this one is a duplicate and must not run.
    case duplicate(holder: String)
}

/// The unique-lock scripts and operations. Invariant: the lock's value is its owner's jid, and
/// `unique-jid:<jid>` names the lock that jid owns; every release checks `GET lock == jid` first,
/// so a job only ever releases its own lock. Any thread may call with its own connection.
public enum UniqueLocks {
    /// The Lua body (a local function) that releases the lock a jid owns; shared by the scripts
    /// here, `Scripts.complete` and `Scripts.recover` keep their own copy of these lines.
    static let releaseFunction = """
        local function releaseUnique(jid)
          local owner = 'unique-jid:' .. jid
          local lock = redis.call('HGET', owner, 'lock')
          if lock and redis.call('GET', lock) == jid then redis.call('DEL', lock) end
          redis.call('DEL', owner)
        end
        """

    /// ARGV: lock, jid, ttl ms, until, for, class, queue, payload, at ('' = now).
    /// Lock free: SET lock jid PX ttl, owner hash, push (or schedule) payload; returns {1, jid}.
    /// Lock held: nothing written; returns {0, holder}.
    static let push = RedisScript("""
        local lock, jid, ttl, untilv, forv, cls, queue, payload, at =
          ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9]
        local holder = redis.call('GET', lock)
        if holder then return {0, holder} end
        redis.call('SET', lock, jid, 'PX', ttl)
        local owner = 'unique-jid:' .. jid
        redis.call('HSET', owner, 'lock', lock, 'for', forv, 'until', untilv, 'class', cls, 'queue', queue)
        redis.call('PEXPIRE', owner, ttl)
        if at == '' then
          redis.call('SADD', 'queues', queue)
          redis.call('LPUSH', 'queue:' .. queue, payload)
        else
          redis.call('ZADD', 'schedule', at, payload)
        end
        return {1, jid}
        """)

    /// The fetch-time check, for a batch. ARGV in groups of seven: lock, jid, ttl ms, until, for,
    /// class, queue. A jid that already owns a lock (`unique-jid:<jid>`) keeps checking that one
    /// (its queue may have changed with `retry_queue`). Per job, returns `hold`, `free` or the
    /// holder's jid. Held by another jid: counted in `stat:unique_dropped` (the caller drops it).
    /// Free or our own, until success: (re)take it with TTL ≥ ttl. Until start: release it.
    static let claim = RedisScript("""
        local out = {}
        for i = 1, #ARGV, 7 do
          local lock, jid, ttl, untilv = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2]), ARGV[i + 3]
          local owner = 'unique-jid:' .. jid
          local known = redis.call('HGET', owner, 'lock')
          if known then lock = known end
          local holder = redis.call('GET', lock)
          if holder and holder ~= jid then
            redis.call('INCR', 'stat:unique_dropped')
            out[#out + 1] = holder
          elseif untilv == 'start' then
            if holder then redis.call('DEL', lock) end
            redis.call('DEL', owner)
            out[#out + 1] = 'free'
          else
            local left = redis.call('PTTL', lock)
            if left > ttl then ttl = left end
            redis.call('SET', lock, jid, 'PX', ttl)
            redis.call('HSET', owner, 'lock', lock, 'for', ARGV[i + 4], 'until', untilv,
                       'class', ARGV[i + 5], 'queue', ARGV[i + 6])
            redis.call('PEXPIRE', owner, ttl)
            out[#out + 1] = 'hold'
          end
        end
        return out
        """)

    /// ARGV: jids. Releases the lock each jid owns (only if the lock still names it). Returns the
    /// number of locks deleted.
    static let releaseJids = RedisScript(releaseFunction + """

        local n = 0
        for i = 1, #ARGV do
          local lock = redis.call('HGET', 'unique-jid:' .. ARGV[i], 'lock')
          if lock and redis.call('GET', lock) == ARGV[i] then n = n + 1 end
          releaseUnique(ARGV[i])
        end
        return n
        """)

    /// ARGV: lock key. Deletes the lock and its owner record whoever holds it (operator repair).
    /// Returns the jid that held it, or nil.
    static let releaseLock = RedisScript("""
        local holder = redis.call('GET', ARGV[1])
        if not holder then return false end
        redis.call('DEL', ARGV[1])
        local owner = 'unique-jid:' .. holder
        if redis.call('HGET', owner, 'lock') == ARGV[1] then redis.call('DEL', owner) end
        return holder
        """)

    /// ARGV: queue name, parking key. Moves `queue:NAME` aside (RENAME to the parking key, which
    /// expires in an hour in case the caller dies before deleting it) and forgets the queue name;
    /// returns the number of jobs moved. Lets a purge read the jids of exactly the jobs it removed.
    static let parkQueue = RedisScript("""
        local queue = 'queue:' .. ARGV[1]
        local n = redis.call('LLEN', queue)
        if n > 0 then
          redis.call('RENAME', queue, ARGV[2])
          redis.call('EXPIRE', ARGV[2], 3600)
        end
        redis.call('SREM', 'queues', ARGV[1])
        return n
        """)

    /// Deletes the queue `name` (and forgets the name), releasing the unique locks its jobs own:
    /// the list is moved aside atomically first, then read page by page for jids, then unlinked.
    /// Returns the number of jobs deleted.
    public static func purgeQueue(_ connection: RedisConnection, name: String) throws(RedisError) -> Int {
        let parked = "unique-purge:" + Identifiers.jid()
        let count = Int(try connection.evaluate(parkQueue, arguments: [name, parked]).integer ?? 0)
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
        let arguments: [any RedisArgument] = [lock.redisKey, jid, ttl, policy.until.rawValue, policy.seconds,
                                              payload.className, payload.queue ?? "default", payload.serialized(),
                                              at.map { "\($0)" } ?? ""]
        let reply = try connection.evaluate(push, arguments: arguments)
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
        let reply = try connection.evaluate(claim, arguments: arguments)
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
        return Int(try connection.evaluate(releaseJids, arguments: jids).integer ?? 0)
    }

    /// Deletes a lock whoever holds it (operator repair); returns the jid that held it.
    public static func forceRelease(_ connection: RedisConnection, lock: UniqueLockKey) throws(RedisError) -> String? {
        try connection.evaluate(releaseLock, arguments: [lock.redisKey]).string
    }
}
