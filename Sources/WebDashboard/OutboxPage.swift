import Foundation
import WorkersOutbox
import WorkersStorage
import WorkersClient

/// The outbox page's source: `job_outbox` in PostgreSQL (docs/outbox.md), read through `OutboxAdmin` — the
/// same calls as `workerctl outbox status`. libpq blocks, so every read runs on this source's own threads,
/// never on the server's event loop. Thread-safe: the pool and the threads are.
struct OutboxSource: Sendable {
    let pool: PostgresPool
    let threads: BlockingThreads

    /// Opens no connection yet (the pool connects on first use, at most two at a time).
    init(databaseURL: String) {
        pool = PostgresPool(url: databaseURL, maxConnections: 2)
        threads = BlockingThreads(count: 2, name: "WebPG")
    }

    func shutdown() {
        threads.shutdown()
        pool.shutdown()
    }

    /// The summary and the three lists, from one connection.
    func load(limit: Int = 50) async throws -> OutboxPage {
        let pool = pool
        return try await threads.run {
            try pool.withConnection { connection in
                OutboxPage(summary: try OutboxAdmin.summary(connection),
                           pending: try OutboxAdmin.entries(connection, .pending, limit: limit),
                           errored: try OutboxAdmin.entries(connection, .errored, limit: limit),
                           recovered: try OutboxAdmin.entries(connection, .recovered, limit: limit))
            }
        }
    }
}

/// What `/outbox` shows: counts, then the rows waiting for the relay, the rows it refused and the rows the
/// lost-job finder pushed again. Every value from the table goes through `HTML.escape`.
struct OutboxPage: Sendable {
    var summary: OutboxSummary
    var pending: [OutboxEntry]
    var errored: [OutboxEntry]
    var recovered: [OutboxEntry]

    /// Without a database the page says how to give one.
    static let notConfigured = Fragment(title: "Outbox", body: """
        <p>No database configured: start <code>workerctl web</code> with <code>--database-url</code> (or
        <code>DATABASE_URL</code>) to see the transactional outbox (<code>job_outbox</code>).</p>
        """)

    /// A row's arguments as shown (review M11): secrets and personal data redacted, cut to 200 characters.
    static func shownArgs(_ args: String) -> String {
        let text = ArgsRedactor.redactedText(ofArgsJSON: args)
        return text.count > 200 ? String(text.prefix(200)) + "…" : text
    }

    func fragment() -> Fragment {
        let s = summary
        // Counts stop at OutboxAdmin.exactUpTo (no query reads the whole table); larger totals are estimates.
        let about = s.estimated ? "≈ " : ""
        let counts = HTML.table(
            ["Live relays", "Pending", "Oldest pending", "Refused", "Pushed (kept)", "Pushed last hour", "Pushed again", "Last push"],
            [["<span id=\"outbox-live-relays\">\(s.liveRelays)</span>",
              "<span id=\"outbox-pending\">\(s.pending)</span>", s.oldestPendingAge.map { HTML.duration($0.inSeconds) } ?? "",
              "<span id=\"outbox-errored\">\(s.errored)</span>", "\(about)\(s.pushedKept)", "\(about)\(s.pushedLastHour)",
              "<span id=\"outbox-recovered\">\(s.recovered)</span>", HTML.time(s.lastPushedAt?.timeIntervalSince1970)]], id: "outbox-summary")
        let warning = s.noRelayWarning.map { "<p class=\"warning\" id=\"outbox-no-relay\"><strong>\(HTML.escape($0))</strong></p>" } ?? ""
        func rows(_ entries: [OutboxEntry], last: (OutboxEntry) -> [String]) -> [[String]] {
            entries.map { entry in
                ["\(entry.id)", "<a href=\"/job/\(HTML.urlComponent(entry.jid))\">\(HTML.escape(entry.jid))</a>",
                 HTML.escape(entry.className), HTML.escape(entry.queue),
                 HTML.escape(Self.shownArgs(entry.args)),
                 HTML.time(entry.createdAt.timeIntervalSince1970)] + last(entry)
            }
        }
        let base = ["Id", "Jid", "Class", "Queue", "Arguments", "Committed"]
        func section(_ title: String, _ id: String, _ headers: [String], _ rows: [[String]], empty: String) -> String {
            "<h2>\(HTML.escape(title))</h2>" + (rows.isEmpty ? "<p class=\"muted\">\(HTML.escape(empty))</p>"
                                                             : HTML.table(base + headers, rows, id: id))
        }
        return Fragment(title: "Outbox", body: """
            <p class="muted">Jobs enqueued inside PostgreSQL transactions (<code>job_outbox</code>), moved to Redis by the
            relay; pushed rows are kept for the lost-job finder (docs/outbox.md). Counts are exact up to
            \(OutboxAdmin.exactUpTo) rows, estimated (≈) beyond. Reload the page to refresh it.</p>
            \(warning)
            \(counts)
            \(section("Waiting for the relay (oldest first)", "outbox-pending-rows", ["Run at"],
                      rows(pending) { [HTML.time($0.runAt?.timeIntervalSince1970)] }, empty: "Nothing waiting."))
            \(section("Refused by the relay (newest first)", "outbox-errored-rows", ["Error"],
                      rows(errored) { [HTML.escape($0.error ?? "")] }, empty: "None refused."))
            \(section("Pushed again by the lost-job finder", "outbox-recovered-rows", ["Times", "Last"],
                      rows(recovered) { ["\($0.recoveredCount)", HTML.time($0.recoveredAt?.timeIntervalSince1970)] }, empty: "None pushed again."))
            """)
    }
}
