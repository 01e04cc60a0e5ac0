import Foundation
import WorkersQueue
import WorkersScheduler

/// An operator action on a cron entry, as `workerctl cron enable|disable|run` (without `--tick`).
enum CronAction: String, Sendable, CaseIterable {
    case enable, disable, run

    /// The button's label.
    var label: String {
        switch self {
        case .enable: return "Enable"
        case .disable: return "Disable"
        case .run: return "Run now"
        }
    }

    /// Performs the action with `store`'s connection — the same `CronStore` call as `workerctl cron`. Runs on the
    /// shard's `WorkersClient` thread that holds the connection (a store belongs to one thread at a time).
    /// Throws `CronStoreError.notFound` when the entry is gone, `unusableEntry` when `run` cannot build its job.
    func perform(_ store: CronStore, name: String, now: Date) throws {
        switch self {
        case .enable: try store.setStatus(name: name, .enabled, now: now)
        case .disable: try store.setStatus(name: name, .disabled, now: now)
        case .run: _ = try store.runNow(name: name, now: now)
        }
    }

    /// A cron entry name as `workerctl cron` accepts it (`CronKeys.isValidName`). Throws
    /// `AdminError.invalidArgument` (a 400 page).
    static func validName(_ name: String) throws(AdminError) -> String {
        guard CronKeys.isValidName(name) else { throw .invalidArgument("'\(name)' is not a cron entry name") }
        return name
    }
}

/// The cron pages (`/cron`, `/cron/NAME`) of one shard, over `CronStore` with the calls `workerctl cron ls|history`
/// makes. Cron entries live on the shard of their queue (docs/sharding.md), so each shard lists its own. Every
/// value from Redis — names, expressions, classes, queues, descriptions, args, jids — goes through `HTML.escape`.
extension Pages {
    func cronList(_ connection: RedisConnection, now: Date = Date()) throws -> Fragment {
        let records = try CronStore(connection: connection).list()
        let rows = records.map { record -> [String] in
            [cronLink(record.name), "<code>\(HTML.escape(record.cron))</code>", HTML.escape(record.timezone),
             HTML.escape(record.className ?? "-"), HTML.escape(record.queue), record.status.rawValue,
             HTML.escape(record.lastEnqueueTime ?? "-"), nextFire(record, now: now), record.isOurs ? "yes" : "no",
             cronButtons(record, back: "/cron")]
        }
        return Fragment(title: "Cron (\(records.count))", body: rows.isEmpty ? "<p>No cron entries.</p>"
                         : HTML.table(["Name", "Cron", "Time zone", "Class", "Queue", "Status", "Last enqueue", "Next fire (UTC)",
                                       "Managed", ""], rows, id: "cron"))
    }

    /// One entry with every field and its fire history (newest first); nil on a shard that does not hold it.
    func cronEntry(_ connection: RedisConnection, name: String, now: Date = Date()) throws -> Fragment? {
        let store = CronStore(connection: connection)
        guard let record = try store.record(named: name) else { return nil }
        let history = try store.history(name: name)
        let fields: [(String, String)] = [
            ("Status", record.status.rawValue), ("Cron", record.cron), ("Time zone", record.timezone),
            ("Class", record.className ?? "-"), ("Queue", record.queue), ("Args", JSONValue.array(record.args.map(ArgsRedactor.redactingSensitiveKeys)).serialized()),
            ("Description", record.description ?? ""), ("Catch-up", record.catchUp ?? "-"), ("Pass tick", record.passTick ?? "-"),
            ("Last tick", record.lastTick ?? "-"), ("Last enqueue", record.lastEnqueueTime ?? "-"),
            ("Next fire (UTC)", record.nextTick(after: now).map(TickFormat.iso8601UTC) ?? "-"),
            ("Managed", record.isOurs ? "yes (written by this scheduler)" : "no (another tool's entry)"),
        ]
        let rows = history.map { item -> [String] in
            let tick = item.tick.map { item.backfill ? "\($0) (backfill)" : $0 } ?? (item.manual ? "(run now)" : "-")
            let jid = item.jid.isEmpty ? "" : "<a href=\"/job/\(HTML.urlComponent(item.jid))\">\(HTML.escape(item.jid))</a>"
            return [HTML.escape(item.enqueued), HTML.escape(tick), jid]
        }
        return Fragment(title: "Cron entry \(name)", body: """
            <p>\(cronButtons(record, back: "/cron/\(HTML.urlComponent(name))"))</p>
            \(HTML.table(["Field", "Value"], fields.map { [HTML.escape($0.0), HTML.escape($0.1)] }, id: "entry"))
            <h2>History (newest first)</h2>
            \(rows.isEmpty ? "<p>No fires recorded.</p>" : HTML.table(["Enqueued", "Tick", "Job"], rows, id: "history"))
            """)
    }

    private func cronLink(_ name: String) -> String {
        "<a href=\"/cron/\(HTML.urlComponent(name))\">\(HTML.escape(name))</a>"
    }

    private func nextFire(_ record: CronRecord, now: Date) -> String {
        guard record.status == .enabled else { return "<span class=\"muted\">disabled</span>" }
        return record.nextTick(after: now).map { HTML.escape(TickFormat.iso8601UTC($0)) } ?? "-"
    }

    /// Enable or Disable (whichever changes the status), and Run now; each a POST back to `back`.
    private func cronButtons(_ record: CronRecord, back: String) -> String {
        let path = "/cron/\(HTML.urlComponent(record.name))/"
        let toggle: CronAction = record.status == .enabled ? .disable : .enable
        return [toggle, .run].map {
            button($0.label, action: path + $0.rawValue, csrf: csrf, fields: [("back", back)])
        }.joined()
    }
}
