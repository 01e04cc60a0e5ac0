import WorkersQueue

/// The Lua scripts that make a cron fire atomic.
///
/// Redis runs a script without interleaving other commands, but it does **not** roll back the
/// writes a script made before a failing command. So every script checks the types of all its keys
/// first and only then writes: either every write happens or none does.
enum CronScripts {
    /// Claims one tick of one entry and enqueues its job, all at once.
    ///
    /// KEYS: 1 `cron_job:NAME`, 2 `cron_job:NAME:enqueued`, 3 `cron_job:NAME:jid_history`,
    ///       4 `queues`, 5 `queue:Q`.
    /// ARGV: 1 tick ISO-8601 UTC, 2 tick epoch (integer), 3 job JSON, 4 queue name,
    ///       5 history JSON, 6 history size, 7 enqueue time text, 8 prune ZSET members scored below this
    ///       (only those at or before the tick fired: claims after the cursor are backfills that
    ///       must keep stopping a later fire of their tick, see `backfill`).
    ///
    /// Returns `{outcome, detail}`:
    /// * `fired`: claimed, job pushed, `last_tick`/`last_enqueue_time`/history written;
    /// * `stale` (detail: the stored last tick epoch): a tick at or after this one was already fired;
    /// * `taken`: another scheduler (possibly Ruby sidekiq-cron) had claimed this tick in the ZSET;
    ///   `last_tick` is moved up to it so that catch-up never goes back;
    /// * `disabled`: the entry's `status` is `disabled` (nothing written);
    /// * `missing`: the entry's hash does not exist (it was removed; nothing written).
    /// A wrongly typed key is an error reply and nothing is written.
    static let fire = RedisScript("""
        local want = {'hash', 'zset', 'list', 'set', 'list'}
        for i = 1, 5 do
          local t = redis.call('TYPE', KEYS[i])['ok']
          if t ~= 'none' and t ~= want[i] then
            return redis.error_reply('WRONGTYPE cron fire: ' .. KEYS[i] .. ' is a ' .. t .. ', expected a ' .. want[i])
          end
        end
        if redis.call('EXISTS', KEYS[1]) == 0 then return {'missing', ''} end
        if redis.call('HGET', KEYS[1], 'status') == 'disabled' then return {'disabled', ''} end
        local tick = tonumber(ARGV[2])
        local raw = redis.call('HGET', KEYS[1], 'last_tick_epoch')
        local last = raw and tonumber(raw)
        if last and tick <= last then return {'stale', raw} end
        if redis.call('ZADD', KEYS[2], 'NX', ARGV[2], ARGV[1]) == 0 then
          redis.call('HSET', KEYS[1], 'last_tick', ARGV[1], 'last_tick_epoch', ARGV[2])
          return {'taken', ''}
        end
        redis.call('SADD', KEYS[4], ARGV[4])
        redis.call('LPUSH', KEYS[5], ARGV[3])
        redis.call('HSET', KEYS[1], 'last_tick', ARGV[1], 'last_tick_epoch', ARGV[2], 'last_enqueue_time', ARGV[7])
        redis.call('LPUSH', KEYS[3], ARGV[5])
        redis.call('LTRIM', KEYS[3], 0, tonumber(ARGV[6]) - 1)
        redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. math.min(tonumber(ARGV[8]), tick))
        return {'fired', ''}
        """)

    /// Fires one past tick by hand (`workerctl cron run NAME --tick T`): the same claim (ZADD NX of
    /// the tick into `cron_job:NAME:enqueued`) and the same job as `fire`, but the cursor
    /// `last_tick_epoch` does not move (ticks between it and this one stay due for catch-up).
    ///
    /// Whether a tick was fired is known from its claim, which `fire` keeps while it is younger than
    /// the retention or after the cursor (`fire` prunes below `min(retention threshold, tick)`). A
    /// tick at or before the cursor and older than the retention may have had its claim pruned:
    /// it is refused (`forgotten`) rather than risk a second enqueue.
    ///
    /// KEYS: as `fire`. ARGV: 1–7 as `fire`, 8 the retention threshold (epoch; nothing is pruned).
    /// Returns `{outcome, detail}`: `fired`; `taken` (the tick's claim exists: fired before, by a
    /// scheduler or an earlier backfill); `forgotten` (detail: the cursor); `missing`.
    static let backfill = RedisScript("""
        local want = {'hash', 'zset', 'list', 'set', 'list'}
        for i = 1, 5 do
          local t = redis.call('TYPE', KEYS[i])['ok']
          if t ~= 'none' and t ~= want[i] then
            return redis.error_reply('WRONGTYPE cron backfill: ' .. KEYS[i] .. ' is a ' .. t .. ', expected a ' .. want[i])
          end
        end
        if redis.call('EXISTS', KEYS[1]) == 0 then return {'missing', ''} end
        if redis.call('ZSCORE', KEYS[2], ARGV[1]) then return {'taken', ''} end
        local tick = tonumber(ARGV[2])
        local raw = redis.call('HGET', KEYS[1], 'last_tick_epoch')
        local last = raw and tonumber(raw)
        if last and tick <= last and tick < tonumber(ARGV[8]) then return {'forgotten', raw} end
        redis.call('ZADD', KEYS[2], 'NX', ARGV[2], ARGV[1])
        redis.call('SADD', KEYS[4], ARGV[4])
        redis.call('LPUSH', KEYS[5], ARGV[3])
        redis.call('HSET', KEYS[1], 'last_enqueue_time', ARGV[7])
        redis.call('LPUSH', KEYS[3], ARGV[5])
        redis.call('LTRIM', KEYS[3], 0, tonumber(ARGV[6]) - 1)
        return {'fired', ''}
        """)

    /// Enqueues an entry's job now, outside its schedule (`workerctl cron run`): no tick is claimed
    /// and `last_tick` does not move.
    ///
    /// KEYS: 1 `cron_job:NAME`, 2 `cron_job:NAME:jid_history`, 3 `queues`, 4 `queue:Q`.
    /// ARGV: 1 job JSON, 2 queue name, 3 history JSON, 4 history size, 5 enqueue time text.
    /// Returns `fired`, or `missing` when the hash does not exist.
    static let runNow = RedisScript("""
        local want = {'hash', 'list', 'set', 'list'}
        for i = 1, 4 do
          local t = redis.call('TYPE', KEYS[i])['ok']
          if t ~= 'none' and t ~= want[i] then
            return redis.error_reply('WRONGTYPE cron run: ' .. KEYS[i] .. ' is a ' .. t .. ', expected a ' .. want[i])
          end
        end
        if redis.call('EXISTS', KEYS[1]) == 0 then return 'missing' end
        redis.call('SADD', KEYS[3], ARGV[2])
        redis.call('LPUSH', KEYS[4], ARGV[1])
        redis.call('HSET', KEYS[1], 'last_enqueue_time', ARGV[5])
        redis.call('LPUSH', KEYS[2], ARGV[3])
        redis.call('LTRIM', KEYS[2], 0, tonumber(ARGV[4]) - 1)
        return 'fired'
        """)

    /// Sets `status` of an existing entry. KEYS: 1 `cron_job:NAME`. ARGV: 1 status, 2 now epoch.
    /// Enabling also records `enabled_at_epoch` (ticks before it are not caught up).
    /// Returns the previous status (`""` if unset), or `missing` (false) when the hash does not exist.
    static let setStatus = RedisScript("""
        if redis.call('EXISTS', KEYS[1]) == 0 then return false end
        local previous = redis.call('HGET', KEYS[1], 'status') or ''
        redis.call('HSET', KEYS[1], 'status', ARGV[1])
        if ARGV[1] == 'enabled' and previous ~= 'enabled' then
          redis.call('HSET', KEYS[1], 'enabled_at_epoch', ARGV[2])
        end
        return previous
        """)
}
