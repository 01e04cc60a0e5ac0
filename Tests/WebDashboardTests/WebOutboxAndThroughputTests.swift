import Foundation
import WorkersQueue
import WorkersStorage
import WorkersTestServices
import XCTest

/// The dashboard's per-minute graphs (from the settle script's `stat:minutely:*` counters) and the outbox page
/// (`job_outbox` in PostgreSQL, `--database-url`), with `workerctl outbox status` reading the same rows.
extension WebDashboardTests {
    /// Runs settled now are drawn in the current minute of the last-hour chart and counted in the last day's
    /// average; a run counted twice (a settle batch sent again) is drawn once.
    func testTheDashboardDrawsTheLastHourAndDayPerMinute() throws {
        let redis = try TestRedis(database: 91)
        let connection = try redis.connection()
        for index in 0..<5 { try redis.client.enqueue(NewJob("Noop", args: [.int(Int64(index))])) }
        let jobs = try ReliableQueue.fetch(connection, identity: "web-graph:1:abc", queues: ["default"], limit: 5).jobs
        XCTAssertEqual(jobs.count, 5)
        let now = Clock.now()
        let settled = jobs.enumerated().map { index, job in
            (job: job, settlement: Settlement.ack, counts: index < 2 ? RunCounts([.processed, .failed]) : .processed)
        }
        try ReliableQueue.settle(connection, settled, now: now)
        try ReliableQueue.settle(connection, settled, now: now)  // a resend after a lost reply: counted once
        let base = try startServer(redis)
        let page = try http(base).body
        XCTAssertTrue(page.contains("<svg id=\"last-hour\""), page)
        XCTAssertTrue(page.contains("<svg id=\"last-day\""), page)
        let minute = String(HTMLTime.minute(now))
        XCTAssertTrue(page.contains("<title>\(minute) UTC: 5 processed (0.08/s)</title>"), "the current minute's bar: \(page)")
        XCTAssertTrue(page.contains("<title>\(minute) UTC: 2 failed (0.03/s)</title>"), page)
        XCTAssertTrue(page.contains("(5 processed, 2 failed)"), "the last hour's and day's totals")
    }

    /// The outbox page shows what waits for the relay, what it refused (with the reason) and what the lost-job finder
    /// pushed again; every value escaped. `workerctl outbox status` reports the same counts. Without a database the
    /// page says how to give one.
    func testTheOutboxPageShowsWaitingRefusedAndPushedAgainRows() throws {
        let redis = try TestRedis(database: 92)
        let database = try PostgresTestDatabase.create(prefix: "web_outbox")
        defer { database.drop() }
        let connection = try database.connect()
        defer { connection.close() }
        try BundledSchema.migrate(on: connection)
        let evil = "<script>alert('x')</script>"
        let first = try XCTUnwrap(connection.queryFirst("SELECT workers_enqueue('Evil<b>Class', $1::jsonb) AS jid",
                                                        [JSONValue.array([.string(evil)]).serialized()])).string("jid")
        try connection.execute("SELECT workers_enqueue('ReportJob', '[2]')")
        // A store token in the arguments is not shown (review M11).
        try connection.execute(#"SELECT workers_enqueue('ValidateReceiptJob', '[{"purchase_token":"tok-SECRET-123","user_id":"u1"}]')"#)
        // A row no Sidekiq payload can be made of (args not an array: only a hand-written INSERT gets past
        // workers_enqueue's checks). The relay marks it with its error.
        try connection.execute("""
            INSERT INTO job_outbox (jid, class, args, queue, retry) VALUES ('aaaaaaaaaaaaaaaaaaaaaaaa', 'Broken', '{"a": 1}', 'default', 'true')
            """)

        let base = try startServer(redis, arguments: ["--database-url", database.url])
        let waiting = try http(base + "outbox")
        XCTAssertEqual(waiting.status, 200, waiting.body)
        XCTAssertTrue(waiting.body.contains("<span id=\"outbox-pending\">4</span>"), waiting.body)
        XCTAssertFalse(waiting.body.contains("tok-SECRET-123"), "a store token shown on /outbox")
        XCTAssertTrue(waiting.body.contains("[redacted]"), waiting.body)
        XCTAssertTrue(waiting.body.contains("Evil&lt;b&gt;Class"), waiting.body)
        XCTAssertFalse(withoutOwnScript(waiting.body).contains("<script") || waiting.body.contains("<b>"), "data rendered as markup")
        XCTAssertTrue(waiting.body.contains(first))

        // The real relay moves the rows; the broken one is refused.
        let relay = try ChildProcess(executable: TestServices.workerctl, arguments: ["relay", "--outbox-poll-interval", "0.2"],
                                     environment: ["REDIS_URL": redis.url, "DATABASE_URL": database.url])
        defer { relay.signal(SIGTERM); _ = relay.wait() }
        XCTAssertTrue(eventually { (try? redis.int("LLEN", "queue:default")) == 3 }, relay.stderr)
        // What the lost-job finder writes when it pushes a row again (OutboxRelay's finder; its own tests drive it).
        try connection.execute("UPDATE job_outbox SET recovered_count = 1, recovered_at = clock_timestamp() WHERE jid = $1", [first])

        let after = try http(base + "outbox").body
        XCTAssertTrue(after.contains("<span id=\"outbox-pending\">0</span>"), after)
        XCTAssertTrue(after.contains("<span id=\"outbox-errored\">1</span>"), after)
        XCTAssertTrue(after.contains("<span id=\"outbox-recovered\">1</span>"), after)
        let errored = try XCTUnwrap(after.firstMatch(of: /id="outbox-errored-rows">(?s)(.*?)<\/table>/).map { String($0.1) }, after)
        XCTAssertTrue(errored.contains("Broken") && errored.contains("args is not a JSON array"), errored)
        let recovered = try XCTUnwrap(after.firstMatch(of: /id="outbox-recovered-rows">(?s)(.*?)<\/table>/).map { String($0.1) }, after)
        XCTAssertTrue(recovered.contains(first), recovered)

        let status = try ChildProcess.run(TestServices.workerctl, ["outbox", "status", "--json", "--list", "errored"],
                                          environment: ["DATABASE_URL": database.url])
        XCTAssertEqual(status.status, 0, status.stderr)
        let json = try XCTUnwrap(try JSONValue.parse(status.stdout.trimmingCharacters(in: .whitespacesAndNewlines)).objectValue)
        XCTAssertEqual(json["pending"], 0)
        XCTAssertEqual(json["errored"], 1)
        XCTAssertEqual(json["pushed_kept"], 3)
        XCTAssertEqual(json["recovered"], 1)
        XCTAssertEqual(json["rows"]?.arrayValue?.compactMap { $0.objectValue?["jid"]?.stringValue }, ["aaaaaaaaaaaaaaaaaaaaaaaa"])

        let unconfigured = try startServer(redis, environment: ["DATABASE_URL": ""])
        let none = try http(unconfigured + "outbox")
        XCTAssertEqual(none.status, 200)
        XCTAssertTrue(none.body.contains("No database configured"), none.body)
    }
}

/// `HH:MM` of an epoch time in UTC, as the charts label their bars.
enum HTMLTime {
    static func minute(_ epoch: Double) -> String {
        var t = time_t(epoch)
        var parts = tm()
        gmtime_r(&t, &parts)
        return String(format: "%02d:%02d", Int(parts.tm_hour), Int(parts.tm_min))
    }
}
