/// The Lua scripts behind the limiters. Every script reads the clock with Redis `TIME`, so the
/// machines' clocks never matter and all processes share one time line.
package enum LimitScripts {
    /// Admits one holder through every limit of a job at once, or none of them.
    /// KEYS: the instance keys; ARGV[1] the lease token, then per key three values: kind, max, ms.
    /// Pass 1 checks every limit without changing anything (expired leases are removed); pass 2
    /// takes a lease / counts the admission / takes a token in each. So a job that one limit refuses
    /// consumes nothing from the others.
    /// Returns {1, 0, 0, now} when admitted; {0, wait ms, index of the refusing key (1-based), now} otherwise,
    /// where wait is when that limit could next admit (lease expiry, window end, next token).
    public static let admit = RedisScript("""
        local t = redis.call('TIME')
        local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
        local token = ARGV[1]
        local state = {}
        for i = 1, #KEYS do
          local kind, max, ms = ARGV[3 * i - 1], tonumber(ARGV[3 * i]), tonumber(ARGV[3 * i + 1])
          local key = KEYS[i]
          if kind == 'concurrent' then
            redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
            if redis.call('ZCARD', key) >= max then
              local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
              return {0, math.max(1, tonumber(first[2]) - now), i, now}
            end
          elseif kind == 'window' then
            local idx = math.floor(now / ms)
            local h = redis.call('HMGET', key, 'window', 'count')
            local count = 0
            if tonumber(h[1]) == idx then count = tonumber(h[2]) or 0 end
            if count >= max then return {0, math.max(1, (idx + 1) * ms - now), i, now} end
            state[i] = {idx, count}
          else
            local h = redis.call('HMGET', key, 'tokens', 'at')
            local tokens = tonumber(h[1]) or max
            local at = tonumber(h[2]) or now
            tokens = math.min(max, tokens + math.max(0, now - at) * max / ms)
            if tokens < 1 then return {0, math.max(1, math.ceil((1 - tokens) * ms / max)), i, now} end
            state[i] = tokens
          end
        end
        for i = 1, #KEYS do
          local kind, ms = ARGV[3 * i - 1], tonumber(ARGV[3 * i + 1])
          local key = KEYS[i]
          if kind == 'concurrent' then
            redis.call('ZADD', key, now + ms, token)
            redis.call('PEXPIRE', key, ms + 60000)
          elseif kind == 'window' then
            redis.call('HSET', key, 'window', state[i][1], 'count', state[i][2] + 1)
            redis.call('PEXPIRE', key, ms * 2)
          else
            redis.call('HSET', key, 'tokens', tostring(state[i] - 1), 'at', now)
            redis.call('PEXPIRE', key, ms * 2)
          end
        end
        return {1, 0, 0, now}
        """)

    /// Holds a `bucket` or `window` instance back: no admission before now + pause (a provider's 429 with
    /// Retry-After). KEYS[1] the instance key; ARGV: kind, max, ms, pause ms. A bucket gets
    /// `tokens = min(tokens, 1 − pause × max / ms)` (its next token comes after the pause, never sooner than it
    /// already would). A window only has the current window's count, so it is filled up to `max`: the pause ends
    /// with the current window, however long it was asked to be. Returns the ms until the instance admits again.
    public static let hold = RedisScript("""
        local t = redis.call('TIME')
        local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
        local kind, max, ms, pause = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
        local key = KEYS[1]
        if kind == 'bucket' then
          local h = redis.call('HMGET', key, 'tokens', 'at')
          local tokens = tonumber(h[1]) or max
          local at = tonumber(h[2]) or now
          tokens = math.min(max, tokens + math.max(0, now - at) * max / ms)
          tokens = math.min(tokens, 1 - pause * max / ms)
          redis.call('HSET', key, 'tokens', tostring(tokens), 'at', now)
          redis.call('PEXPIRE', key, ms * 2 + pause)
          return math.ceil((1 - tokens) * ms / max)
        end
        local idx = math.floor(now / ms)
        redis.call('HSET', key, 'window', idx, 'count', max)
        redis.call('PEXPIRE', key, ms * 2)
        return (idx + 1) * ms - now
        """)

    /// Renews leases. KEYS: concurrent instance keys; ARGV per key: token, lease ms. A lease that is no
    /// longer there (it expired and was reclaimed) is not re-added. Returns how many were renewed.
    public static let renew = RedisScript("""
        local t = redis.call('TIME')
        local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
        local renewed = 0
        for i = 1, #KEYS do
          local token, ms = ARGV[2 * i - 1], tonumber(ARGV[2 * i])
          if redis.call('ZSCORE', KEYS[i], token) then
            redis.call('ZADD', KEYS[i], now + ms, token)
            redis.call('PEXPIRE', KEYS[i], ms + 60000)
            renewed = renewed + 1
          end
        end
        return renewed
        """)
}
