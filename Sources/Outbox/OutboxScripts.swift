import WorkersQueue

// The Lua of the Outbox module, all of it: one file per module (docs/architecture.md, "Who owns which Redis key").
// The Swift that runs each script stays with its type.

extension JidSearch {
    /// Lua: KEYS[1] = a container; ARGV[1] = 'list' or 'zset', ARGV[2] = first index, ARGV[3…] = wanted jids.
    /// Returns {length of the container (-1: not a list/zset), found jid…} for members first … first+pageSize-1,
    /// counted from the tail of a list (its oldest jobs: producers push at the head): the finder looks for jids of
    /// old outbox rows, so during a backlog they are found in the first pages instead of after the whole list
    /// (review L8). A sorted set is read by score from the lowest.
    static let pageScript = RedisScript("""
        local key, kind, first = KEYS[1], ARGV[1], tonumber(ARGV[2])
        if redis.call('TYPE', key).ok ~= kind then return {-1} end
        local length, members
        if kind == 'list' then
          length = redis.call('LLEN', key)
          members = redis.call('LRANGE', key, -(first + \(pageSize)), -(first + 1))
        else
          length = redis.call('ZCARD', key)
          members = redis.call('ZRANGE', key, first, first + \(pageSize - 1))
        end
        local wanted = {}
        for i = 3, #ARGV do wanted[ARGV[i]] = true end
        local result = {length}
        for _, member in ipairs(members) do
          local from = 1
          while true do
            local at = string.find(member, '"jid":"', from, true)
            if not at then break end
            local jid = string.sub(member, at + 7, at + 30)
            if wanted[jid] then
              wanted[jid] = nil
              result[#result + 1] = jid
            end
            from = at + 7
          end
        end
        return result
        """)
}
