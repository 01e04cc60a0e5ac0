import Foundation

/// A fixed-size set of `RedisConnection`s shared by many threads.
///
/// Invariant: a connection is either idle in `idle` or lent to exactly one caller of
/// `withConnection`, so each connection is used by one thread at a time. Connections are opened
/// lazily, up to `maxConnections`; a caller that finds none free waits (blocking its thread:
/// async code goes through `WorkersClient`, which keeps these waits off the cooperative pool).
///
/// Broken connections are replaced: one the server hung up on while it sat idle (`CLIENT KILL`,
/// idle `timeout`, restart) is reconnected before it is lent (`closeIfPeerHungUp`), and one whose
/// link broke during a command is dropped on return, its slot freed for a new one. The command
/// that met a broken link throws `RedisError.io` and is not retried here: its write may have
/// reached Redis.
public final class RedisPool: @unchecked Sendable {
    public let endpoint: RedisEndpoint
    public let maxConnections: Int
    private let commandTimeout: Duration
    private let condition = NSCondition()
    private var idle: [RedisConnection] = []
    private var opened = 0

    public init(endpoint: RedisEndpoint, maxConnections: Int = 4, commandTimeout: Duration = .seconds(10)) {
        self.endpoint = endpoint
        self.maxConnections = max(1, maxConnections)
        self.commandTimeout = commandTimeout
    }

    public convenience init(url: String, maxConnections: Int = 4) throws(RedisError) {
        self.init(endpoint: try RedisEndpoint(url: url), maxConnections: maxConnections)
    }

    /// Lends a connection to `body`. A connection whose link broke is dropped instead of being
    /// returned to the pool.
    public func withConnection<T>(_ body: (RedisConnection) throws -> T) throws -> T {
        let connection = try checkout()
        defer { checkin(connection) }
        return try body(connection)
    }

    private func checkout() throws(RedisError) -> RedisConnection {
        condition.lock()
        while idle.isEmpty && opened >= maxConnections { condition.wait() }
        if let connection = idle.popLast() {
            condition.unlock()
            connection.closeIfPeerHungUp()  // its next command reconnects
            return connection
        }
        opened += 1
        condition.unlock()
        do {
            return try RedisConnection(endpoint: endpoint, commandTimeout: commandTimeout)
        } catch {
            condition.lock()
            opened -= 1
            condition.signal()
            condition.unlock()
            throw error
        }
    }

    private func checkin(_ connection: RedisConnection) {
        condition.lock()
        if connection.isConnected { idle.append(connection) } else { opened -= 1 }
        condition.signal()
        condition.unlock()
    }
}
