import Foundation
import Queue

/// Reverse-geocoding answers cached in Redis per provider and cell, with a TTL (24 h by default).
/// Empty answers are cached too: asking again within the TTL would give the same answer.
/// Stateless; safe from any thread.
public struct GeocodeCache: Sendable {
    public let redis: RedisPool
    public let provider: String
    public let ttl: Int

    public init(redis: RedisPool, provider: String, ttl: Int) {
        self.redis = redis
        self.provider = provider
        self.ttl = ttl
    }

    public func key(for cell: GeocodeCell) -> String { "geocode:\(provider):\(cell.decimals):\(cell)" }

    /// The cached answer, or nil when there is none (or it cannot be read: then it is refetched).
    public func lookup(_ cell: GeocodeCell) throws -> GeocodeResult? {
        let reply = try redis.withConnection { try $0.command("GET", key(for: cell)) }
        guard let bytes = reply.bytes else { return nil }
        return try? JSONDecoder().decode(GeocodeResult.self, from: Data(bytes))
    }

    public func store(_ result: GeocodeResult, for cell: GeocodeCell) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let data = try encoder.encode(result)
        _ = try redis.withConnection { try $0.command("SET", key(for: cell), Array(data), "EX", ttl).checked() }
    }
}
