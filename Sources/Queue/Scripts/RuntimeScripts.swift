/// The Lua scripts that make fetch, acknowledge, scheduling and recovery atomic.
///
/// The keys a script names itself come from `Keys` (`ScriptKeys`, Scripts/ScriptKeys+Queue.swift): fixed ones in
/// `KEYS[]`, and keys derived from queue names, jids and days by Lua functions generated from `Keys`' builders
/// (Sidekiq's layout has no hash tags), so these scripts assume a single Redis server, as Sidekiq itself does.
enum Scripts {
    /// `trim_dead(now, timeout, max)`: the dead set trimmed by age and count after a death, as Sidekiq's
    /// `DeadSet#kill` does (we keep exactly `max`). For a script that binds `DEAD` (`ScriptKeys.dead`).
    static let trimDeadFunction = """
        local function trim_dead(now, timeout, max)
          redis.call('ZREMRANGEBYSCORE', DEAD, '-inf', tonumber(now) - timeout)
          redis.call('ZREMRANGEBYRANK', DEAD, 0, -(max + 1))
        end
        """

    /// `count_runs(processed, failed, day, now)`: the run counters a settled (or buried) job moves —
    /// `stat:processed` / `stat:failed`, the UTC day's counters (`Keys.dailyStatRetention`) and the day's per-minute
    /// hashes (`Keys.minutelyRetention`, minute of `now`); the same keys and expiries as
    /// `ReliableQueue.processedCounters`. For a script that binds `statProcessed`, `statFailed` and `statDayKeys`.
    static let countRunsFunction = """
        local function count_runs(processed, failed, day, now)
          local minute = math.floor(tonumber(now) / 60) % 1440
          if processed > 0 then
            redis.call('INCRBY', STAT_PROCESSED, processed)
            redis.call('INCRBY', stat_processed_day_key(day), processed)
            redis.call('EXPIRE', stat_processed_day_key(day), \(Keys.dailyStatRetention))
            redis.call('HINCRBY', stat_minutely_processed_key(day), minute, processed)
            redis.call('EXPIRE', stat_minutely_processed_key(day), \(Keys.minutelyRetention))
          end
          if failed > 0 then
            redis.call('INCRBY', STAT_FAILED, failed)
            redis.call('INCRBY', stat_failed_day_key(day), failed)
            redis.call('EXPIRE', stat_failed_day_key(day), \(Keys.dailyStatRetention))
            redis.call('HINCRBY', stat_minutely_failed_key(day), minute, failed)
            redis.call('EXPIRE', stat_minutely_failed_key(day), \(Keys.minutelyRetention))
          end
        end
        """

    /// Moves up to ARGV[2] jobs from the queues ARGV[8…] (in that order, paused ones skipped) into
    /// this process's in-flight lists `working:queue:Q:ARGV[1]`. Returns `[queue1, [jobs…], queue2, [jobs…], …]`,
    /// one pair per chunk moved, oldest job first (the queue named once a chunk, not once a job as before: 1.20 / 1.09 →
    /// 0.80 / 0.87 µs of Redis time a job in two A/B rounds of bench/script_cost.py, batch 250, no AOF). The in-flight entry is byte-identical to the queued one.
    ///
    /// The result is exactly that of one `LMOVE src dst RIGHT LEFT` per job (same jobs, same order in the
    /// in-flight list: the oldest deepest), but done in three commands per queue and chunk of ≤ 1,000 (`LRANGE`
    /// the tail, `LTRIM` it off, one `LPUSH` of the chunk oldest first): 0.85 µs of Redis time per job instead of
    /// 2.4 µs for a batch of 250 (measured on this machine with redis-server 7.0, AOF on; docs/cost-at-scale.md).
    /// Atomic like any script, so no job can be seen in both lists or in neither.
    ///
    /// Except a payload over ARGV[3] bytes (the fetch size limit, `WorkerConfiguration.fetchMaxPayloadBytes`): it
    /// is taken off its queue like the others but never pushed to the in-flight list nor returned; its stub goes to
    /// `dead` (`OversizedScripts`), counted processed and failed (ARGV[4] now, ARGV[5] UTC day) as the settle script
    /// counts a death, and the dead set is trimmed as there (ARGV[6] max jobs, ARGV[7] timeout seconds). It counts
    /// against ARGV[2] (a queue of large payloads costs one call a bounded amount). Then the reply ends with one more
    /// element: `[queue, stub jid, bytes, …]`, a triple per payload buried, for the worker's log line.
    static let fetch = RedisScript(keys: OversizedScripts.keys.paused.workingKey.statProcessed.statFailed.statDayKeys,
                                   [BatchScripts.functions, UniqueScripts.releaseFunction, OversizedScripts.functions, Scripts.trimDeadFunction,
                                    Scripts.countRunsFunction, """
        local identity = ARGV[1]
        local limit = tonumber(ARGV[2])
        local maxBytes = tonumber(ARGV[3])
        local now = ARGV[4]
        local out = {}
        local buried = {}
        local seq = 0
        local n = 0
        for i = 8, #ARGV do
          if n >= limit then break end
          local q = ARGV[i]
          if redis.call('SISMEMBER', PAUSED, q) == 0 then
            local src = queue_key(q)
            local dst = working_key(q, identity)
            while n < limit do
              local want = math.min(limit - n, 1000)
              local jobs = redis.call('LRANGE', src, -want, -1)
              local k = #jobs
              if k == 0 then break end
              redis.call('LTRIM', src, 0, -(k + 1))
              local moved = {}
              local m = 0
              for j = k, 1, -1 do
                local job = jobs[j]
                if #job > maxBytes then
                  seq = seq + 1
                  buried[#buried + 1] = q
                  buried[#buried + 1] = oversized_bury(job, q, maxBytes, now, seq)
                  buried[#buried + 1] = #job
                else
                  m = m + 1
                  moved[m] = job
                end
              end
              if m > 0 then
                redis.call('LPUSH', dst, unpack(moved))
                out[#out + 1] = q
                out[#out + 1] = moved
              end
              n = n + k
              if k < want then break end
            end
          end
        end
        if seq > 0 then
          -- Counted and trimmed as the settle script (`complete`) does for a death.
          trim_dead(now, tonumber(ARGV[7]), tonumber(ARGV[6]))
          count_runs(seq, seq, ARGV[5], now)
          out[#out + 1] = buried
        end
        return out
        """].joined(separator: "\n"))

    /// Settles in-flight jobs and moves the counters, atomically. ARGV: now, utc day, dead max jobs, dead timeout
    /// seconds, then groups of ten: op, working key, raw job, new payload, target, counts, unique jid, completion jid,
    /// completion record, its TTL in seconds. (The plain
    /// acks of a drain do not come here: `ReliableQueue.acknowledge` cuts them off their lists' tails without sending
    /// each payload through Lua, whose string hash reads every byte; this script takes the ones it leaves as `ack`.)
    /// An op only takes effect if the raw job was still
    /// in the in-flight list (so a job that an orphan sweep already took back is not also
    /// retried). Ops: `ack` (remove), `retry` (ZADD retry target payload), `dead` (ZADD dead
    /// now payload + trims), `requeue` (RPUSH queue:target payload: the front of the line),
    /// `drop` (remove without a trace: `retry: false`), `schedule` (ZADD schedule target payload: over a
    /// limit, docs/limiters.md). `counts` is `RunCounts.rawValue`
    /// (1 processed, 2 failed, 3 both). Invariant: a run moves `stat:processed` / `stat:failed`
    /// (and the daily keys, and the per-minute hashes `Keys.statMinutely*`: minute of `now`; the same keys as
    /// `ReliableQueue.processedCounters`) only if this call's LREM removed its job, so a batch sent again after
    /// a lost reply counts nothing twice. The same holds for batch jobs (`BatchScripts`): a settled
    /// job carrying a `bid` is counted for its batch here, in the same call (ack = success, retry =
    /// failure, dead / drop = finished without success). `unique jid` ('' if none) is the jid of a job
    /// that owns a unique lock (docs/unique-jobs.md): `ack`, `dead` and `drop` release it (only if the
    /// lock still names that jid), `retry` and `schedule` (over a limit) extend it to the job's next time +
    /// its `for`, `requeue` keeps it. `completion jid` ('' if none) names the job's completion record
    /// (`JobCompletion`, `completion:<jid>`): `SET … EX ttl` in the same call, only when this call's LREM removed the job.
    /// Returns the number of jobs settled.
    static let complete = RedisScript(keys: BatchScripts.keys.retry.dead.schedule.statProcessed.statFailed.uniqueOwnerKey
                                        .queueKey.statDayKeys.completionKey,
                                      [BatchScripts.functions, Scripts.trimDeadFunction, Scripts.countRunsFunction].joined(separator: "\n") + """

        local now = ARGV[1]
        local day = ARGV[2]
        local deadMax = tonumber(ARGV[3])
        local deadTimeout = tonumber(ARGV[4])
        local processed = 0
        local failed = 0
        local settled = 0
        local killed = false
        local first = 5
        -- PEXPIREAT … GT without the GT flag, which Redis 6.2 lacks (an arity error there, after the LREM: the job
        -- would be lost): later only, and never on a key without expiry or a missing one.
        local function extend_to(key, ms)
          local left = redis.call('PTTL', key)
          if left >= 0 and tonumber(now) * 1000 + left < ms then redis.call('PEXPIREAT', key, ms) end
        end
        for i = first, #ARGV, 10 do
          local op, working, raw, payload, target = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
          local counts = tonumber(ARGV[i + 5])
          local unique = ARGV[i + 6]
          local completion = ARGV[i + 7]
          if redis.call('LREM', working, -1, raw) == 1 then
            settled = settled + 1
            if completion ~= '' then
              redis.call('SET', completion_key(completion), ARGV[i + 8], 'EX', ARGV[i + 9])
            end
            if unique ~= '' and op ~= 'requeue' then
              local owner = unique_owner_key(unique)
              local lock = redis.call('HGET', owner, 'lock')
              if op == 'retry' or op == 'schedule' then
                if lock and redis.call('GET', lock) == unique then
                  local ms = math.floor((tonumber(target) + tonumber(redis.call('HGET', owner, 'for') or 0)) * 1000)
                  extend_to(lock, ms)
                  extend_to(owner, ms)
                end
              else
                if lock and redis.call('GET', lock) == unique then redis.call('DEL', lock) end
                redis.call('DEL', owner)
              end
            end
            if counts == 1 or counts == 3 then processed = processed + 1 end
            if counts >= 2 then failed = failed + 1 end
            if op == 'retry' then
              redis.call('ZADD', RETRY, target, payload)
            elseif op == 'dead' then
              redis.call('ZADD', DEAD, now, payload)
              killed = true
            elseif op == 'requeue' then
              redis.call('RPUSH', queue_key(target), payload)
            elseif op == 'schedule' then
              redis.call('ZADD', SCHEDULE, target, payload)
            end
            if op == 'ack' then batch_outcome(raw, 'success', now)
            elseif op == 'retry' then batch_outcome(raw, 'retry', now)
            elseif op == 'dead' or op == 'drop' then batch_outcome(raw, 'dead', now) end
          end
        end
        if killed then trim_dead(now, deadTimeout, deadMax) end
        count_runs(processed, failed, day, now)
        return settled
        """)

    /// Moves due members of the ZSET KEYS[1] to their queues. ARGV in triples: raw member,
    /// queue, payload to push. A member is pushed only if this call removed it (ZREM == 1), so
    /// however many pollers race, each job is pushed once. Returns the number moved.
    static let moveDue = RedisScript(keys: ScriptKeys().queues.queueKey, """
        local set = KEYS[1]
        local moved = 0
        for i = 1, #ARGV, 3 do
          if redis.call('ZREM', set, ARGV[i]) == 1 then
            redis.call('SADD', QUEUES, ARGV[i + 1])
            redis.call('LPUSH', queue_key(ARGV[i + 1]), ARGV[i + 2])
            moved = moved + 1
          end
        end
        return moved
        """)

    /// Moves an unreadable member of the ZSET KEYS[1] (ARGV[1]) to `dead` as ARGV[3] (score ARGV[2]), if this call
    /// removed it. Returns 1 if it did.
    static let buryUnreadable = RedisScript(keys: ScriptKeys().dead, """
        if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then
          redis.call('ZADD', DEAD, ARGV[2], ARGV[3])
          return 1
        end
        return 0
        """)

    /// Trims the sorted set KEYS[1] to ARGV[1] bytes of Redis memory, lowest scores (oldest) first: while its sampled
    /// `MEMORY USAGE` is over, removes the share of entries that is over (at least one). At most 64 rounds. Returns
    /// the number removed.
    static let trimByBytes = RedisScript("""
        local key, limit = KEYS[1], tonumber(ARGV[1])
        local removed = 0
        for _ = 1, 64 do
          local n = redis.call('ZCARD', key)
          if n == 0 then break end
          local bytes = redis.call('MEMORY', 'USAGE', key, 'SAMPLES', 32) or 0
          if bytes <= limit then break end
          local cut = math.max(1, math.ceil(n * (bytes - limit) / bytes))
          redis.call('ZREMRANGEBYRANK', key, 0, cut - 1)
          removed = removed + cut
        end
        return removed
        """)

    /// Takes back the in-flight jobs of a dead process. KEYS: working key, that process's
    /// fetcher-heartbeat key; ARGV: now, dead max, dead timeout, the queue, then triples: raw job, op (`requeue` or
    /// `dead`), payload. Does nothing if the heartbeat came back. Returns the
    /// number of jobs moved. A requeued job keeps its unique lock (it is still live); a job sent to
    /// `dead` releases the lock its jid owns, if any (docs/unique-jobs.md), and is counted for its
    /// batch (`BatchScripts`).
    static let recover = RedisScript(keys: BatchScripts.keys.dead.uniqueOwnerKey.queueKey,
                                     [BatchScripts.functions, Scripts.trimDeadFunction].joined(separator: "\n") + """

        local working, heartbeat, now = KEYS[1], KEYS[2], ARGV[1]
        local deadMax, deadTimeout, queue = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
        if redis.call('EXISTS', heartbeat) == 1 then return -1 end
        local moved = 0
        local killed = false
        for i = 5, #ARGV, 3 do
          if redis.call('LREM', working, -1, ARGV[i]) == 1 then
            moved = moved + 1
            if ARGV[i + 1] == 'dead' then
              redis.call('ZADD', DEAD, now, ARGV[i + 2])
              killed = true
              local ok, job = pcall(cjson.decode, ARGV[i + 2])
              if ok and type(job) == 'table' and type(job.jid) == 'string' then
                local owner = unique_owner_key(job.jid)
                local lock = redis.call('HGET', owner, 'lock')
                if lock and redis.call('GET', lock) == job.jid then redis.call('DEL', lock) end
                redis.call('DEL', owner)
              end
              batch_outcome(ARGV[i], 'dead', now)
            else
              redis.call('RPUSH', queue_key(queue), ARGV[i + 2])
            end
          end
        end
        if killed then trim_dead(now, deadTimeout, deadMax) end
        return moved
        """)
}
