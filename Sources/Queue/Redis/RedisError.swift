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
        case .server(let message) where Self.isOutOfMemoryReply(message):
            return "Redis is full (maxmemory reached; with maxmemory-policy noeviction it refuses writes until memory is freed): \(message)"
        case .server(let message) where Self.isPermissionRefusal(message):
            return "Redis refused a command this Redis user has no ACL permission for (\(message)); the fleet's user needs "
                + "\(RedisAccessCheck.fleetPermissions) (docs/deploy.md, Managed Redis)"
        case .server(let message): return "Redis error: \(message)"
        case .unexpectedReply(let what): return "unexpected Redis reply: \(what)"
        case .invalidURL(let why): return "invalid Redis URL: \(why)"
        }
    }

    /// True for Redis's refusal of a write at `maxmemory` (`-OOM command not allowed when used memory > 'maxmemory'`),
    /// also when it aborted a transaction holding such a command.
    public var isOutOfMemory: Bool {
        guard case .server(let message) = self else { return false }
        return Self.isOutOfMemoryReply(message)
    }

    static func isOutOfMemoryReply(_ message: String) -> Bool { message.hasPrefix("OOM ") }

    /// True for Redis's refusal of a command, key or channel the connection's ACL user may not use (`-NOPERM …`,
    /// which names the command: "this user has no permissions to run the 'evalsha' command").
    public var isPermissionRefusal: Bool {
        guard case .server(let message) = self else { return false }
        return Self.isPermissionRefusal(message)
    }

    static func isPermissionRefusal(_ message: String) -> Bool { message.hasPrefix("NOPERM") }

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
