/// One reading of a Redis server's memory (`INFO memory`): `used_memory` and `maxmemory`, in bytes. The one parser of
/// that reply: the runtime's `RedisRoom`, `/readyz` and `jobs explain` read it through here (docs/redis-full.md).
package struct RedisMemoryReading: Sendable, Equatable {
    /// `used_memory`.
    package let used: Int
    /// `maxmemory` (0: no limit).
    package let max: Int

    package init(used: Int, max: Int) {
        self.used = used
        self.max = max
    }

    /// Parses the text of `INFO memory`; nil when either field is missing or not a non-negative integer.
    package init?(info: String) {
        var used: Int?
        var max: Int?
        for line in info.split(whereSeparator: \.isNewline) {
            if line.hasPrefix("used_memory:") { used = Int(line.dropFirst("used_memory:".count)) }
            else if line.hasPrefix("maxmemory:") { max = Int(line.dropFirst("maxmemory:".count)) }
        }
        guard let used, let max, used >= 0, max >= 0 else { return nil }
        self.init(used: used, max: max)
    }

    /// `used / max`, 0 without a limit.
    package var ratio: Double { max > 0 ? Double(used) / Double(max) : 0 }

    /// At `maxmemory`: a Redis with `noeviction` refuses writes that grow it.
    package var isFull: Bool { max > 0 && used >= max }

    /// Reads the server's memory on `connection`.
    package static func read(_ connection: RedisConnection) throws(RedisError) -> RedisMemoryReading? {
        RedisMemoryReading(info: try connection.command("INFO", "memory").string ?? "")
    }
}
