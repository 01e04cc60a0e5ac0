import Foundation
import WorkersQueue

extension WorkersClient {
    /// Why job `jid` is not running, or what became of it (`JobExplain`, docs/workerctl.md "Why isn't my job
    /// running?"): the first reason found, looked for on every shard (a job lives on the shard of its queue).
    ///
    /// A jid found nowhere in Redis is answered by its completion record (`.completed`: done, dead or cancelled, for
    /// classes that keep one, `JobOptions.completionRecord`), else by `ledger` (`.done`; `PostgresLedgerLookup` of the
    /// `Outbox` product reads `job_ledger`), else `.unknown` — or `.unreadableRecord` when `completion:<jid>` holds
    /// something else (docs/writing-jobs.md, "What became of my job", says what each unknown means).
    /// Every read is bounded (`JobExplain`'s budgets). Runs on the client's threads; safe from any task.
    /// Throws `AdminError.invalidArgument` for a jid that cannot be searched, `RedisError` on I/O, and what
    /// `ledger` throws.
    public func explain(jid: String, ledger: (any JobLedgerLookup)? = nil) async throws -> JobExplanation {
        try await status(jid: jid, ledger: ledger).explanation
    }

    /// Job `jid`'s status: its state, attempts, progress (`progress:<jid>`), a cancel request
    /// (`cancelled-<jid>`) and `explain`'s reason, from the shard it is on (with several shards: the first shard
    /// that knows it, default first). Same threads, bounds and errors as `explain`.
    public func status(jid: String, ledger: (any JobLedgerLookup)? = nil) async throws -> JobStatus {
        try JobAdmin.validate(jid: jid)
        let now = Date()
        let perShard = try await withEachShardNamed { connection, shard in
            try JobExplain(connection: connection).status(jid: jid, now: now, shard: shard)
        }
        if let known = perShard.first(where: { !$0.explanation.isUnknown }) { return known }
        // An unreadable completion record says more than a plain "unknown".
        let first = perShard.first(where: { if case .unreadableRecord = $0.explanation { true } else { false } }) ?? perShard[0]
        guard let ledger else { return first }
        // Found in no shard's Redis: the ledger (once, not per shard).
        let row = try await withConnection { _ in try ledger.row(jid: jid) }
        guard let row else { return first }
        var done = first
        done.explanation = .done(finishedAt: row.finishedAt, className: row.className, queue: row.queue)
        return done
    }

    /// `withEachShard`, the body also given the shard's name; the values in shard order (default first).
    private func withEachShardNamed<T: Sendable>(_ body: @escaping @Sendable (RedisConnection, String) throws -> T) async throws -> [T] {
        let names = shardNames
        var out: [T] = []
        for name in names { out.append(try await withConnection(shard: name) { try body($0, name) }) }
        return out
    }
}
