import WorkersQueue

// The Lua of the BenchJobs module, all of it: one file per module (docs/architecture.md, "Who owns which Redis
// key"). The Swift that runs each script stays with its type.

extension LimitProbes {
    /// INCR running; raise max if exceeded.
    static let enter = RedisScript("""
        local n = redis.call('INCR', KEYS[1])
        local m = tonumber(redis.call('GET', KEYS[2]) or '0')
        if n > m then redis.call('SET', KEYS[2], n) end
        return n
        """)
}
