import Foundation
import WorkersQueue

/// What one page shows of one shard: its title and body (the server wraps it, one section per shard).
struct Fragment: Sendable {
    var title: String
    var body: String
}

/// The pages of one shard, rendered from the Queue admin API (the same calls `workerctl` makes). Each function runs
/// on one of that shard's `WorkersClient` threads with a borrowed connection, so it may block. Every form carries the
/// CSRF token and the shard's index (`shard`), so the action goes to the Redis the job or queue was shown from.
struct Pages: Sendable {
    let csrf: String
    /// Index of the shard in the server's shard list (0 without sharding).
    let shard: Int
    /// What this request may read of this shard (review M5): every search, filter and jid lookup of the page takes
    /// from it, so no GET reads more than `ScanBudget.webEntries` entries or runs past `requestDeadline`.
    let budget: ScanBudget
    /// How job arguments and payloads are shown (review M11): secrets and personal data redacted.
    var redactor: ArgsRedactor = .standard

    /// How long one page may scan Redis (the `ScanBudget` deadline, counted from the request's arrival).
    static let requestDeadline: Duration = .seconds(10)

    static func requestBudget() -> ScanBudget {
        ScanBudget(maxEntries: ScanBudget.webEntries, deadline: ContinuousClock.now.advanced(by: requestDeadline))
    }

    /// `HTML.button` with this shard's index among the hidden fields (used by every page file: Pages, CronPages,
    /// BatchPages).
    func button(_ label: String, action: String, csrf: String, fields: [(String, String)] = [],
                        confirm: String? = nil) -> String {
        HTML.button(label, action: action, csrf: csrf, fields: [("shard", String(shard))] + fields, confirm: confirm)
    }

    /// One shard's part of `/`: today's counters, the per-minute, per-quarter-hour and per-day charts, the queues and
    /// the latest failures. The totals and the live last-minutes chart above it are the server's (`liveSection`,
    /// every shard summed, updated by `/assets/app.js`); this part is drawn once per page load (no auto-refresh).
    func dashboard(_ connection: RedisConnection, now: Double = Clock.now()) throws -> Fragment {
        let snapshot = try DashboardSnapshot.load(connection, now: now, busyJobs: false)
        let stats = snapshot.stats
        let queues = HTML.table(["Queue", "Size", "Latency", "Paused"], stats.queues.map { queue in
            ["<a href=\"/jobs/enqueued?queue=\(HTML.urlComponent(queue.name))\">\(HTML.escape(queue.name))</a>",
             "<span class=\"num\">\(queue.size)</span>", HTML.duration(queue.latency), queue.paused ? "paused" : ""]
        })
        let history = try History.load(connection, days: 14, now: now)
        // One read of the last day per minute serves both charts.
        let day = try Throughput.load(connection, minutes: 1440, now: now)
        let lastHour = Array(day.suffix(60))
        let lastDay = Throughput.regroup(day, bucketMinutes: 15)
        func perSecond(_ buckets: [ThroughputBucket]) -> String {
            let seconds = buckets.reduce(0) { $0 + $1.seconds }
            let processed = buckets.reduce(0) { $0 + $1.processed }, failed = buckets.reduce(0) { $0 + $1.failed }
            return String(format: "%.2f processed/s, %.2f failed/s on average (%d processed, %d failed)",
                          Double(processed) / seconds, Double(failed) / seconds, processed, failed)
        }
        let failures = HTML.table(["Failed at", "Class", "Queue", "Error"], snapshot.recentFailures.map { record in
            [HTML.time(DashboardSnapshot.failureTime(record)), jobLink(record), HTML.escape(record.queue),
             HTML.escape("\(record.errorClass ?? ""): \(record.errorMessage ?? "")")]
        })
        return Fragment(title: "Dashboard", body: """
            <p class="muted">Today (\(HTML.escape(stats.day)) UTC): \(stats.processedToday) processed, \(stats.failedToday) failed;
            \(stats.enqueued) enqueued, \(stats.busy) busy, \(stats.retries) retries, \(stats.dead) dead.
            Redis \(HTML.escape(stats.redis.version)), \(HTML.escape(stats.redis.usedMemoryHuman)) used.</p>
            <h2>Processed and failed per minute (last hour, UTC)</h2>
            <p class="muted" id="rate-hour">\(perSecond(lastHour))</p>
            <div class="scroll">\(ThroughputChart.svg(id: "last-hour", lastHour, barWidth: 5, labelEvery: 10))</div>
            <h2>Processed and failed per 15 minutes (last 24 hours, UTC)</h2>
            <p class="muted" id="rate-day">\(perSecond(lastDay))</p>
            <div class="scroll">\(ThroughputChart.svg(id: "last-day", lastDay, barWidth: 4, labelEvery: 8))</div>
            <h2>Processed and failed per day (last 14 days, UTC)</h2>
            <div class="scroll">\(history.svg())</div>
            <h2>Queues</h2>\(Self.partialQueues(shown: stats.queues.count, total: stats.queueNames, partial: stats.partial))\(queues)
            <h2>Latest failures</h2>\(failures)
            """)
    }

    /// The top of `/`: every shard's totals as cards and the last `LiveStats.minutes` minutes as a chart, drawn
    /// here once and then updated every 5 s by `/assets/app.js` from `/api/stats.json` (`data-stat` names the
    /// JSON field a number shows).
    static func liveSection(_ stats: LiveStats) -> String {
        let cards: [(String, String, Int, String?)] = [
            ("Processed", "processed", stats.processed, nil), ("Failed", "failed", stats.failed, nil),
            ("Busy", "busy", stats.busy, "/jobs/busy"), ("Enqueued", "enqueued", stats.enqueued, "/jobs/enqueued"),
            ("Scheduled", "scheduled", stats.scheduled, "/jobs/scheduled"), ("Retries", "retries", stats.retries, "/jobs/retry"),
            ("Dead", "dead", stats.dead, "/jobs/dead"), ("Processes", "processes", stats.processes, "/processes"),
        ]
        let cardHTML = cards.map { label, field, value, link in
            let inner = "<span class=\"num\" id=\"stat-\(field)\" data-stat=\"\(field)\">\(value)</span><span class=\"label\">\(label)</span>"
            return link.map { "<a class=\"card\" href=\"\($0)\">\(inner)</a>" } ?? "<div class=\"card\">\(inner)</div>"
        }.joined()
        return """
            <section id="live">
            <div class="cards">\(cardHTML)</div>
            <h2>Last \(LiveStats.minutes) minutes <span class="muted" id="live-status">(updates every 5 s)</span></h2>
            <div class="scroll">\(ThroughputChart.svg(id: "live-chart", stats.buckets, barWidth: 14, labelEvery: 2))</div>
            </section>
            """
    }

    /// The line above a queue table read within a budget (review M5): "showing N of M queues — partial" when some
    /// names were left unread, nothing otherwise.
    static func partialQueues(shown: Int, total: Int, partial: Bool) -> String {
        guard partial else { return "" }
        return "<p id=\"partial\" class=\"muted\">Showing \(shown) of ≥ \(max(total, shown)) queues — partial "
            + "(at most \(QueueAdmin.sampleNames) queue names and \(Stats.sampleProcesses) processes are read per request; "
            + "enqueued and busy count those read). <code>workerctl queues ls</code> lists the largest.</p>"
    }

    /// How many queues `/queues` lists (the largest; review L7).
    static let queueListLimit = 1000

    func queues(_ connection: RedisConnection) throws -> Fragment {
        let sample = try QueueAdmin.largest(connection, limit: Self.queueListLimit)
        let (queues, total) = (sample.queues, sample.total)
        let rows = queues.map { queue -> [String] in
            let path = "/queues/\(HTML.urlComponent(queue.name))"
            return ["<a href=\"/jobs/enqueued?queue=\(HTML.urlComponent(queue.name))\">\(HTML.escape(queue.name))</a>",
                    "\(queue.size)", HTML.duration(queue.latency), queue.paused ? "paused" : "",
                    (queue.paused ? button("Resume", action: path + "/resume", csrf: csrf)
                                  : button("Pause", action: path + "/pause", csrf: csrf))
                    + button("Clear", action: path + "/clear", csrf: csrf, confirm: "Delete every job of this queue?")]
        }
        let cut = sample.partial
            ? "<p id=\"cut\">The \(queues.count) largest of the first \(QueueAdmin.largestNames) queue names read, of ≥ \(total) — partial (by size).</p>"
            : total > queues.count
            ? "<p id=\"cut\">The \(queues.count) largest of \(total) queues (by size).</p>" : ""
        return Fragment(title: "Queues", body: rows.isEmpty ? "<p>No queues.</p>"
                         : cut + HTML.table(["Queue", "Size", "Latency", "Paused", ""], rows, id: "queues"))
    }

    /// One page of a state's jobs, 25 a row each with a checkbox: the ticked rows go, with the CSRF token and this
    /// shard's index, to `/jobs/STATE/selected/ACTION` (the bulk form `bulk-STATE-SHARD`; the checkboxes name it
    /// with their `form` attribute, since each row's own buttons are forms too).
    func jobs(_ connection: RedisConnection, state: JobState, filter: JobFilter, page: PageRequest) throws -> Fragment {
        let listing = try JobAdmin(connection: connection).list(state, filter: filter, page: page, budget: budget)
        let actions = JobAction.allCases.filter { $0.allowedStates.contains(state) }
        let bulkForm = "bulk-\(state.rawValue)-\(shard)"
        let selectable = state != .busy && !actions.isEmpty
        let rows = listing.items.map { record -> [String] in
            var cells: [String] = []
            if selectable {
                cells.append(record.jid.map {
                    "<input type=\"checkbox\" name=\"jid\" value=\"\(HTML.escape($0))\" form=\"\(bulkForm)\" aria-label=\"Select \(HTML.escape($0))\">"
                } ?? "")
            }
            cells += [jobLink(record), HTML.escape(record.queue), "<code>\(HTML.escape(argsText(record)))</code>"]
            switch state {
            case .scheduled: cells.append(HTML.time(record.score))
            case .retry, .dead: cells += [HTML.time(record.lastFailureAt ?? record.score), "\(record.retryCount ?? 0)",
                                          HTML.escape("\(record.errorClass ?? ""): \(record.errorMessage ?? "")")]
            case .enqueued: cells.append(HTML.time(record.enqueuedAt))
            case .busy: cells += [HTML.escape(record.work?.identity ?? ""), HTML.time(record.work?.runAt)]
            }
            if let jid = record.jid {
                cells.append(actions.map {
                    button($0.rawValue.capitalized, action: "/job/\(HTML.urlComponent(jid))/\($0.rawValue)", csrf: csrf,
                                fields: [("state", state.rawValue)])
                }.joined())
            } else {
                cells.append("<span class=\"muted\">\(HTML.escape(record.invalidReason ?? "not a job"))</span>")
            }
            return cells
        }
        var headers = selectable ? ["<input type=\"checkbox\" data-select-all=\"\(bulkForm)\" aria-label=\"Select every row\">"] : []
        headers += ["Job", "Queue", "Arguments"]
        switch state {
        case .scheduled: headers.append("Runs at")
        case .retry, .dead: headers += ["Failed at", "Retries", "Error"]
        case .enqueued: headers.append("Enqueued at")
        case .busy: headers += ["Process", "Started"]
        }
        headers.append("")
        let query = [("queue", filter.queue), ("class", filter.className), ("q", filter.grep)]
            .compactMap { name, value in value.map { "\(name)=\(HTML.urlComponent($0))" } }.joined(separator: "&")
        let filterForm = """
            <form class="filters" method="get" action="/jobs/\(state.rawValue)">
            <input name="queue" placeholder="queue" value="\(HTML.escape(filter.queue ?? ""))">
            <input name="class" placeholder="class" value="\(HTML.escape(filter.className ?? ""))">
            <input name="q" placeholder="text in the job" value="\(HTML.escape(filter.grep ?? ""))">
            <button>Filter</button></form>
            """
        // After a partial scan the count is of the matches seen so far: the button says "matching" instead.
        let bulkCount = listing.isPartial ? "matching" : "\(listing.total)"
        let bulk = actions.filter { $0 != .kill || state != .enqueued }.map {
            button("\($0.rawValue.capitalized) all \(bulkCount)", action: "/jobs/\(state.rawValue)/all/\($0.rawValue)",
                        csrf: csrf, fields: [("queue", filter.queue ?? ""), ("class", filter.className ?? ""),
                                             ("q", filter.grep ?? "")],
                        confirm: "\($0.rawValue) every \(state.rawValue) job matching the filter?")
        }.joined()
        let back = "/jobs/\(state.rawValue)" + (query.isEmpty ? "" : "?" + query)
        let selected = actions.filter { $0 != .kill || state != .enqueued }.map {
            "<button type=\"submit\" formaction=\"/jobs/\(state.rawValue)/selected/\($0.rawValue)\" data-action=\"\($0.rawValue)\""
                + ($0 == .retry || $0 == .run ? "" : " data-confirm=\"\($0.rawValue.capitalized) the selected jobs?\"")
                + ">\($0.rawValue.capitalized) selected</button>"
        }.joined()
        let selectedForm = """
            <form id="\(bulkForm)" class="bulk" method="post" action="/jobs/\(state.rawValue)/selected/\((actions.first ?? .delete).rawValue)">
            <input type="hidden" name="csrf" value="\(HTML.escape(csrf))"><input type="hidden" name="shard" value="\(shard)">
            <input type="hidden" name="back" value="\(HTML.escape(back))">
            <span class="muted">Ticked rows (at most \(WebServer.bulkSelectionLimit)):</span> \(selected)</form>
            <div class="bulk"><span class="muted">Everything matching the filter:</span> \(bulk)</div>
            """
        let pages = max(1, (listing.total + page.size - 1) / page.size)
        let pager = (page.number > 1 ? "<a href=\"?\(query)&page=\(page.number - 1)\">← newer</a> " : "")
            + "page \(page.number) of \(pages)"
            + (page.number < pages ? " <a href=\"?\(query)&page=\(page.number + 1)\">older →</a>" : "")
        return Fragment(title: "\(state.rawValue.capitalized) jobs (\(listing.total))", body: """
            \(filterForm)
            \(scanNotice(listing))\(listing.isPartial || !budget.exhausted ? "" : "<p id=\"partial\">Partial: the request's budget (\(ScanBudget.webEntries) entries, \(QueueAdmin.sampleNames) queue names, \(Stats.sampleProcesses) processes) ran out; jobs may be missing.</p>")
            \(listing.total > 0 && selectable ? selectedForm : "")
            \(rows.isEmpty ? "<p>No jobs.</p>" : HTML.table(headers, rows, id: "jobs", rawHeaders: true))
            <p>\(pager)</p>
            """)
    }

    /// `/job/JID`: each copy of the job (usually one) with its state, actions, summary, error and backtrace, retry
    /// history (what the payload holds: Sidekiq keeps the latest failure only) and the payload pretty-printed —
    /// the redacted object (`redactor.item`), indented, every character HTML-escaped.
    func job(_ connection: RedisConnection, jid: String) throws -> Fragment? {
        try JobAdmin.validate(jid: jid)
        let records = try JobAdmin(connection: connection).find(jid: jid, budget: budget)
        if records.isEmpty {
            guard budget.exhausted else { return nil }
            return Fragment(title: "Job \(jid)", body: """
                <p id="scan">Not found in the \(budget.scanned) entries scanned (the first \(ScanBudget.webEntries) per request).
                <code>workerctl jobs show JID</code> searches every entry.</p>
                """)
        }
        let sections = try records.map { record -> String in
            let actions = JobAction.allCases.filter { $0.allowedStates.contains(record.state) }.map {
                button($0.rawValue.capitalized, action: "/job/\(HTML.urlComponent(jid))/\($0.rawValue)", csrf: csrf,
                            fields: [("state", record.state.rawValue)],
                            confirm: $0 == .delete || $0 == .kill ? "\($0.rawValue.capitalized) this job?" : nil)
            }.joined() + (record.state == .dead ? "" : HTML.button(
                // Cancel marks the jid on every shard (`JobAdmin.cancel`, docs/workerctl.md "Cancel a job"): no shard field.
                "Cancel", action: "/job/\(HTML.urlComponent(jid))/cancel", csrf: csrf,
                confirm: "Cancel this job? A running job is told to stop within a heartbeat; a waiting one never runs."))
            let shown = redactor.item(of: record)
            func text(_ key: String) -> String? {
                guard let value = shown?[key] else { return nil }
                if case .string(let string) = value { return string }
                return value.serialized()
            }
            var summary: [(String, String)] = [
                ("State", "<span class=\"state\" id=\"job-state\">\(HTML.escape(record.state.rawValue))</span>"),
                ("Where", HTML.escape(record.location)),
                ("Class", HTML.escape(record.displayClass ?? "(no class)")),
                ("Queue", HTML.escape(record.queue)),
                ("Jid", "<code>\(HTML.escape(jid))</code>"),
            ]
            if let created = record.createdAt { summary.append(("Created at", HTML.time(created) + " UTC")) }
            if let enqueued = record.enqueuedAt { summary.append(("Enqueued at", HTML.time(enqueued) + " UTC")) }
            switch record.state {
            case .scheduled: summary.append(("Runs at", HTML.time(record.score) + " UTC"))
            case .retry: summary.append(("Next attempt at", HTML.time(record.score) + " UTC"))
            case .dead: summary.append(("Died at", HTML.time(record.score) + " UTC"))
            case .busy:
                summary.append(("Running on", HTML.escape(record.work?.identity ?? "")))
                summary.append(("Started at", HTML.time(record.work?.runAt) + " UTC"))
            case .enqueued: break
            }
            if record.invalidReason != nil {
                summary.append(("Not a valid job", HTML.escape(record.invalidReason ?? "")))
            }
            let summaryHTML = "<dl class=\"fields\" id=\"summary\">"
                + summary.map { "<dt>\(HTML.escape($0.0))</dt><dd>\($0.1)</dd>" }.joined() + "</dl>"

            // Retry history: what a Sidekiq payload keeps (the first failure, the latest retry, the count, the
            // latest error); earlier errors are not stored anywhere.
            var history: [(String, String)] = []
            if let failed = record.failedAt { history.append(("First failed at", HTML.time(failed) + " UTC")) }
            if let retried = record.retriedAt { history.append(("Last retried at", HTML.time(retried) + " UTC")) }
            if let count = record.retryCount {
                history.append(("Retries so far", "\(count) (attempt \(Bounded.int(count, in: -1...Bounded.maxCount) + 2) is next)"))
            }
            if let retry = text("retry") { history.append(("Retry setting", "<code>\(HTML.escape(retry))</code>")) }
            if let errorClass = text("error_class") { history.append(("Latest error class", HTML.escape(errorClass))) }
            if let message = text("error_message") {
                history.append(("Latest error message", "<span id=\"error-message\">\(HTML.escape(message))</span>"))
            }
            let historyHTML = history.isEmpty ? "<p class=\"muted\">Never failed.</p>"
                : "<dl class=\"fields\" id=\"retry-history\">"
                + history.map { "<dt>\(HTML.escape($0.0))</dt><dd>\($0.1)</dd>" }.joined() + "</dl>"
                + "<p class=\"muted\">Sidekiq's payload keeps the first failure time, the latest retry and the latest error only.</p>"

            var backtrace = ""
            if let payload = record.payload {
                switch Result(catching: { () throws(BacktraceError) -> [String]? in try Backtrace.lines(of: payload) }) {
                case .success(let lines?): backtrace = "<h3>Backtrace</h3><pre id=\"backtrace\">\(HTML.escape(lines.joined(separator: "\n")))</pre>"
                case .success(nil): break
                case .failure(let error): backtrace = "<p class=\"muted\">Backtrace unreadable: \(HTML.escape(error.description))</p>"
                }
            }
            let payloadText: String
            if var object = shown {
                // The compressed backtrace is shown decoded above, not as base64 here.
                if object["error_backtrace"] != nil { object["error_backtrace"] = .string("(decoded above)") }
                payloadText = HTML.prettyJSON(.object(object))
            } else {
                payloadText = redactor.text(of: record)
            }
            return """
                <section class="job">
                <h2>\(HTML.escape(record.location))</h2>
                <p>\(actions)</p>
                \(summaryHTML)
                \(try JobPageHooks.sections(for: record, connection: connection, budget: budget))
                <h3>Retry history</h3>
                \(historyHTML)
                \(backtrace)
                <h3>Payload <span class="muted">(secrets and personal data redacted)</span></h3>
                <pre id="payload">\(HTML.escape(payloadText))</pre>
                </section>
                """
        }
        return Fragment(title: "Job \(jid)", body: sections.joined(separator: "\n"))
    }

    /// By jid, else by class (exact, or ActiveJob's wrapped class), across states: the first 50 per state, within
    /// this request's `budget`. Never by the text of the arguments (review M11): a search term is in the URL (and
    /// the browser's history), so a receipt or token must not be one; the job lists' `q` filter reads text.
    func search(_ connection: RedisConnection, text: String) throws -> Fragment {
        let admin = JobAdmin(connection: connection)
        var records: [JobRecord] = []
        if (try? JobAdmin.validate(jid: text)) != nil { records = try admin.find(jid: text, budget: budget) }
        if records.isEmpty, !text.isEmpty {
            let firstPage = try PageRequest(number: 1, size: 50)
            for state in [JobState.enqueued, .scheduled, .retry, .dead, .busy] {
                records += try admin.list(state, filter: JobFilter(className: text), page: firstPage, budget: budget).items
            }
        }
        let rows = records.map { [jobLink($0), HTML.escape($0.location), HTML.escape(argsText($0))] }
        let notice = budget.exhausted
            ? "<p id=\"scan\">Scanned \(budget.scanned) entries (the first \(ScanBudget.webEntries) per request) and stopped: narrow the search (a jid, or a class in one state's list with a queue).</p>"
            : ""
        return Fragment(title: "Search", body: """
            <p>Jobs whose jid or class is <code>\(HTML.escape(text))</code> (first 50 per state).</p>
            \(notice)
            \(rows.isEmpty ? "<p>No jobs.</p>" : HTML.table(["Job", "Where", "Arguments"], rows, id: "jobs"))
            """)
    }

    /// After a scan the budget stopped: how much was read, and what to do.
    private func scanNotice(_ listing: Page<JobRecord>) -> String {
        guard listing.isPartial, let scanned = listing.scanned, let available = listing.available else { return "" }
        return "<p id=\"scan\">Scanned \(scanned) of \(available) entries (the first \(ScanBudget.webEntries) per request): "
            + "\(listing.total) match among them. Narrow the search (queue, class).</p>"
    }

    /// How many members of `processes` `/processes` reads (review M5).
    static let processListLimit = 1_000

    func processes(_ connection: RedisConnection, now: Double = Clock.now()) throws -> Fragment {
        let processBudget = ScanBudget(maxEntries: Self.processListLimit)
        let listed = try ProcessRegistry.list(connection, budget: processBudget)
        let total = Int(try connection.command("SCARD", Keys.processes).integer ?? 0)
        let rows = listed.map { process -> [String] in
            let path = "/processes/\(HTML.urlComponent(process.identity))"
            return [HTML.escape(process.identity), HTML.escape(process.queues.joined(separator: ", ")),
                    "\(process.busy) / \(process.concurrency)", HTML.duration(max(0, now - process.beat)) + " ago",
                    "\(process.rssKilobytes / 1024) MB", process.quiet ? "quiet" : "",
                    button("Quiet", action: path + "/quiet", csrf: csrf)
                    + button("Stop", action: path + "/stop", csrf: csrf, confirm: "Stop this process?")]
        }
        let cut = processBudget.exhausted
            ? "<p id=\"partial\">Showing \(rows.count) of ≥ \(total) processes — partial (the first \(Self.processListLimit) read).</p>" : ""
        return Fragment(title: "Processes", body: rows.isEmpty ? "<p>No live processes.</p>"
                         : cut + HTML.table(["Process", "Queues", "Busy", "Last beat", "RSS", "State", ""], rows, id: "processes"))
    }

    func limits(_ connection: RedisConnection) throws -> Fragment {
        let rows = try LimitAdmin.list(connection, budget: budget).map { limit in
            [HTML.escape(limit.name), HTML.escape(limit.key), limit.kind.rawValue, "\(limit.max)",
             HTML.duration(limit.periodSeconds), limit.invalid.map { "invalid (\(HTML.escape($0)))" } ?? String(format: "%.2f", limit.used), HTML.duration(limit.resetsInSeconds)]
        }
        let partial = budget.exhausted
            ? "<p id=\"partial\">Partial: looked at \(budget.scanned) keys (the first \(ScanBudget.webEntries) per request) and at most \(LimitAdmin.maxInstances) instances; instances may be missing. <code>workerctl limits ls</code> reads more.</p>"
            : ""
        return Fragment(title: "Limits", body: rows.isEmpty ? "<p>No limits declared.</p>"
                         : partial + HTML.table(["Limit", "Key", "Kind", "Max", "Period", "Used", "Resets in"], rows, id: "limits"))
    }

    /// `/metrics`: per job class over the last hour and the last day (`ClassMetricsReport`, what
    /// `workerctl stats --classes` prints): runs and failures as a chart, then runs, failed, total and mean time and
    /// the p50/p95 bucket of successful runs. Class names come from producers: every text is escaped.
    func classMetrics(_ connection: RedisConnection) throws -> Fragment {
        func ms(_ value: Double?) -> String {
            guard let value else { return "–" }
            if value == .infinity { return "slow (> 335 s)" }
            return value < 1_000 ? "\(Bounded.int(value.rounded(), in: 0...1_000)) ms" : HTML.duration(value / 1_000)
        }
        var body = "<p class=\"muted\">Written by each worker's heartbeat in Sidekiq 8's metrics layout; percentiles are "
            + "histogram bucket bounds (≤); failed runs' times are left out. Unregistered classes count under "
            + "<code>\(HTML.escape(ClassMetricsLayout.otherClass))</code>.</p>"
        for period in ClassMetricsPeriod.allCases {
            let summaries = try ClassMetricsReport.load(connection, period: period)
            let title = period == .hour ? "Last hour" : "Last 24 hours"
            guard !summaries.isEmpty else {
                body += "<h3>\(title)</h3><p>No runs recorded.</p>"
                continue
            }
            let chart = BarChart(id: "classes-\(period.rawValue)", barWidth: 14, labelEvery: 1, bars: summaries.prefix(20).map {
                BarChart.Bar(label: String($0.className.suffix(12)), processed: $0.runs, failed: $0.failed,
                             processedTitle: "\($0.className): \($0.runs) runs", failedTitle: "\($0.className): \($0.failed) failed")
            }).svg()
            let rows = summaries.map { summary in
                [HTML.escape(summary.className), "\(summary.runs)", "\(summary.failed)",
                 ms(Double(summary.totalMilliseconds)), ms(summary.meanMilliseconds), ms(summary.p50Milliseconds),
                 ms(summary.p95Milliseconds)]
            }
            body += "<h3>\(title)</h3>\(chart)"
                + HTML.table(["Class", "Runs", "Failed", "Total time", "Mean", "p50 ≤", "p95 ≤"], rows, id: "classes-\(period.rawValue)-table")
        }
        return Fragment(title: "Metrics", body: body)
    }

    func uniqueLocks(_ connection: RedisConnection) throws -> Fragment {
        let admin = UniqueAdmin(connection: connection)
        let rows = try admin.list(budget: budget).map { info in
            ["<a href=\"/job/\(HTML.urlComponent(info.jid))\">\(HTML.escape(info.jid))</a>", HTML.escape(info.className ?? ""),
             HTML.escape(info.queue ?? ""), HTML.escape(info.until ?? ""), info.ttl.map(HTML.duration) ?? "",
             info.ownerRecordMatches ? "" : "owner record missing"]
        }
        return Fragment(title: "Unique locks", body: """
            <p>\(try admin.droppedCount()) duplicates dropped at fetch so far.</p>
            \(budget.exhausted ? "<p id=\"partial\">Partial: looked at \(budget.scanned) keys (the first \(ScanBudget.webEntries) per request) and at most \(UniqueAdmin.maxLocks) locks; locks may be missing.</p>" : "")
            \(rows.isEmpty ? "<p>No unique locks held.</p>" : HTML.table(["Held by", "Class", "Queue", "Until", "Expires in", ""], rows, id: "unique"))
            """)
    }

    func jobLink(_ record: JobRecord) -> String {
        let name = HTML.escape(record.displayClass ?? "(no class)")
        guard let jid = record.jid else { return name }
        return "<a href=\"/job/\(HTML.urlComponent(jid))\">\(name)</a> <span class=\"muted\">\(HTML.escape(jid))</span>"
    }

    /// The record's arguments as shown (`redactor`), cut to 200 characters.
    private func argsText(_ record: JobRecord) -> String {
        let text = JSONValue.array(redactor.args(of: record) ?? []).serialized()
        return text.count > 200 ? String(text.prefix(200)) + "…" : text
    }
}

/// Sidekiq's daily counters (`stat:processed:YYYY-MM-DD`, `stat:failed:YYYY-MM-DD`), as Sidekiq's own history
/// graph reads them.
struct History {
    var days: [(day: String, processed: Int, failed: Int)]

    static func load(_ connection: RedisConnection, days count: Int, now: Double) throws -> History {
        let days = (0..<count).reversed().map { Clock.utcDay(now - Double($0) * 86400) }
        let keys = days.flatMap { [Keys.statProcessed(day: $0), Keys.statFailed(day: $0)] }
        let values = try connection.send(["MGET"] + keys).array ?? []
        func number(_ index: Int) -> Int { index < values.count ? Int(values[index].string ?? "") ?? 0 : 0 }
        return History(days: days.enumerated().map { ($0.element, number(2 * $0.offset), number(2 * $0.offset + 1)) })
    }

    func svg() -> String {
        BarChart(id: "history", barWidth: 16, labelEvery: 1, bars: days.map { day in
            BarChart.Bar(label: String(day.day.suffix(5)), processed: day.processed, failed: day.failed,
                         processedTitle: "\(day.day): \(day.processed) processed", failedTitle: "\(day.day): \(day.failed) failed")
        }).svg()
    }
}

/// The per-minute history (`Throughput`) as a chart of runs per second: each bar one bucket, its title the count
/// and the rate.
enum ThroughputChart {
    static func svg(id: String, _ buckets: [ThroughputBucket], barWidth: Int, labelEvery: Int) -> String {
        BarChart(id: id, barWidth: barWidth, labelEvery: labelEvery, bars: buckets.map { bucket in
            let label = HTML.time(bucket.start).dropFirst(11).prefix(5)
            func rate(_ value: Double) -> String { value >= 10 ? String(Bounded.int(value.rounded(), in: 0...Bounded.maxCounter)) : String(format: "%.2f", value) }
            return BarChart.Bar(label: String(label), processed: bucket.processed, failed: bucket.failed,
                                processedTitle: "\(label) UTC: \(bucket.processed) processed (\(rate(bucket.processedPerSecond))/s)",
                                failedTitle: "\(label) UTC: \(bucket.failed) failed (\(rate(bucket.failedPerSecond))/s)")
        }).svg()
    }
}

/// Two bars per slot (processed blue, failed red: `/assets/app.css`, light and dark), drawn on the server as SVG: a y
/// axis with a rounded scale (`niceMax`) and four grid lines labelled with their values, a label under every
/// `labelEvery`-th slot, a legend, and on hover each bar's `<title>` (its count) and the slot's (both counts). The
/// SVG has a `viewBox`, so the stylesheet scales it down to a narrow screen. Every text goes through `HTML.escape`.
struct BarChart {
    struct Bar {
        var label: String
        var processed: Int
        var failed: Int
        var processedTitle: String
        var failedTitle: String
    }

    var id: String
    var barWidth: Int
    var labelEvery: Int
    var bars: [Bar]

    /// The smallest of 4, 1·10ⁿ, 2·10ⁿ, 2.5·10ⁿ, 5·10ⁿ at or above `value`: the top of the scale, so the four grid
    /// lines fall on round numbers.
    static func niceMax(_ value: Int) -> Int {
        if value <= 4 { return 4 }
        var power = 1
        while power <= value / 10 { power *= 10 }
        for step in [10, 20, 25, 50, 100] where step * power / 10 >= value { return step * power / 10 }
        return 10 * power
    }

    static func tickLabel(_ value: Double) -> String {
        if value >= 10_000 { return String(format: "%.0fk", value / 1000) }
        return value == value.rounded() ? String(Bounded.int(value, in: -Bounded.maxCounter...Bounded.maxCounter)) : String(format: "%.1f", value)
    }

    /// Counts as drawn: negative as 0, above 10^15 as 10^15 (a counter is any integer Redis holds; the arithmetic
    /// of the scale must not overflow).
    static func drawn(_ value: Int) -> Int { min(max(value, 0), 1_000_000_000_000_000) }

    func svg() -> String {
        let top = Self.niceMax(max(1, bars.map { max(Self.drawn($0.processed), Self.drawn($0.failed)) }.max() ?? 1))
        let left = 44, legend = 22, height = 120, bottom = 22
        let slot = 2 * barWidth + max(2, barWidth / 2)
        let width = left + bars.count * slot + 10, total = legend + height + bottom
        var parts: [String] = []
        for tick in 0...4 {
            let y = legend + height - tick * height / 4
            parts.append("<line class=\"grid\" x1=\"\(left)\" x2=\"\(width - 4)\" y1=\"\(y)\" y2=\"\(y)\"/>")
            parts.append("<text x=\"\(left - 4)\" y=\"\(y + 3)\" text-anchor=\"end\">\(Self.tickLabel(Double(top * tick) / 4))</text>")
        }
        parts.append("<line class=\"axis\" x1=\"\(left)\" x2=\"\(left)\" y1=\"\(legend)\" y2=\"\(legend + height)\"/>")
        parts.append("<line class=\"axis\" x1=\"\(left)\" x2=\"\(width - 4)\" y1=\"\(legend + height)\" y2=\"\(legend + height)\"/>")
        parts.append("<rect class=\"processed\" x=\"\(left)\" y=\"4\" width=\"10\" height=\"10\"/><text x=\"\(left + 14)\" y=\"13\">processed</text>")
        parts.append("<rect class=\"failed\" x=\"\(left + 80)\" y=\"4\" width=\"10\" height=\"10\"/><text x=\"\(left + 94)\" y=\"13\">failed</text>")
        parts.append("<text x=\"4\" y=\"13\">runs</text>")
        for (index, bar) in bars.enumerated() {
            let x = left + 4 + index * slot
            func scaled(_ value: Int) -> Int { Bounded.int(Double(Self.drawn(value)) / Double(top) * Double(height), in: 0...height) }
            let processed = scaled(bar.processed), failed = scaled(bar.failed)
            let both = "\(bar.label): \(bar.processed) processed, \(bar.failed) failed"
            parts.append("<rect class=\"hit\" x=\"\(x - 1)\" y=\"\(legend)\" width=\"\(slot - 1)\" height=\"\(height)\"><title>\(HTML.escape(both))</title></rect>")
            parts.append("<rect class=\"processed\" x=\"\(x)\" y=\"\(legend + height - processed)\" width=\"\(barWidth)\" height=\"\(processed)\"><title>\(HTML.escape(bar.processedTitle))</title></rect>")
            parts.append("<rect class=\"failed\" x=\"\(x + barWidth)\" y=\"\(legend + height - failed)\" width=\"\(barWidth)\" height=\"\(failed)\"><title>\(HTML.escape(bar.failedTitle))</title></rect>")
            if index % labelEvery == 0 {
                parts.append("<text x=\"\(x)\" y=\"\(legend + height + 14)\">\(HTML.escape(bar.label))</text>")
            }
        }
        return "<svg id=\"\(HTML.escape(id))\" class=\"chart\" viewBox=\"0 0 \(width) \(total)\" width=\"\(width)\" height=\"\(total)\" role=\"img\" aria-label=\"processed and failed runs\">\(parts.joined())</svg>"
    }
}

/// The job page's sections from issue 36's other parts, under the job's summary: **why it is not running**
/// (`JobExplain.status`: the first reason, from Redis, as `workerctl jobs explain` says it), its **progress** as the
/// job reported it (`progress:<jid>`: a bar, the percentage, the note, when) and a **cancel request** if one was made
/// (`cancelled-<jid>`). Runs on the shard's thread with its connection, like the rest of the page; every read is
/// bounded (the jid search by `ScanBudget.webEntries` entries, the position in the queue by explain's own bound).
/// Every text is escaped. The Cancel button is with the job's other actions (`job(_:jid:)`). Explain reads within
/// the page's budget and deadline (review M5): processes, queue names and limiter instances included.
enum JobPageHooks {
    static func sections(for record: JobRecord, connection: RedisConnection, budget: ScanBudget) throws -> String {
        guard record.jid != nil else { return "" }
        let now = Date()
        // The record the page found: explain does not search for it again, and reads within the page's budget.
        let status = try JobExplain(connection: connection, budget: budget).status(of: record, now: now)
        var html = """
            <h3>Why it is not running</h3>
            <p id="explain" data-reason="\(HTML.escape(status.explanation.reason))">\(HTML.escape(status.explanation.description(now: now)))</p>
            """
        if let progress = status.progress {
            let percent = Bounded.int((progress.fraction * 100).rounded(), in: 0...100)
            html += """
                <h3>Progress</h3>
                <p id="progress"><progress max="100" value="\(percent)">\(percent)%</progress> \(percent)%\(progress.note.map { " · " + HTML.escape($0) } ?? "")
                <span class="muted">(reported \(HTML.time(progress.at.timeIntervalSince1970)) UTC)</span></p>
                """
        }
        if let cancel = status.cancelRequestedAt {
            html += "<p id=\"cancel-requested\">Cancel requested at \(HTML.time(cancel.timeIntervalSince1970)) UTC.</p>"
        }
        return html
    }
}
