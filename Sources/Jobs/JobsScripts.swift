import WorkersQueue

// The Lua of the Jobs module, all of it: one file per module (docs/architecture.md, "Who owns which Redis key").
// The Swift that runs each script stays with its type.

/// The scripts of the fleet-wide provider block (Geo: `ProviderBlock`, keys `ratelimit:<provider>:blocked` / `:probe`).
extension ProviderBlock {
    /// KEYS[1] block key, KEYS[2] probe key; ARGV[1] this caller's probe token, ARGV[2] probe lease ms.
    /// Returns {status, ms}: 1 open (no block), 4 this caller is the probe, 2 blocked (ms = until resume),
    /// 3 another caller probes (ms = its lease left).
    static let enterScript = RedisScript("""
        local blocked = redis.call('GET', KEYS[1])
        if not blocked then return {1, 0} end
        local t = redis.call('TIME')
        local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
        local resume = tonumber(blocked)
        if now < resume then return {2, resume - now} end
        if redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', tonumber(ARGV[2])) then return {4, 0} end
        return {3, math.max(1, redis.call('PTTL', KEYS[2]))}
        """)

    /// KEYS[1] block key, KEYS[2] probe key; ARGV[1] pause ms, ARGV[2] the caller's probe token or "".
    /// Sets resume = now + pause; ends the caller's probe. Returns {1 when this call started the block, pause ms}.
    static let blockScript = RedisScript("""
        local t = redis.call('TIME')
        local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
        local started = 1 - redis.call('EXISTS', KEYS[1])
        redis.call('SET', KEYS[1], now + tonumber(ARGV[1]))
        if ARGV[2] ~= '' and redis.call('GET', KEYS[2]) == ARGV[2] then redis.call('DEL', KEYS[2]) end
        return {started, tonumber(ARGV[1])}
        """)

    /// KEYS[1] block key; returns -1 when not blocked, else the ms until resume (0 once a probe may go).
    static let blockedScript = RedisScript("""
        local blocked = redis.call('GET', KEYS[1])
        if not blocked then return -1 end
        local t = redis.call('TIME')
        local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
        return math.max(0, tonumber(blocked) - now)
        """)

    /// KEYS[1] block key, KEYS[2] probe key; ARGV[1] token, ARGV[2] 1 = lift the block, 0 = only release.
    static let endProbeScript = RedisScript("""
        if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
        if ARGV[2] == '1' then redis.call('DEL', KEYS[1], KEYS[2]) else redis.call('DEL', KEYS[2]) end
        return 1
        """)
}
