/// What went wrong talking to Redis. Every case names the server address so an operator can
/// tell which instance failed.
public enum RedisError: Error, Sendable, CustomStringConvertible, Equatable {
    /// Could not open the TCP connection (refused, unreachable, DNS, timeout while connecting).
    case connectionFailed(address: String, reason: String)
    /// The connection broke or timed out during a command. The connection reconnects on next use.
    case io(address: String, reason: String)
    /// The server answered with an error reply (`-ERR ...`, `-NOSCRIPT ...`, `-WRONGTYPE ...`).
    case server(String)
    /// The reply did not have the shape the caller expected.
    case unexpectedReply(String)
    /// The URL could not be parsed.
    case invalidURL(String)

    public var description: String {
        switch self {
        case .connectionFailed(let address, let reason): return "cannot connect to Redis at \(address): \(reason)"
        case .io(let address, let reason): return "Redis connection to \(address) failed: \(reason)"
        case .server(let message): return "Redis error: \(message)"
        case .unexpectedReply(let what): return "unexpected Redis reply: \(what)"
        case .invalidURL(let why): return "invalid Redis URL: \(why)"
        }
    }

    /// True when retrying on a fresh connection may succeed (the server was unreachable or the
    /// link broke), false for errors the server returned or programming errors.
    public var isConnectionFailure: Bool {
        switch self {
        case .connectionFailed, .io: return true
        case .server(let message): return message.hasPrefix("LOADING") || message.hasPrefix("READONLY")
            || message.hasPrefix("NOREPLICAS")
            || message.hasPrefix("MASTERDOWN") || message.hasPrefix("BUSY")
        default: return false
        }
    }
}
