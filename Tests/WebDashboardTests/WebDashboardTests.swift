import Foundation
import WorkersQueue
import WorkersScheduler
import WorkersTestServices
import XCTest

/// `workerctl web` (docs/web.md) as an operator runs it: a real `workerctl web` process on a free port over a real
/// Redis. HTTP-level checks with curl (escaping, CSRF, credential) and, in headless Chromium, every page loaded and
/// retry/delete, queue pause/resume, process quiet and cron disable/run now done from the page's own forms
/// (Tests/WebDashboardTests/browser.py), with Redis checked afterwards. Screenshots go to .build/test-artifacts/web/ (not committed).
final class WebDashboardTests: XCTestCase {
    var servers: [ChildProcess] = []

    override func tearDown() {
        for server in servers { server.signal(SIGTERM); _ = server.wait() }
        servers = []
        super.tearDown()
    }

    /// Starts `workerctl web --port 0 ARGS` and returns its base URL (from the `web_url` log line).
    func startServer(_ redis: TestRedis, arguments: [String] = [], environment: [String: String] = [:]) throws -> String {
        let server = try ChildProcess(executable: TestServices.workerctl, arguments: ["web", "--port", "0"] + arguments,
                                      environment: ["REDIS_URL": redis.url].merging(environment) { $1 })
        servers.append(server)
        var url: String?
        XCTAssertTrue(eventually {
            url = server.stderr.firstMatch(of: /"web_url":"([^"]+)"/).map { String($0.1) }
            return url != nil
        }, server.stderr)
        return try XCTUnwrap(url)
    }

    /// One HTTP request through curl: status code and body.
    func http(_ url: String, method: String = "GET", form: [String: String]? = nil,
              headers: [String] = []) throws -> (status: Int, body: String) {
        var arguments = ["-s", "-X", method, "-w", "\n%{http_code}"]
        for header in headers { arguments += ["-H", header] }
        if let form {
            for (name, value) in form.sorted(by: { $0.key < $1.key }) { arguments += ["--data-urlencode", "\(name)=\(value)"] }
        }
        let result = try ChildProcess.run(try XCTUnwrap(TestServices.which("curl")), arguments + [url])
        let output = result.stdout
        guard let newline = output.lastIndex(of: "\n") else { throw XCTSkip("curl gave no status: \(result.stderr)") }
        return (Int(output[output.index(after: newline)...]) ?? 0, String(output[..<newline]))
    }

    /// The CSRF token the pages embed in their forms (read from the dead-jobs page, which has forms when a job is dead).
    func csrfToken(_ base: String) throws -> String {
        let page = try http(base + "jobs/dead").body
        return try XCTUnwrap(page.firstMatch(of: /name="csrf" value="([0-9a-f]{64})"/).map { String($0.1) }, page)
    }

    /// A job put straight into `dead` with `message` as its error, as a failed Sidekiq job looks.
    func deadJob(_ redis: TestRedis, className: String, args: [JSONValue], message: String) throws -> String {
        var payload = try JobClient.payload(for: NewJob(className, args: args), createdAt: Clock.now(), enqueuedAt: Clock.now())
        payload.fields["error_class"] = .string("RuntimeError")
        payload.fields["error_message"] = .string(message)
        payload.fields["failed_at"] = .double(Clock.now())
        payload.fields["retry_count"] = .int(3)
        try redis.command("ZADD", Keys.dead, Clock.now(), payload.serialized())
        return try XCTUnwrap(payload.jid)
    }

    /// A cron entry as the scheduler writes it from a schedule file (`CronStore.sync`, the call `workerctl scheduler`
    /// makes).
    func cronEntry(_ redis: TestRedis, _ name: String, queue: String, description: String? = nil) throws {
        let entry = try ScheduleEntry(name: name, cron: try CronExpression("0 3 * * *"), className: "NightlyReport",
                                      queue: queue, args: [.string("all")], description: description)
        try CronStore(connection: try redis.connection()).sync([entry])
    }

    /// A URL path segment percent-encoded as the pages encode names.
    func pathComponent(_ text: String) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return text.addingPercentEncoding(withAllowedCharacters: allowed) ?? ""
    }

    /// A page without the one script tag every page has (`/assets/app.js`): what is left must hold no `<script`.
    func withoutOwnScript(_ body: String) -> String {
        body.replacingOccurrences(of: "<script src=\"/assets/app.js\" defer></script>", with: "")
    }

    /// Runs browser.py over `steps` in headless Chromium; skips when Chromium is not installed.
    func runBrowser(_ steps: [[String: Any]]) throws {
        guard let chromium = TestServices.which("chromium") ?? TestServices.which("chromium-browser") else {
            // scripts/services installs Debian's chromium (APT_PACKAGES); only a machine without it gets here.
            print("WebDashboardTests: SKIPPED the browser test — chromium is not installed")
            throw XCTSkip("chromium is not installed (scripts/services installs it)")
        }
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("browser.py")
        let shots = TestServices.repositoryRoot.appendingPathComponent(".build/test-artifacts/web").path
        let stepsJSON = String(decoding: try JSONSerialization.data(withJSONObject: steps), as: UTF8.self)
        let run = try ChildProcess.run(try XCTUnwrap(TestServices.which("python3")),
                                       [script.path, chromium.path, shots, stepsJSON], timeout: 180)
        XCTAssertEqual(run.status, 0, "browser: \(run.stdout)\(run.stderr)")
    }

    func testNoJobArgumentOrErrorIsRenderedUnescaped() throws {
        let redis = try TestRedis(database: 117)
        let evil = "<script>alert('x')</script>"
        // Markup in the queue name: our client refuses such a name (JobClient.validateQueue), another producer may
        // write it, so it is pushed by hand.
        let foreignJob = try JobClient.payload(for: NewJob("Evil<b>Class", args: [.string(evil)], queue: "qi"),
                                               createdAt: Clock.now(), enqueuedAt: Clock.now())
        var markedUp = foreignJob
        markedUp.queue = "q<i>"
        try redis.command("LPUSH", Keys.queue("q<i>"), markedUp.serialized())
        try redis.command("SADD", Keys.queues, "q<i>")
        let enqueued = try XCTUnwrap(foreignJob.jid)
        let dead = try deadJob(redis, className: "Failing", args: [.string(evil)], message: "boom \(evil)")
        let base = try startServer(redis)
        for path in ["", "queues", "jobs/enqueued", "jobs/dead", "job/\(enqueued)", "job/\(dead)",
                     "search?q=\(dead)", "search?q=alert", "jobs/enqueued?q=%3Cscript%3E"] {
            let page = try http(base + path)
            XCTAssertEqual(page.status, 200, path)
            XCTAssertFalse(withoutOwnScript(page.body).contains("<script"), "\(path) renders a script tag: \(page.body)")
            XCTAssertFalse(page.body.contains("<b>") || page.body.contains("<i>"), "\(path) renders markup from data")
        }
        XCTAssertTrue(try http(base + "jobs/dead").body.contains("boom &lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"))
        XCTAssertTrue(try http(base + "job/\(enqueued)").body.contains("Evil&lt;b&gt;Class"))

        // Cron entries and batches: one written by the scheduler with a description holding a script, one written by
        // another tool (sidekiq-cron's hash, by hand) with markup in its name, class and queue; a batch likewise.
        try cronEntry(redis, "nightly", queue: "reports", description: evil)
        let foreign = "evil<b>entry"
        try redis.command("HSET", CronKeys.job(foreign), "name", foreign, "klass", "Evil<b>Class", "cron", "*/5 * * * *",
                          "queue", "q<i>", "description", evil, "status", "enabled")
        try redis.command("SADD", CronKeys.jobs, CronKeys.job(foreign))
        let batch = try Batches.create(try redis.connection(), NewBatch(description: evil, jobs: [NewJob("Noop", args: [1])]))
        let escapedEvil = "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"
        for path in ["cron", "cron/nightly", "cron/\(pathComponent(foreign))", "batches", "batch/\(batch.bid)"] {
            let page = try http(base + path)
            XCTAssertEqual(page.status, 200, path)
            XCTAssertFalse(withoutOwnScript(page.body).contains("<script"), "\(path) renders a script tag: \(page.body)")
            XCTAssertFalse(page.body.contains("<b>") || page.body.contains("<i>"), "\(path) renders markup from data")
        }
        XCTAssertTrue(try http(base + "cron/nightly").body.contains(escapedEvil))
        let foreignPage = try http(base + "cron/\(pathComponent(foreign))").body
        XCTAssertTrue(foreignPage.contains("evil&lt;b&gt;entry") && foreignPage.contains(escapedEvil), foreignPage)
        XCTAssertTrue(try http(base + "cron").body.contains("Evil&lt;b&gt;Class"))
        XCTAssertTrue(try http(base + "batches").body.contains(escapedEvil))
        XCTAssertTrue(try http(base + "batch/\(batch.bid)").body.contains(escapedEvil))
        // The batch's job counted as failed and dead (the sets the settle script writes): linked to its job page.
        let batchJid = try XCTUnwrap(batch.jids.first)
        try redis.command("SADD", Keys.batch(batch.bid) + "-failed", batchJid)
        try redis.command("SADD", Keys.batch(batch.bid) + "-died", batchJid)
        let detail = try http(base + "batch/\(batch.bid)").body
        XCTAssertTrue(detail.contains("Failed jobs (1)") && detail.contains("Dead jobs (1)"), detail)
        XCTAssertTrue(detail.contains("<a href=\"/job/\(batchJid)\">\(batchJid)</a>"), detail)
        XCTAssertTrue(try http(base + "batches").body.contains("<a href=\"/batch/\(batch.bid)\">"))
    }

    func testStateChangesNeedAPostWithThePagesCSRFToken() throws {
        let redis = try TestRedis(database: 118)
        let jid = try deadJob(redis, className: "Failing", args: [1], message: "boom")
        let base = try startServer(redis)
        let missing = try http(base + "job/\(jid)/delete", method: "POST", form: ["state": "dead"])
        XCTAssertEqual(missing.status, 403, missing.body)
        let wrong = try http(base + "job/\(jid)/delete", method: "POST", form: ["state": "dead", "csrf": String(repeating: "0", count: 64)])
        XCTAssertEqual(wrong.status, 403, wrong.body)
        let viaGet = try http(base + "job/\(jid)/delete?state=dead&csrf=\(try csrfToken(base))")
        XCTAssertNotEqual(viaGet.status / 100, 2, "a GET never changes state")
        XCTAssertEqual(try redis.int("ZCARD", Keys.dead), 1, "nothing changed without a valid POST")
        let queueClear = try http(base + "queues/default/clear", method: "POST", form: ["csrf": "nope"])
        XCTAssertEqual(queueClear.status, 403)

        let token = try csrfToken(base)
        let accepted = try http(base + "job/\(jid)/delete", method: "POST", form: ["state": "dead", "csrf": token])
        XCTAssertEqual(accepted.status, 303, accepted.body)
        XCTAssertEqual(try redis.int("ZCARD", Keys.dead), 0)
        // The same action again: the job is gone, said as such (404), not a server error.
        let again = try http(base + "job/\(jid)/delete", method: "POST", form: ["state": "dead", "csrf": token])
        XCTAssertEqual(again.status, 404, again.body)

        // A cron action likewise: refused without the token, with a wrong one and as a GET; done with the token.
        try cronEntry(redis, "nightly", queue: "reports")
        let status = { try redis.command("HGET", CronKeys.job("nightly"), "status").string }
        for form in [[:], ["csrf": String(repeating: "0", count: 64)]] {
            let refused = try http(base + "cron/nightly/disable", method: "POST", form: form)
            XCTAssertEqual(refused.status, 403, refused.body)
        }
        XCTAssertEqual(try http(base + "cron/nightly/run", method: "POST", form: ["csrf": "nope"]).status, 403)
        XCTAssertNotEqual(try http(base + "cron/nightly/disable?csrf=\(token)").status / 100, 2, "a GET never changes state")
        XCTAssertEqual(try status(), "enabled", "nothing changed without a valid POST")
        XCTAssertEqual(try redis.int("LLEN", Keys.queue("reports")), 0, "nothing enqueued without a valid POST")
        let disabled = try http(base + "cron/nightly/disable", method: "POST", form: ["csrf": token, "back": "/cron/nightly"])
        XCTAssertEqual(disabled.status, 303, disabled.body)
        XCTAssertEqual(try status(), "disabled")
        let gone = try http(base + "cron/no-such-entry/run", method: "POST", form: ["csrf": token])
        XCTAssertEqual(gone.status, 404, "an entry that is gone is said as such: \(gone.body)")
    }

    func testOnlyLoopbackIsServedWithoutACredential() throws {
        let redis = try TestRedis(database: 119)
        let refused = try ChildProcess.run(TestServices.workerctl, ["web", "--host", "0.0.0.0", "--port", "0"],
                                           environment: ["REDIS_URL": redis.url], timeout: 20)
        XCTAssertEqual(refused.status, 2, refused.stderr)
        XCTAssertTrue(refused.stderr.contains("without a credential"), refused.stderr)

        let base = try startServer(redis, environment: ["WORKERCTL_WEB_TOKEN": "s3cret-token-0123456789"])
        XCTAssertEqual(try http(base).status, 401)
        XCTAssertEqual(try http(base, headers: ["Authorization: Bearer wrong"]).status, 401)
        XCTAssertEqual(try http(base, headers: ["Authorization: Bearer s3cret-token-0123456789"]).status, 200)
        let basic = Data("operator:s3cret-token-0123456789".utf8).base64EncodedString()
        XCTAssertEqual(try http(base, headers: ["Authorization: Basic \(basic)"]).status, 200)
        XCTAssertEqual(try http(base + "job/x/delete", method: "POST", form: ["csrf": "x"]).status, 401,
                       "the credential is checked before anything else")
    }

    /// With two shards (REDIS_SHARDS / QUEUE_SHARDS, docs/sharding.md) every page shows both, each in a section headed
    /// with its name; an action from a shard's section goes to that shard's Redis.
    func testEveryShardIsShownAndActedOnWhereItsJobLives() throws {
        let redis = try TestRedis(database: 121)
        let other = try TestRedis(database: 122)
        try redis.client.enqueue(NewJob("Noop", args: [1], queue: "alpha"))
        try other.client.enqueue(NewJob("Noop", args: [2], queue: "beta"))
        let deadOnB = try deadJob(other, className: "OnShardB", args: [3], message: "boom on b")
        let base = try startServer(redis, environment: ["REDIS_SHARDS": "b=\(other.url)", "QUEUE_SHARDS": "beta=b"])
        let queues = try http(base + "queues").body
        XCTAssertTrue(queues.contains("Shard default") && queues.contains("Shard b"), queues)
        XCTAssertTrue(queues.contains(">alpha<") && queues.contains(">beta<"), queues)
        let dashboard = try http(base).body
        XCTAssertTrue(dashboard.contains("Shard default") && dashboard.contains("Shard b"), dashboard)
        let dead = try http(base + "jobs/dead").body
        XCTAssertTrue(dead.contains("OnShardB"), dead)
        XCTAssertTrue(dead.contains("name=\"shard\" value=\"1\""), "the form names shard b")
        XCTAssertTrue(try http(base + "job/\(deadOnB)").body.contains("boom on b"))

        let token = try XCTUnwrap(dead.firstMatch(of: /name="csrf" value="([0-9a-f]{64})"/).map { String($0.1) })
        let deleted = try http(base + "job/\(deadOnB)/delete", method: "POST", form: ["state": "dead", "shard": "1", "csrf": token])
        XCTAssertEqual(deleted.status, 303, deleted.body)
        XCTAssertEqual(try other.int("ZCARD", Keys.dead), 0, "deleted on shard b")
        let paused = try http(base + "queues/beta/pause", method: "POST", form: ["shard": "1", "csrf": token])
        XCTAssertEqual(paused.status, 303)
        XCTAssertEqual(try other.int("SISMEMBER", "paused", "beta"), 1, "paused on shard b")
        XCTAssertEqual(try redis.int("EXISTS", "paused"), 0, "nothing written on the default shard")

        // Cron entries live on their queue's shard: /cron shows each shard's, and Disable from shard b's form
        // disables it there.
        try cronEntry(other, "beta-nightly", queue: "beta")
        let cron = try http(base + "cron").body
        XCTAssertTrue(cron.contains("Shard default") && cron.contains("Shard b") && cron.contains(">beta-nightly<"), cron)
        XCTAssertTrue(cron.contains("No cron entries."), "the default shard has none: \(cron)")
        let disabled = try http(base + "cron/beta-nightly/disable", method: "POST", form: ["shard": "1", "csrf": token])
        XCTAssertEqual(disabled.status, 303, disabled.body)
        XCTAssertEqual(try other.command("HGET", CronKeys.job("beta-nightly"), "status").string, "disabled")
        XCTAssertEqual(try http(base + "cron/beta-nightly").status, 200, "shown from the shard that holds it")
    }

    /// Headless Chromium loads every page, then retries one dead job and deletes another by submitting the page's
    /// own forms (with the CSRF field the page holds); Redis shows the moves.
    func testInChromiumEveryPageLoadsAndRetryAndDeleteWorkFromThePage() throws {
        let redis = try TestRedis(database: 120)
        let retried = try deadJob(redis, className: "ReportJob", args: [1], message: "first failure")
        let deleted = try deadJob(redis, className: "ReportJob", args: [2], message: "second failure")
        try redis.client.enqueue(NewJob("Noop", args: [3], queue: "mail"))
        let base = try startServer(redis)
        let pages: [(String, String)] = [("", "Dashboard"), ("queues", "mail"), ("jobs/enqueued", "Noop"),
                                         ("jobs/scheduled", "No jobs."), ("jobs/retry", "No jobs."), ("jobs/busy", "No jobs."),
                                         ("jobs/dead", "first failure"), ("job/\(retried)", "first failure"),
                                         ("processes", "No live processes."), ("cron", "No cron entries."), ("batches", "No batches."),
                                         ("limits", "No limits declared."),
                                         ("unique", "No unique locks held."), ("outbox", "Outbox"),
                                         ("search?q=ReportJob", "ReportJob")]
        var steps: [[String: String]] = pages.map { ["goto": base + $0.0, "expect": $0.1,
                                                     "shot": $0.0.isEmpty ? "dashboard" : $0.0.replacingOccurrences(of: "/", with: "-")] }
        steps.append(["goto": base + "jobs/dead", "expect": "second failure"])
        steps.append(["submit": "form[action='/job/\(retried)/retry']", "expect": "Dead jobs (1)", "shot": "after-retry"])
        steps.append(["submit": "form[action='/job/\(deleted)/delete']", "expect": "Dead jobs (0)", "shot": "after-delete"])
        try runBrowser(steps)

        XCTAssertEqual(try redis.int("ZCARD", Keys.dead), 0, "one retried, one deleted from the page")
        let queued = try redis.command("LRANGE", "queue:default", 0, -1).strings.map { try JobPayload(parsing: $0) }
        XCTAssertEqual(queued.map(\.jid), [retried], "the retried job is back in its queue")
        XCTAssertEqual(queued.first?.retryCount, 2, "a manual retry does not use up an attempt (retry_count − 1)")
    }

    /// Headless Chromium clicks the queues page's Pause and Resume buttons, a live worker's Quiet button on the
    /// processes page, and a cron entry's Disable and Run now buttons on /cron; Redis shows each change, and the
    /// worker (a real `workerctl worker`) goes quiet.
    func testInChromiumQueueProcessAndCronButtonsWorkFromThePage() throws {
        let redis = try TestRedis(database: 123)
        try redis.client.enqueue(NewJob("Noop", args: [1], queue: "mail"))
        try redis.client.enqueue(NewJob("Noop", args: [2], queue: "bulk"))
        try cronEntry(redis, "nightly", queue: "reports")
        let worker = try ChildProcess(executable: TestServices.workerctl,
                                      arguments: ["worker", "--queue", "idle", "--concurrency", "1", "--heartbeat-interval", "0.2",
                                                  "--poll-interval", "0.2", "--shutdown-timeout", "5"],
                                      environment: ["REDIS_URL": redis.url])
        servers.append(worker)
        XCTAssertTrue(eventually { (try? redis.int("SCARD", Keys.processes)) == 1 }, worker.stderr)
        let identity = try XCTUnwrap(redis.command("SMEMBERS", Keys.processes).strings.first)
        XCTAssertNotEqual(try redis.command("HGET", identity, "quiet").string, "true")
        let base = try startServer(redis)

        let mailPause = "form[action='/queues/mail/pause'] button"
        try runBrowser([
            ["goto": base + "queues", "expect": "bulk"],
            ["click": mailPause, "expect": "paused", "shot": "queues-after-pause"],
            ["click": "form[action='/queues/bulk/pause'] button", "expect": "Resume"],
            ["click": "form[action='/queues/bulk/resume'] button", "shot": "queues-after-resume"],
            ["goto": base + "processes", "expect": identity],
            ["click": "#processes form[action$='/quiet'] button", "shot": "processes-after-quiet"],
            ["goto": base + "cron", "expect": "nightly"],
            ["click": "form[action='/cron/nightly/disable'] button", "expect": "disabled", "shot": "cron-after-disable"],
            ["click": "form[action='/cron/nightly/run'] button"],
            ["goto": base + "cron/nightly", "expect": "(run now)", "shot": "cron-entry"],
        ])

        XCTAssertEqual(try redis.command("SMEMBERS", "paused").strings, ["mail"], "mail paused; bulk paused, then resumed")
        XCTAssertTrue(eventually { (try? redis.command("HGET", identity, "quiet").string) == "true" },
                      "the worker got the quiet signal and says so in its heartbeat: \(worker.stderr)")
        XCTAssertEqual(try redis.command("HGET", CronKeys.job("nightly"), "status").string, "disabled")
        let queued = try redis.payloads(list: Keys.queue("reports"))
        XCTAssertEqual(queued.map(\.className), ["NightlyReport"], "Run now enqueued the entry's job")
        XCTAssertEqual(try CronStore(connection: try redis.connection()).history(name: "nightly").map(\.jid), queued.map(\.jid))
    }
}
