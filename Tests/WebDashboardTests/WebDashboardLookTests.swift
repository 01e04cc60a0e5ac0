import Foundation
import WorkersQueue
import WorkersTestServices
import XCTest

/// Issue 36 point 5: the dashboard's look and its new parts — the job page, bulk actions on ticked rows, the live
/// view (`/api/stats.json` polled by `/assets/app.js`), the CSP without inline script, a laptop and a phone screen,
/// dark mode, and a queue of a million jobs read in a bounded slice. Screenshots go to .build/test-artifacts/web/.
extension WebDashboardTests {
    /// A dead job as Sidekiq leaves it after retries: error fields, `retry_count`, `failed_at`, `retried_at`, and
    /// an argument that tries to close a script and open markup.
    func failedJob(_ redis: TestRedis, args: [JSONValue], retryCount: Int64 = 2) throws -> String {
        var payload = try JobClient.payload(for: NewJob("ReportJob", args: args), createdAt: Clock.now() - 600,
                                            enqueuedAt: Clock.now() - 600)
        payload.fields["error_class"] = .string("Timeout<i>Error")
        payload.fields["error_message"] = .string("took too long </script><b>x")
        payload.fields["failed_at"] = .double(Clock.now() - 500)
        payload.fields["retried_at"] = .double(Clock.now() - 100)
        payload.fields["retry_count"] = .int(retryCount)
        try redis.command("ZADD", Keys.dead, Clock.now(), payload.serialized())
        return try XCTUnwrap(payload.jid)
    }

    /// The job page: state, summary, why it is not running, progress and a cancel request, retry history, error,
    /// payload pretty-printed (indented), escaped and redacted; in Chromium the page loads and its Retry button moves
    /// the job back to its queue.
    func testTheMetricsPageShowsEachClassRunsFailuresAndPercentilesEscaped() throws {
        let redis = try TestRedis(database: 39)
        // What a worker's heartbeat writes (ClassMetricsRecorder, Sidekiq 8's layout): a class, and a hostile name.
        let minute = ClassMetricsLayout.Minute(epochSeconds: Clock.now())
        for bucket in [minute.minute, minute.tenMinutes] {
            try redis.command("HSET", "j|" + bucket, "Mailer|p", 7, "Mailer|f", 2, "Mailer|ms", 500, "<b>Evil</b>|p", 1)
            try redis.command("BITFIELD", "hx|Mailer|" + bucket, "INCRBY", "u32", "#3", 4, "INCRBY", "u32", "#9", 1)
        }
        let base = try startServer(redis)
        let page = try http(base + "metrics")
        XCTAssertEqual(page.status, 200, page.body)
        XCTAssertTrue(page.body.contains("<td>Mailer</td><td>7</td><td>2</td><td>500 ms</td><td>100 ms</td><td>65 ms</td><td>750 ms</td>"),
                      page.body)
        XCTAssertTrue(page.body.contains("&lt;b&gt;Evil&lt;/b&gt;"), "a producer's class name is escaped")
        XCTAssertFalse(page.body.contains("<b>Evil"), page.body)
        XCTAssertTrue(page.body.contains("<svg") && page.body.contains("Mailer: 7 runs"), "the chart with its hover titles")
        try runBrowser([
            ["viewport": "1440x900"],
            ["goto": base + "metrics", "expect": "Last 24 hours", "shot": "metrics-laptop"],
            ["viewport": "390x844"],
            ["goto": base + "metrics", "expect": "Mailer", "shot": "metrics-phone"],
            ["eval": "document.documentElement.scrollWidth <= window.innerWidth", "expect": "true"],
        ])
    }

    func testTheJobPageShowsStateRetryHistoryAndThePayloadPrettyPrintedAndEscaped() throws {
        let redis = try TestRedis(database: 38)
        let hostile = "</script><b>bold</b>"
        let jid = try failedJob(redis, args: [.string(hostile), .object(["purchase_token": .string("tok-SECRET-123"), "n": .int(7)])])
        let base = try startServer(redis)
        let page = try http(base + "job/\(jid)")
        XCTAssertEqual(page.status, 200, page.body)
        XCTAssertFalse(page.body.contains("</script><b>"), "an argument rendered as markup: \(page.body)")
        XCTAssertFalse(page.body.contains("<b>") || page.body.contains("<i>"), "markup from data rendered")
        XCTAssertFalse(page.body.contains("tok-SECRET-123"), "a purchase token shown")
        // Pretty-printed: one field per line, indented, the hostile text escaped inside the JSON string.
        XCTAssertTrue(page.body.contains("<pre id=\"payload\">{\n  &quot;retry&quot;: true,\n"), page.body)
        XCTAssertTrue(page.body.contains("\n  &quot;args&quot;: [\n    &quot;&lt;/script&gt;&lt;b&gt;bold&lt;/b&gt;&quot;,\n    {\n      &quot;purchase_token&quot;: &quot;[redacted]&quot;,\n      &quot;n&quot;: 7\n    }\n  ],\n"),
                      page.body)
        XCTAssertTrue(page.body.contains("<span class=\"state\" id=\"job-state\">dead</span>"), page.body)
        XCTAssertTrue(page.body.contains("Retries so far</dt><dd>2 (attempt 4 is next)"), page.body)
        XCTAssertTrue(page.body.contains("First failed at") && page.body.contains("Last retried at"), page.body)
        XCTAssertTrue(page.body.contains("Timeout&lt;i&gt;Error"), page.body)
        XCTAssertTrue(page.body.contains("<span id=\"error-message\">took too long &lt;/script&gt;&lt;b&gt;x</span>"), page.body)

        // Explain, progress and a cancel request (issue 36 points 1-3, read by `JobExplain.status`): the dead job says
        // why; a job in a paused queue that reported progress (the agreed `progress:<jid>` layout) shows the reason,
        // the bar, the note escaped, and the cancel request (`cancelled-<jid>`).
        XCTAssertTrue(page.body.contains("<p id=\"explain\" data-reason=\"dead\">dead since "), page.body)
        XCTAssertFalse(page.body.contains("/job/\(jid)/cancel"), "a dead job has no Cancel button")
        let paused = try redis.client.enqueue(NewJob("ReportJob", args: [9], queue: "mail"))
        try redis.command("SADD", "paused", "mail")
        try redis.command("SET", "progress:\(paused)", #"{"fraction":0.42,"note":"page 42 of 100 <b>","at":\#(Clock.now())}"#, "EX", 600)
        try redis.command("SET", "cancelled-\(paused)", Int(Clock.now()), "EX", 600)
        let pausedPage = try http(base + "job/\(paused)").body
        XCTAssertTrue(pausedPage.contains("data-reason=\"queue_paused\">queue mail is paused"), pausedPage)
        XCTAssertTrue(pausedPage.contains("<progress max=\"100\" value=\"42\">42%</progress> 42% · page 42 of 100 &lt;b&gt;"), pausedPage)
        XCTAssertTrue(pausedPage.contains("<p id=\"cancel-requested\">Cancel requested at "), pausedPage)

        try runBrowser([
            ["viewport": "1440x900"],
            ["goto": base + "job/\(paused)", "expect": "queue mail is paused", "shot": "job-page-explain-progress"],
            ["goto": base + "job/\(jid)", "expect": "Retry history", "shot": "job-page"],
            ["eval": "document.getElementById('payload').textContent.includes('</script><b>bold</b>')", "expect": "true"],
            ["eval": "document.querySelectorAll('#payload b, main b').length", "expect": "0"],
            ["click": "form[action='/job/\(jid)/retry'] button", "expect": "Dead jobs (0)"],
        ])

        // Cancel (issue 36 point 3) from the job page: the waiting job in the paused queue goes to dead as `Cancelled`,
        // and the mark a worker's heartbeat reads is written.
        try runBrowser([
            ["viewport": "390x844"],
            ["goto": base + "job/\(paused)", "expect": "queue mail is paused"],
            ["click": "form[action='/job/\(paused)/cancel'] button", "expect": "Cancelled", "shot": "job-page-cancelled"],
        ])
        XCTAssertEqual(try redis.int("LLEN", "queue:mail"), 0, "the waiting job left its queue")
        let dead = try XCTUnwrap(try redis.payloads(zset: Keys.dead).first { $0.jid == paused })
        XCTAssertEqual(dead.errorClass, "Cancelled")
        XCTAssertEqual(try redis.int("EXISTS", "cancelled-\(paused)"), 1)
        XCTAssertEqual(try redis.payloads(list: Keys.queue("default")).map(\.jid), [jid], "retried from the job page")
        XCTAssertTrue(try http(base + "job/\(jid)").body.contains("data-reason=\"no_live_process\""), "back in a queue no process serves")
    }

    /// Every list has a checkbox per row and a bulk form; in Chromium two ticked dead jobs are retried, then the
    /// last one ticked and deleted (its confirm() answered). Over HTTP: more than 500 jids is 400 and changes
    /// nothing; no CSRF token is 403.
    func testBulkActionsOnTickedRowsRetryAndDeleteAndAreBounded() throws {
        let redis = try TestRedis(database: 39)
        let jids = try (0..<3).map { try failedJob(redis, args: [.int(Int64($0))]) }
        try redis.client.enqueue(NewJob("Noop", args: [1], queue: "mail"))
        try redis.client.enqueue(NewJob("Noop", args: [2]), at: Date().addingTimeInterval(3600))
        var retrying = try JobClient.payload(for: NewJob("Flaky", args: [3]), createdAt: Clock.now(), enqueuedAt: Clock.now())
        retrying.fields["retry_count"] = .int(0)
        try redis.command("ZADD", Keys.retry, Clock.now() + 60, retrying.serialized())
        let base = try startServer(redis)
        for state in ["enqueued", "scheduled", "retry", "dead"] {
            let page = try http(base + "jobs/\(state)").body
            XCTAssertTrue(page.contains("<form id=\"bulk-\(state)-0\""), "\(state): \(page)")
            XCTAssertTrue(page.contains("name=\"jid\""), "\(state) rows have checkboxes")
            XCTAssertTrue(page.contains("data-select-all=\"bulk-\(state)-0\""), state)
        }

        let token = try csrfToken(base)
        let tooMany = (0...WebServerLimits.bulk).map { "jid=fake\($0)" }.joined(separator: "&")
        let refused = try postRaw(base + "jobs/dead/selected/delete", body: "csrf=\(token)&\(tooMany)&jid=\(jids[0])")
        XCTAssertEqual(refused.status, 400, refused.body)
        XCTAssertTrue(refused.body.contains("at most 500"), refused.body)
        let noToken = try postRaw(base + "jobs/dead/selected/delete", body: "jid=\(jids[0])")
        XCTAssertEqual(noToken.status, 403)
        XCTAssertEqual(try redis.int("ZCARD", Keys.dead), 3, "nothing changed by a refused bulk request")

        try runBrowser([
            ["goto": base + "jobs/dead", "expect": "Dead jobs (3)", "shot": "dead-list"],
            ["eval": "['\(jids[0])','\(jids[1])'].forEach(j => document.querySelector(`input[name=jid][value='${j}']`).click()); document.querySelectorAll('input[name=jid]:checked').length",
             "expect": "2", "shot": "dead-list-two-ticked"],
            ["click": "#bulk-dead-0 button[data-action=retry]", "expect": "Dead jobs (1)", "shot": "dead-after-bulk-retry"],
            ["eval": "document.querySelector('input[data-select-all]').click(); document.querySelectorAll('input[name=jid]:checked').length",
             "expect": "1"],
            ["click": "#bulk-dead-0 button[data-action=delete]", "expect": "Dead jobs (0)", "shot": "dead-after-bulk-delete"],
        ])
        XCTAssertEqual(try redis.int("ZCARD", Keys.dead), 0)
        XCTAssertEqual(Set(try redis.payloads(list: Keys.queue("default")).compactMap(\.jid)), Set(jids.prefix(2)),
                       "the two ticked jobs retried; the third deleted")
    }

    /// `/api/stats.json`: a fixed shape (ten counters, a time, ten minutes) and a small size whatever Redis holds —
    /// no queue name in it however many and however long; the dashboard's script polls it and updates the page
    /// (no reload). Every answer's CSP allows scripts and styles from this origin only; no page holds an inline
    /// script, handler, style or `<meta refresh>`.
    func testTheLiveEndpointIsBoundedAndTheCSPHasNoInlineScript() throws {
        let redis = try TestRedis(database: 163)
        try redis.command("SET", Keys.statProcessed, 41)
        for index in 0..<200 {
            try redis.command("SADD", Keys.queues, "queue-\(index)-" + String(repeating: "x", count: 500))
        }
        try redis.client.enqueue(NewJob("Noop", args: [1], queue: "mail"))
        let jid = try failedJob(redis, args: [1])
        // Process hashes anyone could write, whose `busy` counts add past Int.max: clamped and saturated, not a trap.
        for identity in ["host:1:a", "host:2:b"] {
            try redis.command("SADD", Keys.processes, identity)
            try redis.command("HSET", identity, "busy", String(Int.max))
        }
        let base = try startServer(redis)
        let live = try http(base + "api/stats.json")
        XCTAssertEqual(live.status, 200)
        XCTAssertLessThan(live.body.utf8.count, 1024, live.body)
        XCTAssertFalse(live.body.contains("queue-"), "no name in the live data")
        let object = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(live.body.utf8)) as? [String: Any])
        XCTAssertEqual(Set(object.keys), ["time", "processed", "failed", "processed_today", "failed_today", "busy", "enqueued",
                                          "scheduled", "retries", "dead", "processes", "minutes", "queues", "partial"])
        XCTAssertEqual(object["processed"] as? Int, 41)
        XCTAssertEqual(object["enqueued"] as? Int, 1)
        XCTAssertEqual(object["dead"] as? Int, 1)
        XCTAssertEqual(object["busy"] as? Int, 2 * Bounded.maxCounter)
        let minutes = try XCTUnwrap(object["minutes"] as? [[String: Any]])
        XCTAssertEqual(minutes.count, 10)
        XCTAssertEqual(Set(minutes.flatMap(\.keys)), ["start", "processed", "failed"])

        let csp = try XCTUnwrap(try responseHeaders(base)["content-security-policy"])
        XCTAssertFalse(csp.contains("unsafe-inline"), csp)
        XCTAssertTrue(csp.contains("script-src 'self'") && csp.contains("style-src 'self'"), csp)
        let assets = try responseHeaders(base + "assets/app.js")
        XCTAssertEqual(assets["content-type"], "text/javascript; charset=utf-8")
        XCTAssertEqual(try responseHeaders(base + "assets/app.css")["content-type"], "text/css; charset=utf-8")
        for path in ["", "queues", "jobs/dead", "job/\(jid)", "processes", "cron", "search?q=Noop"] {
            let body = try http(base + path).body
            XCTAssertEqual(body.matches(of: /<script/).count, 1, "\(path): one script tag")
            XCTAssertTrue(body.contains("<script src=\"/assets/app.js\" defer></script>"), path)
            for inline in ["onsubmit=", "onclick=", "style=", "<style", "http-equiv=\"refresh\"", "javascript:"] {
                XCTAssertFalse(body.contains(inline), "\(path) holds \(inline)")
            }
        }

        try runBrowser([
            ["goto": base, "expect": "Last 10 minutes", "shot": "dashboard"],
            ["wait": "Number(document.getElementById('live').dataset.updates || 0) >= 1"],
            ["eval": "document.querySelector('[data-stat=processed]').textContent", "expect": "41"],
            ["eval": "document.querySelectorAll('#live-chart rect.processed title').length", "expect": "10"],
            // The script runs under the CSP (no violation): its live view changes the page without a reload.
            ["eval": "fetch('/api/stats.json').then(r => r.json()).then(j => j.minutes.length)", "expect": "10"],
        ])
        // The counter changes while the page is open: the number shown follows without a reload (a mark set on the
        // page's window survives). The write runs between two steps of the browser (no timer racing its start).
        try runBrowser([
            ["goto": base],
            ["eval": "window.loadedOnce = true; document.querySelector('[data-stat=processed]').textContent", "expect": "41"],
            ["exec": ["/usr/bin/redis-cli", "-u", redis.url, "SET", Keys.statProcessed, "123456"]],
            ["wait": "document.querySelector('[data-stat=processed]').textContent === '123456' && window.loadedOnce === true"],
            ["eval": "document.getElementById('live-status').textContent.startsWith('Updated')", "expect": "true",
             "shot": "dashboard-live-updated"],
        ])
    }

    /// Chromium at 1440×900 and at 390×844 (a phone): no page scrolls sideways (wide tables scroll inside their own
    /// box); with `prefers-color-scheme: dark` the page background is dark, with light it is light.
    func testTheLayoutFitsALaptopAndAPhoneAndFollowsDarkMode() throws {
        let redis = try TestRedis(database: 164)
        let wide = String(repeating: "long-argument-without-spaces-", count: 12)
        let jid = try failedJob(redis, args: [.string(wide), .int(1)])
        try redis.client.enqueue(NewJob("Noop", args: [.string(wide)], queue: "mail"))
        try seedThroughput(redis)
        let base = try startServer(redis)
        let pages = ["", "queues", "jobs/enqueued", "jobs/dead", "job/\(jid)", "processes", "cron", "batches", "limits",
                     "unique", "outbox", "search?q=ReportJob"]
        var steps: [[String: String]] = []
        for (size, name) in [("1440x900", "laptop"), ("390x844", "phone")] {
            steps.append(["viewport": size])
            // innerWidth must still be the screen's: a mobile browser zooms out to show a page wider than the
            // screen, and then innerWidth grows with it.
            let width = size.prefix { $0 != "x" }
            let fits = "document.documentElement.scrollWidth <= window.innerWidth && window.innerWidth === \(width)"
            for page in pages {
                let shot = "\(name)-" + (page.isEmpty ? "dashboard" : page.hasPrefix("job/") ? "job" : page.replacingOccurrences(of: "/", with: "-")
                    .replacingOccurrences(of: "?", with: "-").replacingOccurrences(of: "=", with: "-"))
                steps.append(["goto": base + page])
                steps.append(["eval": "\(fits) ? 'fits' : 'overflows: ' + document.documentElement.scrollWidth + ' > ' + window.innerWidth",
                              "expect": "fits", "shot": shot])
            }
        }
        // The background's luminance (0 black … 255 white) from the computed colour.
        let luminance = "(() => { const [r, g, b] = getComputedStyle(document.body).backgroundColor.match(/\\d+/g).map(Number); return 0.2126 * r + 0.7152 * g + 0.0722 * b; })()"
        steps += [
            ["viewport": "1440x900"],
            ["media": "dark"],
            ["goto": base],
            ["eval": "\(luminance) < 60 ? 'dark' : 'light ' + \(luminance)", "expect": "dark", "shot": "dashboard-dark"],
            ["goto": base + "job/\(jid)"],
            ["eval": "\(luminance) < 60 ? 'dark' : 'light'", "expect": "dark", "shot": "job-page-dark"],
            ["goto": base + "jobs/dead"],
            ["eval": "\(luminance) < 60 ? 'dark' : 'light'", "expect": "dark", "shot": "dead-list-dark"],
            ["media": "light"],
            ["goto": base],
            ["eval": "\(luminance) > 200 ? 'light' : 'dark'", "expect": "light"],
        ]
        try runBrowser(steps)
    }

    /// A queue of 1,000,000 jobs (one small payload pushed a million times by a Lua script, in batches of 1,000:
    /// seconds): its page (first and 20,000th), `/queues` and `/` issue the same Redis commands as for a queue of 10 jobs —
    /// counted from `INFO commandstats` before and after each request (this test's Redis serves nobody else) — so
    /// what a page reads does not grow with the queue.
    func testAQueueOfAMillionJobsIsReadInABoundedSlice() throws {
        let redis = try TestRedis(database: 51)
        defer { _ = try? redis.command("UNLINK", Keys.queue("big")) }
        let payload = try JobClient.payload(for: NewJob("Noop", args: [1], queue: "big"), createdAt: Clock.now(),
                                            enqueuedAt: Clock.now())
        let fill = """
            local batch = {}
            for i = 1, 1000 do batch[i] = ARGV[1] end
            for j = 1, tonumber(ARGV[2]) do redis.call('RPUSH', KEYS[1], unpack(batch)) end
            redis.call('SADD', KEYS[2], ARGV[3])
            return redis.call('LLEN', KEYS[1])
            """
        let base = try startServer(redis)
        // (Not a job page: every entry here has the same jid; `/job/JID` reads at most the scan budget, tested in
        // WebHardeningTests.)
        let paths = ["jobs/enqueued?queue=big", "jobs/enqueued?queue=big&page=20000", "queues", ""]
        // Connection set-up (SELECT of the database, on a connection the server opens when it needs one) is not a
        // read of the page.
        let setUp: Set<String> = ["info", "select", "client|setinfo", "client|setname", "hello", "ping"]
        func commandsPerPage() throws -> [String: [String: Int]] {
            var counts: [String: [String: Int]] = [:]
            for path in paths {
                let before = try commandStats(redis)
                XCTAssertEqual(try http(base + path).status, 200, path)
                let after = try commandStats(redis)
                var delta: [String: Int] = [:]
                for (name, calls) in after where !setUp.contains(name) && calls != before[name] { delta[name] = calls - (before[name] ?? 0) }
                counts[path] = delta
            }
            return counts
        }
        XCTAssertEqual(try redis.int("EVAL", fill, 2, Keys.queue("big"), Keys.queues, payload.serialized(), 1, "big"), 1000)
        try redis.command("LTRIM", Keys.queue("big"), 0, 9)
        let small = try commandsPerPage()
        let started = ContinuousClock.now
        XCTAssertEqual(try redis.int("EVAL", fill, 2, Keys.queue("big"), Keys.queues, payload.serialized(), 1000, "big"), 1_000_010)
        print("WebDashboardTests: 1,000,000 jobs pushed in \(ContinuousClock.now - started)")
        let large = try commandsPerPage()
        for path in paths {
            XCTAssertEqual(large[path], small[path], "\(path): the same commands for 10 and 1,000,010 jobs")
            XCTAssertLessThan(large[path]?.values.reduce(0, +) ?? 0, 60, "\(path): \(large[path] ?? [:])")
        }
        let page = try http(base + "jobs/enqueued?queue=big").body
        XCTAssertTrue(page.contains("Enqueued jobs (1000010)"), "the size from LLEN, the rows from one LRANGE")
        XCTAssertEqual(page.matches(of: /name="jid"/).count, 25, "one page of rows")
    }

    /// Per-minute counters for the last 90 minutes and daily counters for 14 days, as the settle script writes them
    /// (`stat:minutely:*`, `stat:processed:DAY`), so the screenshots show charts with bars.
    func seedThroughput(_ redis: TestRedis) throws {
        let now = Clock.now()
        for ago in 0..<90 {
            let minute = Int(now / 60) - ago
            let day = Clock.utcDay(Double(minute) * 60)
            let field = String(((minute % 1440) + 1440) % 1440)
            try redis.command("HSET", Keys.statMinutelyProcessed(day: day), field, 40 + (ago * 37) % 60)
            try redis.command("HSET", Keys.statMinutelyFailed(day: day), field, (ago * 13) % 9)
        }
        for ago in 0..<14 {
            let day = Clock.utcDay(now - Double(ago) * 86400)
            try redis.command("SET", Keys.statProcessed(day: day), 50_000 + (ago * 7919) % 20_000)
            try redis.command("SET", Keys.statFailed(day: day), (ago * 397) % 2_000)
        }
    }

    /// `INFO commandstats` as command name → calls (server-wide).
    func commandStats(_ redis: TestRedis) throws -> [String: Int] {
        let text = try XCTUnwrap(try redis.command("INFO", "commandstats").string)
        var calls: [String: Int] = [:]
        for match in text.matches(of: /cmdstat_([a-z|_-]+):calls=(\d+)/) { calls[String(match.1)] = Int(match.2) }
        return calls
    }

    /// A POST of a raw form body (curl `--data-binary`): status and body.
    func postRaw(_ url: String, body: String) throws -> (status: Int, body: String) {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("web-post-\(UUID().uuidString)")
        try Data(body.utf8).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let result = try ChildProcess.run(try XCTUnwrap(TestServices.which("curl")),
                                          ["-s", "-X", "POST", "-w", "\n%{http_code}", "-H", "Content-Type: application/x-www-form-urlencoded",
                                           "--data-binary", "@" + file.path, url])
        let output = result.stdout
        guard let newline = output.lastIndex(of: "\n") else { throw XCTSkip("curl gave no status: \(result.stderr)") }
        return (Int(output[output.index(after: newline)...]) ?? 0, String(output[..<newline]))
    }
}

/// The bulk bound as the tests see it (`WebServer.bulkSelectionLimit` is internal to the web target).
enum WebServerLimits {
    static let bulk = 500
}
