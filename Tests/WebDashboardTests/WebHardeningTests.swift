import Foundation
import WorkersQueue
import WorkersTestServices
import XCTest

/// The dashboard against hostile or broken input (review 2026-11-27, issue 32): numbers from the URL and from
/// payloads, foreign Host and Origin headers, large queues, secrets in job arguments, Redis down.
extension WebDashboardTests {
    /// M2: a page number far past Int's range in the URL is clamped (Bounded), the server answers and stays up;
    /// `workerctl jobs ls --page` past 10^6 is a usage error (exit 2), not a trap.
    func testAHugePageNumberIsClampedAndTheServerStaysUp() throws {
        let redis = try TestRedis(database: 104)
        _ = try deadJob(redis, className: "Failing", args: [1], message: "boom")
        let base = try startServer(redis)
        let huge = try http(base + "jobs/dead?page=400000000000000000")
        XCTAssertEqual(huge.status, 200, huge.body)
        XCTAssertTrue(huge.body.contains("page \(PageRequest.maxNumber) of 1"), huge.body)
        for page in ["99999999999999999999999999", "-400000000000000000", "abc", "0"] {
            XCTAssertEqual(try http(base + "jobs/dead?page=\(page)").status, 200, page)
        }
        let after = try http(base + "jobs/dead")
        XCTAssertEqual(after.status, 200, "the server is still up")
        XCTAssertTrue(after.body.contains("Failing"), after.body)

        let cli = try ChildProcess.run(TestServices.workerctl, ["jobs", "ls", "--state", "dead", "--page", "400000000000000000"],
                                       environment: ["REDIS_URL": redis.url], timeout: 20)
        XCTAssertEqual(cli.status, 2, cli.stderr)
        XCTAssertTrue(cli.stderr.contains("page must be within 1...1000000"), cli.stderr)
    }
}

extension WebDashboardTests {
    /// M3: a job whose `enqueued_at` is ±1e300 at a queue's tail, and a retry whose score is `inf`: the pages and
    /// `workerctl queues ls` / `jobs ls` / `jobs show` answer, the latency reads "unknown" (JSON: null).
    func testAnAbsurdTimestampIsAnUnknownLatencyNotACrash() throws {
        let redis = try TestRedis(database: 105)
        var jids: [String] = []
        for (queue, stamp) in [("minus", "-1e300"), ("plus", "1e300")] {
            let jid = "absurd\(queue)00000000000".prefix(24)
            jids.append(String(jid))
            try redis.command("LPUSH", Keys.queue(queue),
                              #"{"class":"Noop","args":[],"jid":"\#(jid)","queue":"\#(queue)","enqueued_at":\#(stamp),"created_at":\#(stamp)}"#)
            try redis.command("SADD", Keys.queues, queue)
        }
        try redis.command("ZADD", Keys.retry, "inf",
                          #"{"class":"Noop","args":[],"jid":"absurdretry0000000000000","queue":"default","failed_at":1e300,"retry_count":1,"error_class":"E","error_message":"m"}"#)
        let base = try startServer(redis)
        for path in ["", "queues", "jobs/enqueued", "jobs/retry", "job/\(jids[0])", "job/absurdretry0000000000000"] {
            let page = try http(base + path)
            XCTAssertEqual(page.status, 200, "\(path): \(page.body)")
        }
        XCTAssertTrue(try http(base + "queues").body.contains("<td>unknown</td>"))
        XCTAssertEqual(try http(base).status, 200, "the server is still up")

        let environment = ["REDIS_URL": redis.url]
        let table = try ChildProcess.run(TestServices.workerctl, ["queues", "ls"], environment: environment, timeout: 20)
        XCTAssertEqual(table.status, 0, table.stderr)
        XCTAssertTrue(table.stdout.contains("unknown"), table.stdout)
        let json = try ChildProcess.run(TestServices.workerctl, ["queues", "ls", "--json"], environment: environment, timeout: 20)
        XCTAssertEqual(json.status, 0, json.stderr)
        XCTAssertTrue(json.stdout.contains(#""latency":null"#), json.stdout)
        for arguments in [["jobs", "ls", "--state", "enqueued"], ["jobs", "ls", "--state", "retry"], ["jobs", "show", jids[1]],
                          ["jobs", "show", "absurdretry0000000000000"], ["jobs", "ls", "--state", "retry", "--json"]] {
            let run = try ChildProcess.run(TestServices.workerctl, arguments, environment: environment, timeout: 20)
            XCTAssertEqual(run.status, 0, "\(arguments): \(run.stderr)")
        }
    }
}

extension WebDashboardTests {
    /// M4: without a credential, a request naming another host (a DNS-rebound name) gets 421 and no page (no CSRF
    /// token); only 127.0.0.1, localhost and [::1] on the bound port are served. A POST whose Origin or
    /// Sec-Fetch-Site says it came from another site is 403 even with the right CSRF token.
    func testWithoutACredentialOnlyLoopbackHostsAreServedAndPostsMustBeSameOrigin() throws {
        let redis = try TestRedis(database: 106)
        let jid = try deadJob(redis, className: "Failing", args: [1], message: "boom")
        let base = try startServer(redis)
        let port = try XCTUnwrap(base.firstMatch(of: /:(\d+)\//).map { String($0.1) })
        for host in ["attacker.example:\(port)", "127.0.0.1.attacker.example:\(port)", "attacker.example", "127.0.0.1:1",
                     "localhost.:\(port)", "[::2]:\(port)"] {
            let page = try http(base + "jobs/dead", headers: ["Host: \(host)"])
            XCTAssertTrue([403, 421].contains(page.status), "Host \(host): \(page.status)")
            XCTAssertFalse(page.body.contains("csrf"), "Host \(host) got a page with the CSRF token: \(page.body)")
        }
        for host in ["127.0.0.1:\(port)", "localhost:\(port)", "LOCALHOST:\(port)", "[::1]:\(port)"] {
            XCTAssertEqual(try http(base + "jobs/dead", headers: ["Host: \(host)"]).status, 200, host)
        }
        let token = try csrfToken(base)
        let form = ["state": "dead", "csrf": token]
        for header in ["Origin: http://attacker.example", "Origin: null", "Sec-Fetch-Site: cross-site",
                       "Sec-Fetch-Site: same-site"] {
            let refused = try http(base + "job/\(jid)/delete", method: "POST", form: form, headers: [header])
            XCTAssertEqual(refused.status, 403, "\(header): \(refused.body)")
        }
        XCTAssertEqual(try redis.int("ZCARD", Keys.dead), 1, "nothing changed by a cross-site post")
        let accepted = try http(base + "job/\(jid)/delete", method: "POST", form: form,
                                headers: ["Origin: http://127.0.0.1:\(port)", "Sec-Fetch-Site: same-origin"])
        XCTAssertEqual(accepted.status, 303, accepted.body)
        XCTAssertEqual(try redis.int("ZCARD", Keys.dead), 0)
    }
}

extension WebDashboardTests {
    /// M5: with 30,000 jobs in a queue, a search by class, a class filter, a text filter and a jid lookup each read
    /// at most `ScanBudget.webEntries` entries and say so (the counts shown, not the time taken, are checked).
    func testSearchFiltersAndJidLookupStopAtTheScanBudget() throws {
        let redis = try TestRedis(database: 108)
        let connection = try redis.connection()
        func jid(_ n: Int) -> String { "bulk" + String(repeating: "0", count: 20 - String(n).count) + String(n) }
        for batch in 0..<30 {
            let members: [any RedisArgument] = (0..<1000).map { index in
                let n = batch * 1000 + index
                return #"{"class":"Noop","args":[\#(n)],"jid":"\#(jid(n))","queue":"bulk","enqueued_at":1700000000.0}"#
            }
            _ = try connection.send(["LPUSH", Keys.queue("bulk")] + members).checked()
        }
        try redis.command("SADD", Keys.queues, "bulk")
        XCTAssertEqual(try redis.int("LLEN", Keys.queue("bulk")), 30_000)
        let base = try startServer(redis)
        let budget = ScanBudget.webEntries

        let search = try http(base + "search?q=Noop")
        XCTAssertEqual(search.status, 200)
        XCTAssertTrue(search.body.contains("Scanned \(budget) entries"), search.body)
        for path in ["jobs/enqueued?class=Noop", "jobs/enqueued?queue=bulk&q=nothing-like-this"] {
            let page = try http(base + path)
            XCTAssertEqual(page.status, 200, path)
            XCTAssertTrue(page.body.contains("Scanned \(budget) of 30000 entries"), "\(path): \(page.body.prefix(3000))")
        }
        XCTAssertTrue(try http(base + "jobs/enqueued?class=Noop").body.contains("\(budget) match among them"))
        // The newest job is found; the oldest (at the tail, past the budget) is said not found within the scan.
        XCTAssertTrue(try http(base + "job/\(jid(29_999))").body.contains("queue bulk"))
        let oldest = try http(base + "job/\(jid(0))")
        XCTAssertEqual(oldest.status, 200, oldest.body)
        XCTAssertTrue(oldest.body.contains("Not found in the \(budget) entries scanned"), oldest.body)
    }
}

extension WebDashboardTests {
    /// The response headers of one request (lower-cased names), through curl.
    func responseHeaders(_ url: String, method: String = "GET", form: [String: String]? = nil,
                         headers: [String] = []) throws -> [String: String] {
        var arguments = ["-s", "-o", "/dev/null", "-D", "-", "-X", method]
        for header in headers { arguments += ["-H", header] }
        for (name, value) in (form ?? [:]).sorted(by: { $0.key < $1.key }) { arguments += ["--data-urlencode", "\(name)=\(value)"] }
        let result = try ChildProcess.run(try XCTUnwrap(TestServices.which("curl")), arguments + [url])
        var fields: [String: String] = [:]
        for line in result.stdout.split(separator: "\r\n") {
            guard let colon = line.firstIndex(of: ":") else { continue }
            fields[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        return fields
    }

    /// M11: a receipt job's purchase token and receipt, and a dead job's e-mail and coordinates, are not shown by
    /// any page or by `workerctl jobs ls|show` (table and JSON): "[redacted]" instead; other args stay visible. The
    /// receipt class's declared personal fields (issue 50 point 6) are hidden too, though `user_id` and
    /// `transaction_id` are no sensitive words: "[redacted]" in clear, "[encrypted]" for an envelope. A search by the
    /// token finds nothing (search is by jid or class). Every answer carries `Cache-Control: no-store`.
    func testSecretsInArgumentsAreRedactedOnPagesAndByWorkerctlJobs() throws {
        let redis = try TestRedis(database: 109)
        let token = "tokSECRETpurchase0123456789"
        let receipt = "MIIreceiptSECRETdata987"
        let email = "alice.secret@example.com"
        let jid = try redis.client.enqueue(NewJob("ValidateReceiptJob", args: [.object([
            "user_id": .string("user-personal-42"), "store": .string("google-visible"), "transaction_id": .string("7300099123"),
            "original_transaction_id": .object(["enc": .string("v1"), "kid": .string("kidSECRETlink"), "ct": .string("AAAA")]),
            "purchase_token": .string(token), "receipt_data": .string(receipt)])]))
        let dead = try deadJob(redis, className: "ReverseGeocodeJob",
                               args: [.object(["email": .string(email), "lat": .double(48.137154), "longitude": .double(11.576124),
                                               "nested": .object(["purchaseToken": .string(token)])])], message: "boom")
        let base = try startServer(redis)
        let secrets = [token, receipt, email, "48.137154", "11.576124", "user-personal-42", "7300099123", "kidSECRETlink"]
        for path in ["jobs/enqueued", "job/\(jid)", "search?q=ValidateReceiptJob", "jobs/dead", "job/\(dead)", "search?q=\(dead)", ""] {
            let page = try http(base + path)
            XCTAssertEqual(page.status, 200, path)
            for secret in secrets { XCTAssertFalse(page.body.contains(secret), "\(path) shows \(secret)") }
        }
        let receiptPage = try http(base + "job/\(jid)").body
        XCTAssertTrue(receiptPage.contains("[redacted]") && receiptPage.contains("[encrypted]") && receiptPage.contains("google-visible"),
                      receiptPage)
        XCTAssertTrue(try http(base + "jobs/dead").body.contains("[redacted]"))
        XCTAssertTrue(try http(base + "search?q=\(token)").body.contains("No jobs."), "search does not read argument text")

        XCTAssertEqual(try responseHeaders(base + "jobs/dead")["cache-control"], "no-store")
        XCTAssertEqual(try responseHeaders(base + "no/such/page")["cache-control"], "no-store")
        XCTAssertEqual(try responseHeaders(base + "job/\(dead)/delete", method: "POST", form: ["csrf": "wrong"])["cache-control"], "no-store")

        let environment = ["REDIS_URL": redis.url]
        for arguments in [["jobs", "ls", "--state", "enqueued"], ["jobs", "ls", "--state", "dead", "--json"], ["jobs", "show", jid],
                          ["jobs", "show", dead, "--json"], ["jobs", "show", dead]] {
            let run = try ChildProcess.run(TestServices.workerctl, arguments, environment: environment, timeout: 20)
            XCTAssertEqual(run.status, 0, "\(arguments): \(run.stderr)")
            for secret in secrets { XCTAssertFalse(run.stdout.contains(secret), "\(arguments) shows \(secret): \(run.stdout)") }
            if arguments.contains("--json") || arguments[1] == "show" {
                XCTAssertTrue(run.stdout.contains("[redacted]"), "\(arguments): \(run.stdout)")
            }
        }
    }
}

extension WebDashboardTests {
    /// L1: a form's `back` is followed only to the dashboard's own pages; `/\evil.example/x`, `//evil.example` and
    /// absolute URLs go to the action's own page.
    func testRedirectsGoOnlyToTheDashboardsOwnPages() throws {
        let redis = try TestRedis(database: 110)
        _ = try deadJob(redis, className: "Failing", args: [1], message: "boom")
        let base = try startServer(redis)
        let token = try csrfToken(base)
        for back in ["/\\evil.example/x", "//evil.example/x", "https://evil.example/", "/%0d%0aLocation:x", "/ evil",
                     "/evil.example/x", "javascript:alert(1)"] {
            let headers = try responseHeaders(base + "queues/default/pause", method: "POST", form: ["csrf": token, "back": back])
            XCTAssertEqual(headers["location"], "/queues", "back=\(back)")
        }
        let ok = try responseHeaders(base + "queues/default/resume", method: "POST", form: ["csrf": token, "back": "/jobs/enqueued?queue=default"])
        XCTAssertEqual(ok["location"], "/jobs/enqueued?queue=default")
    }

    /// L3: with the shard's Redis gone, a page is a 503 naming the shard and its address, not an empty 500.
    func testRedisDownIsA503NamingTheShard() throws {
        let redis = try TestRedis(database: 111)
        // Port 1: nothing listens there (a privileged port), so every connection is refused.
        let base = try startServer(redis, environment: ["REDIS_SHARDS": "gone=redis://127.0.0.1:1/0", "QUEUE_SHARDS": "lost=gone"])
        let page = try http(base + "queues")
        XCTAssertEqual(page.status, 503, page.body)
        XCTAssertTrue(page.body.contains("Shard gone (127.0.0.1:1"), page.body)
        XCTAssertEqual(try http(base + "jobs/dead").status, 503)
    }

    /// L4: a confirmation's text is read from a `data-confirm` attribute by the pages' one script
    /// (`/assets/app.js`); no text is written into a script, and no handler is inline.
    func testConfirmationTextIsAnAttributeNotScript() throws {
        let redis = try TestRedis(database: 112)
        try redis.client.enqueue(NewJob("Noop", args: [1], queue: "mail"))
        let base = try startServer(redis)
        let page = try http(base + "queues").body
        // The question is an attribute; /assets/app.js (same-origin, the CSP allows no inline script) asks it.
        XCTAssertTrue(page.contains(#"data-confirm="Delete every job of this queue?">"#), page)
        XCTAssertFalse(page.contains("confirm('") || page.contains("onsubmit="), page)
    }

    /// L5: a credential under 16 characters and a non-loopback name without a credential refuse to start (exit 2);
    /// a password file ending in CR LF works; after 20 refused credentials every request is 429 for the window.
    func testWeakCredentialsAndGuessingAreRefused() throws {
        let redis = try TestRedis(database: 113)
        let environment = ["REDIS_URL": redis.url]
        let short = try ChildProcess.run(TestServices.workerctl, ["web", "--port", "0"],
                                         environment: environment.merging(["WORKERCTL_WEB_TOKEN": "short-token"]) { $1 }, timeout: 20)
        XCTAssertEqual(short.status, 2, short.stderr)
        XCTAssertTrue(short.stderr.contains("at least 16"), short.stderr)
        let rebound = try ChildProcess.run(TestServices.workerctl, ["web", "--port", "0", "--host", "127.example.com"],
                                           environment: environment, timeout: 20)
        XCTAssertEqual(rebound.status, 2, "a name is not loopback because it starts with 127.: \(rebound.stderr)")

        let password = "correct-horse-battery-staple"
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("web-password-\(UUID().uuidString)")
        try Data("\(password)\r\n".utf8).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let base = try startServer(redis, arguments: ["--password-file", file.path])
        XCTAssertEqual(try http(base, headers: ["Authorization: Bearer \(password)"]).status, 200, "CR LF trimmed")
        for attempt in 0..<20 {
            XCTAssertEqual(try http(base, headers: ["Authorization: Bearer wrong-guess-\(attempt)"]).status, 401)
        }
        XCTAssertEqual(try http(base, headers: ["Authorization: Bearer wrong-guess-21"]).status, 429)
        XCTAssertEqual(try http(base, headers: ["Authorization: Bearer \(password)"]).status, 429,
                       "while throttled nothing is compared")
        XCTAssertNotNil(try responseHeaders(base, headers: ["Authorization: Bearer \(password)"])["retry-after"])
    }
}
