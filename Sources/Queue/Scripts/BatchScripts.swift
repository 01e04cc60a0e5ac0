/// The Lua of batches (docs/batches.md): creating a batch with its jobs, and counting a batch job's
/// outcome. The counting functions are not a script of their own: `Scripts.complete` (the settle
/// script) and `Scripts.recover` (the orphan sweep) include `BatchScripts.functions` and call
/// `batch_outcome` in the same atomic call that removes the job from its in-flight list, so a
/// job's outcome is counted if and only if that call settled it.
///
/// Keys of batch BID (all expire at the hash's `expires_at`):
/// - `b-BID` HASH: `total`, `pending` (jobs not yet succeeded), `dead` (jobs finished without
///   success), `created_at`, `description`, `expires_at`, callbacks `cb_EVENT_queue` /
///   `cb_EVENT_head` / `cb_EVENT_tail`, and the once-flags `complete_at` / `success_at`.
/// - `b-BID-jids` SET: every jid of the batch (a job whose jid is not in it is not counted).
/// - `b-BID-done` SET: jids whose end (success, dead, dropped) is counted: the exactly-once guard.
/// - `b-BID-failed` SET: jids that failed at least once and have not succeeded (Sidekiq Pro's failures).
/// - `b-BID-died` SET: jids counted as dead.
/// - `batches` ZSET: bid → created_at (for `workerctl batches ls`).
enum BatchScripts {
    /// The keys `functions` names: a script that includes them starts its own from these (`BatchScripts.keys.dead`).
    static let keys = ScriptKeys().queues.queueKey.batchKeys

    /// `batch_outcome(raw, outcome, now)`: `outcome` is `success`, `retry` (failed, will run again)
    /// or `dead` (failed for good: dead set, or dropped because `retry` is false). Does nothing for a
    /// job without a top-level string `bid` or whose jid is not in `b-BID-jids`.
    ///
    /// Invariants: `pending` drops once per jid (the first success: `SADD b-BID-done` returned 1, or a
    /// counted death revived by a later success: `SREM b-BID-died` returned 1); `dead` rises once per
    /// jid; each callback is pushed at most once (`HSETNX b-BID EVENT_at`), `complete` when every jid
    /// is in `-done`, `success` when `pending` is 0; `complete` before `success` when both are due.
    static let functions = """
        local function batch_push(key, bid, event, now)
          if redis.call('HSETNX', key, event .. '_at', now) == 0 then return end
          local b = redis.call('HMGET', key, 'total', 'pending', 'dead', 'cb_' .. event .. '_queue',
                               'cb_' .. event .. '_head', 'cb_' .. event .. '_tail')
          if not b[4] then return end
          local failures = redis.call('SCARD', batch_failed_key(bid))
          local status = '{"bid":"' .. bid .. '","event":"' .. event .. '","total":' .. (tonumber(b[1]) or 0) ..
            ',"pending":' .. (tonumber(b[2]) or 0) .. ',"failures":' .. failures .. ',"dead":' .. (tonumber(b[3]) or 0) .. '}'
          redis.call('SADD', QUEUES, b[4])
          redis.call('LPUSH', queue_key(b[4]), b[5] .. status .. b[6] .. ',"enqueued_at":' .. now .. '}')
        end
        local function batch_fire(key, bid, now)
          local b = redis.call('HMGET', key, 'total', 'pending')
          local total, pending = tonumber(b[1]) or 0, tonumber(b[2]) or 0
          if redis.call('SCARD', batch_done_key(bid)) >= total then batch_push(key, bid, 'complete', now) end
          if pending <= 0 then batch_push(key, bid, 'success', now) end
        end
        local function batch_outcome(raw, outcome, now)
          if not string.find(raw, '"bid"', 1, true) then return end
          local ok, job = pcall(cjson.decode, raw)
          if not ok or type(job) ~= 'table' then return end
          local bid, jid = job['bid'], job['jid']
          if type(bid) ~= 'string' or type(jid) ~= 'string' then return end
          local key = batch_key(bid)
          if redis.call('SISMEMBER', batch_jids_key(bid), jid) == 0 then return end
          local expires = redis.call('HGET', key, 'expires_at')
          if outcome == 'retry' then
            -- A late copy failing after the job's end was counted changes nothing.
            if redis.call('SISMEMBER', batch_done_key(bid), jid) == 1 then return end
            redis.call('SADD', batch_failed_key(bid), jid)
            if expires then redis.call('EXPIREAT', batch_failed_key(bid), expires) end
            return
          elseif outcome == 'success' then
            if redis.call('SADD', batch_done_key(bid), jid) == 1 then
              redis.call('HINCRBY', key, 'pending', -1)
            elseif redis.call('SREM', batch_died_key(bid), jid) == 1 then
              redis.call('HINCRBY', key, 'pending', -1)
              redis.call('HINCRBY', key, 'dead', -1)
            else
              return
            end
            redis.call('SREM', batch_failed_key(bid), jid)
          else
            if redis.call('SADD', batch_done_key(bid), jid) == 0 then return end
            redis.call('SADD', batch_died_key(bid), jid)
            redis.call('HINCRBY', key, 'dead', 1)
            if expires then redis.call('EXPIREAT', batch_died_key(bid), expires) end
          end
          if expires then redis.call('EXPIREAT', batch_done_key(bid), expires) end
          batch_fire(key, bid, now)
        end
        """

    /// Creates batch ARGV[1] and pushes its jobs, atomically: the jobs are in their queues if and
    /// only if the batch's total counts them. ARGV: bid, now, expires_at (epoch s), description,
    /// then for `complete` and `success`: queue, head, tail ("" queue = no callback), then triples
    /// queue, jid, payload. Returns 0 if the batch already exists (nothing written), else 1. A batch
    /// of no jobs fires its callbacks at once. Also drops from `batches` the entries older than this
    /// batch's lifetime, so the ZSET does not grow without bound.
    static let create = RedisScript(keys: keys.batches, functions + """

        local bid, now, expires, description = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
        local key = batch_key(bid)
        if redis.call('EXISTS', key) == 1 or redis.call('EXISTS', batch_jids_key(bid)) == 1 then return 0 end
        local total = (#ARGV - 10) / 3
        redis.call('HSET', key, 'total', total, 'pending', total, 'dead', 0, 'created_at', now,
                   'description', description, 'expires_at', expires)
        if ARGV[5] ~= '' then redis.call('HSET', key, 'cb_complete_queue', ARGV[5], 'cb_complete_head', ARGV[6], 'cb_complete_tail', ARGV[7]) end
        if ARGV[8] ~= '' then redis.call('HSET', key, 'cb_success_queue', ARGV[8], 'cb_success_head', ARGV[9], 'cb_success_tail', ARGV[10]) end
        redis.call('EXPIREAT', key, expires)
        redis.call('ZADD', BATCHES, now, bid)
        -- The listing forgets batches older than this one's lifetime (their keys have expired by then).
        redis.call('ZREMRANGEBYSCORE', BATCHES, '-inf', '(' .. (2 * tonumber(now) - tonumber(expires)))
        for i = 11, #ARGV, 3 do
          redis.call('SADD', batch_jids_key(bid), ARGV[i + 1])
          redis.call('SADD', QUEUES, ARGV[i])
          redis.call('LPUSH', queue_key(ARGV[i]), ARGV[i + 2])
        end
        if total > 0 then redis.call('EXPIREAT', batch_jids_key(bid), expires) end
        batch_fire(key, bid, now)
        return 1
        """)
}
