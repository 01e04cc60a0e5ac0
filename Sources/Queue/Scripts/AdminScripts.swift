/// Lua scripts that make the admin moves atomic: a job is removed by its exact bytes and written
/// to its destination only if this call removed it, so two operators (or an operator and a
/// poller) acting on the same job never duplicate or lose it.
///
/// Like `Scripts`, the destination keys are built inside the scripts from queue names by functions generated from
/// `Keys` (`ScriptKeys`; Sidekiq's layout has no hash tags), so they assume a single Redis server, as Sidekiq does.
enum AdminScripts {
    /// KEYS[1] working list, KEYS[2] its process's fetcher heartbeat; ARGV[1] member. Removes the member
    /// only while the process is still dead (-1 when its heartbeat came back). Used by `JobPurge`.
    static let removeFromDeadWorkingList = RedisScript("""
        if redis.call('EXISTS', KEYS[2]) == 1 then return -1 end
        return redis.call('LREM', KEYS[1], 0, ARGV[1])
        """)

    /// KEYS[1] = source ZSET. ARGV in triples: raw member, queue, payload to push.
    /// For each member that `ZREM` removed: `SADD queues Q`, `LPUSH queue:Q payload`.
    /// Returns an array of 0/1, one per triple.
    static let setToQueue = RedisScript(keys: ScriptKeys().queues.queueKey, """
        local out = {}
        for i = 1, #ARGV, 3 do
          if redis.call('ZREM', KEYS[1], ARGV[i]) == 1 then
            redis.call('SADD', QUEUES, ARGV[i + 1])
            redis.call('LPUSH', queue_key(ARGV[i + 1]), ARGV[i + 2])
            out[#out + 1] = 1
          else
            out[#out + 1] = 0
          end
        end
        return out
        """)

    /// KEYS[1] = a sorted set; ARGV[1] = a member's exact bytes, ARGV[2] = its replacement. Replaces the member at
    /// its score when it is still there (1), else leaves the set as it is (0). `JobSetRewrite`.
    static let replaceMember = RedisScript("""
        local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
        if not score then return 0 end
        redis.call('ZREM', KEYS[1], ARGV[1])
        redis.call('ZADD', KEYS[1], score, ARGV[2])
        return 1
        """)

    /// One page of a sorted set walked from the lowest score up (`SortedJobSet.forEachPageAscending`).
    /// KEYS[1] = the set. ARGV[1] = the highest score to visit, ARGV[2] = page size; for every page
    /// but the first, ARGV[3] = the score and ARGV[4] = the member of the previous page's last entry
    /// (the cursor). Returns `member, score` pairs: the entries that follow the cursor in Redis'
    /// order (score, then member bytes as `memcmp`, a shorter prefix first), at most a page, none
    /// above ARGV[1].
    ///
    /// The position is found inside the script, so whatever changed since the previous page it is
    /// exact: `ZRANK` + 1 when the cursor's member is still there at its score; else (moved or
    /// removed meanwhile) a binary search, by member, among the entries that share the cursor's score.
    /// Entries removed meanwhile are never a reason to skip or repeat one.
    static let pageAfter = RedisScript("""
        local key, limit = KEYS[1], tonumber(ARGV[2])
        local highest = tonumber(ARGV[1]) or math.huge
        local function follows(a, b)
          local n = math.min(#a, #b)
          local i = 1
          while i <= n and string.byte(a, i) == string.byte(b, i) do i = i + 1 end
          if i <= n then return string.byte(a, i) > string.byte(b, i) end
          return #a > #b
        end
        local start = 0
        if ARGV[3] then
          local score, member = ARGV[3], ARGV[4]
          local rank = redis.call('ZRANK', key, member)
          if rank and tonumber(redis.call('ZSCORE', key, member)) == tonumber(score) then
            start = rank + 1
          else
            local low = redis.call('ZCOUNT', key, '-inf', '(' .. score)
            local high = low + redis.call('ZCOUNT', key, score, score)
            while low < high do
              local middle = math.floor((low + high) / 2)
              if follows(redis.call('ZRANGE', key, middle, middle)[1], member) then high = middle else low = middle + 1 end
            end
            start = low
          end
        end
        local entries = redis.call('ZRANGE', key, start, start + limit - 1, 'WITHSCORES')
        local out = {}
        for i = 1, #entries, 2 do
          if tonumber(entries[i + 1]) > highest then break end
          out[#out + 1] = entries[i]
          out[#out + 1] = entries[i + 1]
        end
        return out
        """)

    /// KEYS[1] = source (ZSET or LIST). ARGV[1] = `zset` or `list`, ARGV[2] = now,
    /// ARGV[3] = dead max jobs, ARGV[4] = dead timeout in seconds, ARGV[5…] = raw members.
    /// Each member removed from the source (`ZREM`, or `LREM key 1`) is added unchanged to
    /// `dead` at `now`; then the set is trimmed as `DeadSet#kill` does (§6):
    /// `ZREMRANGEBYSCORE dead -inf now-timeout`, `ZREMRANGEBYRANK dead 0 -(max+1)`: the set keeps exactly `max` jobs (Sidekiq keeps max-1).
    /// A batch job killed here counts as dead for its batch (`BatchScripts`), as Sidekiq's
    /// `DeadSet#kill` runs the death handlers. Returns an array of 0/1, one per member.
    static let toDead = RedisScript(keys: BatchScripts.keys.dead, BatchScripts.functions + """

        local isList = ARGV[1] == 'list'
        local now = ARGV[2]
        local out = {}
        local killed = false
        for i = 5, #ARGV do
          local removed
          if isList then removed = redis.call('LREM', KEYS[1], 1, ARGV[i])
          else removed = redis.call('ZREM', KEYS[1], ARGV[i]) end
          if removed == 1 then
            redis.call('ZADD', DEAD, now, ARGV[i])
            killed = true
            batch_outcome(ARGV[i], 'dead', now)
            out[#out + 1] = 1
          else
            out[#out + 1] = 0
          end
        end
        if killed then
          redis.call('ZREMRANGEBYSCORE', DEAD, '-inf', tonumber(now) - tonumber(ARGV[4]))
          redis.call('ZREMRANGEBYRANK', DEAD, 0, -(tonumber(ARGV[3]) + 1))
        end
        return out
        """)
}
