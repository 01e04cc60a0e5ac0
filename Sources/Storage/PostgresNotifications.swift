import CWorkersLibPQ
import Foundation

/// LISTEN/NOTIFY on a `PostgresConnection` (libpq's `PQnotifies`, waiting with `poll` on `PQsocket`).
///
/// A notification is delivered to listening sessions when the notifying transaction commits, never for a
/// rollback. libpq queues the ones that arrive while a statement runs; `waitForNotifications` returns those
/// first. Same thread rule as the connection: only its owning thread calls these.
extension PostgresConnection {
    /// `LISTEN channel`. The channel must be a plain lowercase identifier (`[a-z_][a-z0-9_]*`): it is an
    /// identifier in the SQL text, not a parameter.
    public func listen(_ channel: String) throws {
        guard let first = channel.utf8.first, (97...122).contains(first) || first == 95,
              channel.utf8.allSatisfy({ (97...122).contains($0) || (48...57).contains($0) || $0 == 95 }),
              channel.utf8.count <= 63 else {
            throw PostgresError(category: .usage, message: "invalid channel name \(channel)")
        }
        try execute("LISTEN \(channel)")
    }

    /// Returns the channels of the notifications received so far (each notification once), without
    /// blocking; throws `.connection` when the session is lost.
    public func takeNotifications() throws -> [String] {
        guard let handle else { throw PostgresError(category: .connection, message: "connection is closed") }
        guard PQconsumeInput(handle) == 1 else {
            throw PostgresError(category: .connection, message: "connection lost while reading notifications")
        }
        var channels: [String] = []
        while let notification = PQnotifies(handle) {
            channels.append(String(cString: notification.pointee.relname))
            PQfreemem(notification)
        }
        return channels
    }

    /// Waits until a notification arrives or `timeout` passes (at most an hour; a negative timeout does not
    /// wait), and returns the channels received (empty after a timeout). Returns at once when notifications are
    /// already queued.
    public func waitForNotifications(timeout: Duration) throws -> [String] {
        let queued = try takeNotifications()
        if !queued.isEmpty { return queued }
        guard let handle else { throw PostgresError(category: .connection, message: "connection is closed") }
        var descriptor = pollfd(fd: PQsocket(handle), events: Int16(POLLIN), revents: 0)
        guard descriptor.fd >= 0 else { throw PostgresError(category: .connection, message: "connection has no socket") }
        let parts = timeout.components
        let seconds = Double(parts.seconds) + Double(parts.attoseconds) / 1e18
        let milliseconds = Int32(max(0, min(seconds, 3600)) * 1000)
        let ready = poll(&descriptor, 1, milliseconds)
        if ready < 0 && errno != EINTR {
            throw PostgresError(category: .connection, message: "poll failed: errno \(errno)")
        }
        return ready > 0 ? try takeNotifications() : []
    }
}
