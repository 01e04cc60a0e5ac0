import Foundation
import WorkersQueue
import WorkersStorage

/// Removes the `job_outbox` rows (docs/outbox.md) whose `args` name one person, inside the erasure's transaction.
///
/// The outbox keeps a copy of every job enqueued through PostgreSQL (`workers_enqueue`): unpushed rows until the
/// relay pushes them, pushed rows for the retention window (7 days), so that the lost-job finder can push a job
/// again. Such a copy holds whatever the job's args hold (user ids, receipts, purchase tokens), and `job_outbox`
/// has no foreign key to `users`, so `DeletionPolicy.verifyCoverage` cannot see it: it is matched by content.
///
/// A row names the person exactly when `RedisJobPurger` would say so of the same job (the same needles, user id
/// and address, as whole tokens in any string of `args`, any depth, any letter case): PostgreSQL prefilters on the
/// string values of `args` (`jsonb_path_query`, so JSON escaping does not matter; a sequential scan of the table,
/// once per erasure), and each candidate is decided by `RedisJobPurger.arguments(_:containAnyOf:)`.
///
/// Ordering (why no purged job comes back): the rows are deleted in the erasure's transaction, before the Redis
/// purge that follows its commit. A relay or lost-job finder that locked a row first (`FOR UPDATE`) makes the
/// DELETE wait until it committed its push, which the Redis purge then removes; one that comes later finds no row.
///
/// Stateless; runs on the caller's connection.
enum OutboxJobPurger {
    /// Deletes the rows naming `userID` or `email`; returns how many.
    static func purge(userID: UUID, email: String?, on connection: PostgresConnection) throws -> Int {
        let needles = RedisJobPurger.needles(userID: userID, email: email)
        let candidates = try connection.query("""
            SELECT o.id, o.args::text AS args FROM job_outbox o
            WHERE EXISTS (SELECT 1 FROM jsonb_path_query(o.args, 'strict $.**') v, unnest($1::text[]) n
                          WHERE jsonb_typeof(v) = 'string' AND strpos(lower(v #>> '{}'), n) > 0)
            FOR UPDATE OF o
            """, [needles])
        var ids: [Int] = []
        for row in candidates {
            guard case .array(let args)? = try? JSONValue.parse(try row.string("args")),
                  RedisJobPurger.arguments(args, containAnyOf: needles) else { continue }
            ids.append(try row.int("id"))
        }
        if ids.isEmpty { return 0 }
        return try connection.execute("DELETE FROM job_outbox WHERE id = ANY($1::bigint[])", [ids])
    }
}
