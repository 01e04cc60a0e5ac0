import Foundation
import WorkersQueue

/// The batch pages (`/batches`, `/batch/BID`) of one shard, over `BatchAdmin` — what `workerctl batches ls|show`
/// reads. Read-only: batches have no operator actions. A batch lives on the one shard of its queues
/// (docs/sharding.md), so each shard lists its own. Descriptions, bids, callback classes and jids go through
/// `HTML.escape`.
extension Pages {
    /// How many batches `/batches` lists per shard (newest first), as `workerctl batches ls`'s default.
    static let batchListLimit = 100

    func batchList(_ connection: RedisConnection) throws -> Fragment {
        let batches = try BatchAdmin.list(connection, limit: Self.batchListLimit)
        let rows = batches.map { batch -> [String] in
            [batchLink(batch.bid), batch.state, "\(batch.total)", "\(batch.pending)", "\(batch.failures)", "\(batch.dead)",
             HTML.time(batch.createdAt), HTML.escape(batch.description)]
        }
        return Fragment(title: "Batches (\(batches.count))", body: """
            <p class="muted">The newest \(Self.batchListLimit) batches, newest first. Pending counts dead jobs too (as Sidekiq Pro does).</p>
            \(rows.isEmpty ? "<p>No batches.</p>"
              : HTML.table(["Batch", "State", "Total", "Pending", "Failures", "Dead", "Created (UTC)", "Description"], rows, id: "batches"))
            """)
    }

    /// How many failed and dead jids the batch page reads and shows, each (review M5).
    static let batchJidLimit = 200

    /// One batch: counts, callbacks and the jids that failed and died (linked to their job pages); nil on a shard
    /// that does not hold it (never created, or expired). Throws `AdminError.invalidArgument` for a malformed bid.
    func batch(_ connection: RedisConnection, bid: String) throws -> Fragment? {
        guard Batches.isValidBid(bid) else { throw AdminError.invalidArgument(BatchError.invalidBid(bid).description) }
        guard let detail = try BatchAdmin.detail(connection, bid: bid, limit: Self.batchJidLimit) else { return nil }
        let batch = detail.summary
        let fields: [(String, String)] = [
            ("State", batch.state), ("Description", batch.description), ("Created (UTC)", HTML.time(batch.createdAt)),
            ("Total", "\(batch.total)"), ("Pending", "\(batch.pending)"), ("Failures", "\(batch.failures)"),
            ("Dead", "\(batch.dead)"),
            ("On complete", callback(batch.onComplete, firedAt: batch.completeAt)),
            ("On success", callback(batch.onSuccess, firedAt: batch.successAt)),
        ]
        return Fragment(title: "Batch \(bid)", body: """
            \(HTML.table(["Field", "Value"], fields.map { [HTML.escape($0.0), HTML.escape($0.1)] }, id: "batch"))
            \(detail.isPartial ? "<p id=\"partial\">Partial: at most \(Self.batchJidLimit) jids of each list are shown. <code>workerctl batches show BID</code> lists all.</p>" : "")
            <h2>Failed jobs (\(detail.failedCount))</h2>\(jidList(detail.failedJids, id: "failed"))
            <h2>Dead jobs (\(detail.deadCount))</h2>\(jidList(detail.deadJids, id: "dead"))
            """)
    }

    private func batchLink(_ bid: String) -> String {
        "<a href=\"/batch/\(HTML.urlComponent(bid))\">\(HTML.escape(bid))</a>"
    }

    /// `Class (fired 2026-…)`, `Class (not fired)`, or `-` without a callback (plain text; escaped by the caller).
    private func callback(_ className: String?, firedAt: Double?) -> String {
        guard let className else { return "-" }
        return "\(className) (\(firedAt.map { "fired \(HTML.time($0))" } ?? "not fired"))"
    }

    private func jidList(_ jids: [String], id: String) -> String {
        if jids.isEmpty { return "<p>None.</p>" }
        let items = jids.map { "<li><a href=\"/job/\(HTML.urlComponent($0))\">\(HTML.escape($0))</a></li>" }
        return "<ul id=\"\(HTML.escape(id))\">\(items.joined())</ul>"
    }
}
