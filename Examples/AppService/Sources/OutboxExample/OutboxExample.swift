import Foundation
import WorkersOutbox

/// docs/outbox.md's "From Swift" example, compiled against the `Outbox` product alone (built, never run, by
/// scripts/test): an order row and its job committed in one PostgreSQL transaction, and a job an hour later.
public func enqueueOrder(pool: PostgresPool) throws -> String {
    try pool.withConnection { connection in
        let jid = try connection.transaction { conn in
            _ = try conn.execute("INSERT INTO orders DEFAULT VALUES")
            return try Outbox.enqueue(NewJob("ValidateReceiptJob", args: [.object(["user_id": 7])]), on: conn)
        }
        try Outbox.enqueue(NewJob("Report"), at: Date().addingTimeInterval(3600), on: connection)
        return jid
    }
}
