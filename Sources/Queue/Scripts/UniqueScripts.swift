/// The Lua of unique jobs (docs/unique-jobs.md), run by `UniqueLocks`: push, the fetch-time claim, releases and
/// the purge's parking of a queue. Every release checks `GET lock == jid` first (`UniqueLocks`'s invariant).
enum UniqueScripts {
    /// The Lua body (a local function) that releases the lock a jid owns; shared by the scripts
    /// here, `Scripts.complete` and `Scripts.recover` keep their own copy of these lines. Names `unique_owner_key`.
    static let releaseFunction = """
        local function releaseUnique(jid)
          local owner = unique_owner_key(jid)
          local lock = redis.call('HGET', owner, 'lock')
          if lock and redis.call('GET', lock) == jid then redis.call('DEL', lock) end
          redis.call('DEL', owner)
        end
        """

    /// KEYS[1]: the lock; ARGV: jid, ttl ms, until, for, class, queue, payload, at ('' = now).
    /// Lock free: SET lock jid PX ttl, owner hash, push (or schedule) payload; returns {1, jid}.
    /// Lock held: nothing written; returns {0, holder}.
    static let push = RedisScript(keys: ScriptKeys().queues.schedule.uniqueOwnerKey.queueKey, """
        local lock, jid, ttl, untilv, forv, cls, queue, payload, at =
          KEYS[1], ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8]
        local holder = redis.call('GET', lock)
        if holder then return {0, holder} end
        redis.call('SET', lock, jid, 'PX', ttl)
        local owner = unique_owner_key(jid)
        redis.call('HSET', owner, 'lock', lock, 'for', forv, 'until', untilv, 'class', cls, 'queue', queue)
        redis.call('PEXPIRE', owner, ttl)
        if at == '' then
          redis.call('SADD', QUEUES, queue)
          redis.call('LPUSH', queue_key(queue), payload)
        else
          redis.call('ZADD', SCHEDULE, at, payload)
        end
        return {1, jid}
        """)

    /// The fetch-time check, for a batch. ARGV in groups of seven: lock, jid, ttl ms, until, for,
    /// class, queue. A jid that already owns a lock (`unique-jid:<jid>`) keeps checking that one
    /// (its queue may have changed with `retry_queue`). Per job, returns `hold`, `free` or the
    /// holder's jid. Held by another jid: counted in `stat:unique_dropped` (the caller drops it).
    /// Free or our own, until success: (re)take it with TTL ≥ ttl. Until start: release it.
    static let claim = RedisScript(keys: ScriptKeys().uniqueDropped.uniqueOwnerKey, """
        local out = {}
        for i = 1, #ARGV, 7 do
          local lock, jid, ttl, untilv = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2]), ARGV[i + 3]
          local owner = unique_owner_key(jid)
          local known = redis.call('HGET', owner, 'lock')
          if known then lock = known end
          local holder = redis.call('GET', lock)
          if holder and holder ~= jid then
            redis.call('INCR', UNIQUE_DROPPED)
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
    static let releaseJids = RedisScript(keys: ScriptKeys().uniqueOwnerKey, releaseFunction + """

        local n = 0
        for i = 1, #ARGV do
          local lock = redis.call('HGET', unique_owner_key(ARGV[i]), 'lock')
          if lock and redis.call('GET', lock) == ARGV[i] then n = n + 1 end
          releaseUnique(ARGV[i])
        end
        return n
        """)

    /// KEYS[1]: the lock. Deletes the lock and its owner record whoever holds it (operator repair).
    /// Returns the jid that held it, or nil.
    static let releaseLock = RedisScript(keys: ScriptKeys().uniqueOwnerKey, """
        local holder = redis.call('GET', KEYS[1])
        if not holder then return false end
        redis.call('DEL', KEYS[1])
        local owner = unique_owner_key(holder)
        if redis.call('HGET', owner, 'lock') == KEYS[1] then redis.call('DEL', owner) end
        return holder
        """)

    /// KEYS[1]: the parking key; ARGV[1]: the queue name. Moves `queue:NAME` aside (RENAME to the parking key, which
    /// expires in an hour in case the caller dies before deleting it) and forgets the queue name;
    /// returns the number of jobs moved. Lets a purge read the jids of exactly the jobs it removed.
    static let parkQueue = RedisScript(keys: ScriptKeys().queues.queueKey, """
        local queue = queue_key(ARGV[1])
        local n = redis.call('LLEN', queue)
        if n > 0 then
          redis.call('RENAME', queue, KEYS[1])
          redis.call('EXPIRE', KEYS[1], 3600)
        end
        redis.call('SREM', QUEUES, ARGV[1])
        return n
        """)
}
