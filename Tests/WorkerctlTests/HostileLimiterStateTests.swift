import Foundation
import WorkersQueue
import WorkersTestServices
import XCTest

/// Issue 51 / review 3's M2: any value in a limiter's keys (the layout `LimitKeys` and `LimitSpec.encoded` give the
/// real limiter, docs/limiters.md) leaves `workerctl limits ls`, `workerctl jobs explain` and the dashboard's `/limits`
/// and job page answering: exit 0 and 200, the value shown clamped or marked "invalid", never a trap (a SIGILL is
/// exit 132 of the child). Database 107.
final class HostileLimiterStateTests: XCTestCase {
    var children: [ChildProcess] = []

    override func tearDown() {
        for child in children where child.isRunning { child.signal(SIGKILL); _ = child.wait() }
        children = []
        super.tearDown()
    }

    func testHostileLimiterValuesAreShownInvalidByTheCLIAndTheDashboardWithoutATrap() throws {
        let redis = try TestRedis(database: 107)
        let ctl = WorkerctlRunner(redisURL: redis.url)
        let time = try redis.command("TIME").strings
        let nowMs = (Int(time[0]) ?? 0) * 1000 + (Int(time[1]) ?? 0) / 1000
        let window = nowMs / 60_000
        let huge = String(repeating: "9", count: 100_000)

        func declare(_ kind: LimitSpec.Kind, _ name: String, max: Int = 10, milliseconds: Int = 60_000) throws {
            try redis.command("HSET", LimitKeys.declared, name,
                              LimitSpec(kind: kind, name: name, max: max, milliseconds: milliseconds).encoded)
        }
        // Window limiters: the current window with a count no limiter writes.
        let counts = ["evilbig": "1e300", "evilneg": "-1e300", "evilnan": "nan", "evilinf": "inf",
                      "evilminus": "-5", "evilhuge": huge, "eviltext": "lots"]
        for (name, count) in counts {
            try declare(.window, name)
            try redis.command("HSET", LimitKeys.instance(name: name, key: nil), "window", window, "count", count)
        }
        try declare(.window, "evilwindow")
        try redis.command("HSET", LimitKeys.instance(name: "evilwindow", key: "k1"), "window", "1e300", "count", "3")
        // Bucket limiters: tokens and refill times no limiter writes.
        for (name, tokens, at) in [("bucketneg", "-1e300", "\(nowMs)"), ("bucketnan", "nan", "-inf"),
                                   ("bucketat", "1", "1e300"), ("buckethuge", huge, huge)] {
            try declare(.bucket, name)
            try redis.command("HSET", LimitKeys.instance(name: name, key: nil), "tokens", tokens, "at", at)
        }
        // A concurrent limiter with an endless lease.
        try declare(.concurrent, "leases")
        try redis.command("ZADD", LimitKeys.instance(name: "leases", key: nil), "+inf", "token-forever")
        // Declarations no worker would write.
        try redis.command("HSET", LimitKeys.declared, "zeroperiod", "bucket 10 0")
        try redis.command("HSET", LimitKeys.instance(name: "zeroperiod", key: nil), "tokens", "1", "at", "\(nowMs)")
        try redis.command("HSET", LimitKeys.declared, "hugemax", "window 9223372036854775807 1")
        try redis.command("HSET", LimitKeys.instance(name: "hugemax", key: nil), "window", "\(nowMs)", "count", "1e300")
        // A job held back by a limiter: explain lists the full (and the invalid) limiters.
        let jid = "ov0000000000000000000107"
        try redis.command("ZADD", Keys.schedule, nowMs / 1000 + 3600,
                          #"{"class":"Noop","args":[],"jid":"\#(jid)","queue":"default","overrated":1}"#)

        var names = ["evilbig", "evilneg", "evilnan", "evilinf", "evilminus", "evilhuge", "eviltext", "evilwindow",
                     "bucketneg", "bucketnan", "bucketat", "buckethuge", "leases", "zeroperiod", "hugemax"]
        let web = try ChildProcess(executable: TestServices.workerctl, arguments: ["web", "--port", "0"],
                                   environment: ["REDIS_URL": redis.url])
        children.append(web)
        try checkEverything(ctl, web: web, jid: jid, invalid: names)

        // Then keys of the wrong type, too: each is one invalid row, not a failed listing.
        try redis.command("HSET", LimitKeys.declared, "wrongtype", LimitSpec(kind: .window, name: "wrongtype", max: 10, milliseconds: 60_000).encoded)
        try redis.command("RPUSH", LimitKeys.instance(name: "wrongtype", key: nil), "x")
        try redis.command("HSET", LimitKeys.declared, "wrongzset", LimitSpec(kind: .concurrent, name: "wrongzset", max: 10, milliseconds: 60_000).encoded)
        try redis.command("SET", LimitKeys.instance(name: "wrongzset", key: nil), "1e300")
        names += ["wrongtype", "wrongzset"]
        try checkEverything(ctl, web: web, jid: jid, invalid: names)
    }

    /// `limits ls` (table and JSON), `jobs explain` (text and JSON), `/limits` and the job page: exit 0 / 200, each
    /// limiter of `invalid` shown "invalid", the dashboard still running.
    private func checkEverything(_ ctl: WorkerctlRunner, web: ChildProcess, jid: String, invalid names: [String]) throws {
        // The CLI: exit 0, never a signal; the hostile rows say "invalid".
        let limits = try ctl.run("limits", "ls")
        XCTAssertEqual(limits.status, 0, "limits ls: \(limits.status) \(limits.stderr.suffix(1000))")
        for name in names {
            let line = limits.stdout.split(separator: "\n").first { $0.hasPrefix(name + " ") } ?? ""
            XCTAssertTrue(line.contains("invalid"), "\(name) not shown invalid: '\(line)'\n\(limits.stdout.prefix(4000))")
        }
        let json = try ctl.run("limits", "ls", "--json")
        XCTAssertEqual(json.status, 0, json.stderr)
        let rows = try XCTUnwrap(json.object?["limits"]?.arrayValue, json.stdout.prefix(2000).description)
        for row in rows {
            let used = row.objectValue?["used"]?.doubleValue ?? -1
            XCTAssertTrue(used >= 0 && used <= 1e15, "used out of range: \(row)")
        }
        let explain = try ctl.run("jobs", "explain", jid)
        XCTAssertEqual(explain.status, 0, "jobs explain: \(explain.status) \(explain.stderr.suffix(1000))")
        XCTAssertTrue(explain.stdout.contains("invalid"), explain.stdout)
        let explainJSON = try ctl.run("jobs", "explain", jid, "--json")
        XCTAssertEqual(explainJSON.status, 0, explainJSON.stderr)
        XCTAssertNotNil(explainJSON.object, explainJSON.stdout)

        // The dashboard: `/limits` and the job page answer 200 and the server is still there.
        var base = ""
        XCTAssertTrue(eventually {
            base = web.stderr.firstMatch(of: /"web_url":"([^"]+)"/).map { String($0.1) } ?? ""
            return !base.isEmpty
        }, web.stderr)
        for page in ["limits", "job/\(jid)"] {
            let (status, body) = try get(base + page)
            XCTAssertEqual(status, 200, "GET /\(page): \(status); web: \(web.stderr.suffix(1000))")
            XCTAssertTrue(body.contains("invalid"), "GET /\(page) does not say invalid")
        }
        XCTAssertTrue(web.isRunning, "the dashboard died: \(web.stderr.suffix(2000))")
    }

    private func get(_ url: String) throws -> (Int, String) {
        let result = try ChildProcess.run(try XCTUnwrap(TestServices.which("curl")),
                                          ["-s", "-m", "20", "-w", "\n%{http_code}", url])
        let lines = result.stdout.split(separator: "\n", omittingEmptySubsequences: false)
        let status = Int(lines.last.map(String.init)?.trimmingCharacters(in: .whitespaces) ?? "") ?? 0
        return (status, lines.dropLast().joined(separator: "\n"))
    }
}
