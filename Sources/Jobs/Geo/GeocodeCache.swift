import Foundation
import WorkersQueue

/// Reverse-geocoding answers cached in Redis per provider, language, zoom and cell, with a TTL (24 h by
/// default): an answer in one language (or at one level of detail) is never served for another.
/// Empty answers are cached too: asking again within the TTL would give the same answer.
/// Stateless; safe from any thread.
public struct GeocodeCache: Sendable {
    public let redis: RedisPool
    public let provider: String
    /// The `accept-language` the answers were asked in, lower-cased, without spaces.
    public let language: String
    public let zoom: Int
    public let ttl: Int

    public init(redis: RedisPool, provider: String, language: String, zoom: Int, ttl: Int) {
        self.redis = redis
        self.provider = provider
        self.language = language.lowercased().filter { $0 != " " }
        self.zoom = zoom
        self.ttl = ttl
    }

    /// `geocode:<provider>:<language>:z<zoom>:<decimals>:<lat>,<lon>`.
    public func key(for cell: GeocodeCell) -> String {
        GeoKeys.answer(provider: provider, language: language, zoom: "\(zoom)", decimals: "\(cell.decimals)", cell: "\(cell)")
    }

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
