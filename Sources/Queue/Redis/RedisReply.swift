/// One reply from Redis, copied out of hiredis' reply tree (so it outlives the C objects).
///
/// Bulk strings keep their exact bytes: job payloads are removed from lists by value (`LREM`),
/// so they must be sent back byte for byte, even when they are not valid UTF-8.
public enum RedisReply: Sendable, Equatable {
    case status(String)
    case error(String)
    case integer(Int64)
    case bulk([UInt8])
    case null
    case array([RedisReply])

    /// The bulk or status string as UTF-8 text; nil for other replies or invalid UTF-8.
    public var string: String? {
        switch self {
        case .bulk(let bytes): return UTF8Text.validated(bytes)
        case .status(let text): return text
        default: return nil
        }
    }

    public var bytes: [UInt8]? { if case .bulk(let b) = self { return b } else { return nil } }

    /// An integer reply, or a bulk string that holds an integer (`GET stat:processed`).
    public var integer: Int64? {
        switch self {
        case .integer(let i): return i
        case .bulk: return string.flatMap { Int64($0) }
        default: return nil
        }
    }

    public var double: Double? {
        switch self {
        case .integer(let i): return Double(i)
        case .bulk: return string.flatMap { Double($0) }
        default: return nil
        }
    }

    public var array: [RedisReply]? { if case .array(let a) = self { return a } else { return nil } }
    public var isNull: Bool { if case .null = self { return true } else { return false } }

    /// Throws the server's error if this is an error reply.
    @discardableResult
    public func checked() throws(RedisError) -> RedisReply {
        if case .error(let message) = self { throw RedisError.server(message) }
        return self
    }

    /// The server refused a write because it is not a writable master: `-READONLY` (a replica now)
    /// or `-NOREPLICAS` (a master without the replicas `min-replicas-to-write` asks for), also
    /// inside an `EXEC` result.
    public var isWriteRefusal: Bool {
        switch self {
        case .error(let message): return message.hasPrefix("READONLY") || message.hasPrefix("NOREPLICAS")
        case .array(let elements): return elements.contains(where: \.isWriteRefusal)
        default: return false
        }
    }

    /// `-NOSCRIPT`: the server does not have the script `EVALSHA` named (see `RedisConnection.evaluate`).
    public var isNoScript: Bool { if case .error(let message) = self { return message.hasPrefix("NOSCRIPT") } else { return false } }

    /// An array of bulk strings as text (nil elements and non-UTF-8 elements are skipped).
    public var strings: [String] { (array ?? []).compactMap(\.string) }
}
