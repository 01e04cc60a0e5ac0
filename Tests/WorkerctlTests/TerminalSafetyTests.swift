import Foundation
import WorkersQueue
import WorkersTestServices
import XCTest

/// Issue 51 point 5: text from Redis cannot drive the operator's terminal or make a page or a log line show other
/// than it holds. Jobs whose class, queue, arguments and error carry terminal escapes (ESC sequences that clear the
/// screen or set the title, BEL, C1 CSI) and bidi and zero-width characters are read through the real `workerctl`
/// (tables, `jobs show` as text and JSON, `jobs explain`), the real dashboard, and the log of a real worker whose job
/// fails with such a message: none of those bytes reaches the output; the JSON still parses to the original text.
/// Redis database 89.
final class TerminalSafetyTests: XCTestCase {
    var children: [ChildProcess] = []

    override func tearDown() {
        for child in children where child.isRunning { child.signal(SIGKILL); _ = child.wait() }
        children = []
        super.tearDown()
    }

    static let hostile = "\u{1B}]0;pwned\u{7}\u{1B}[2J\u{9B}31m\u{202E}txt.exe\u{2066}\u{200B}\u{2028}"

    /// The scalars that must never reach a terminal or a page as they are.
    func assertInert(_ text: String, _ what: String, file: StaticString = #filePath, line: UInt = #line) {
        let found = text.unicodeScalars.filter {
            ($0.value < 0x20 && $0 != "\n" && $0 != "\t" && $0 != "\r") || (0x7F...0x9F).contains($0.value)
                || [0x202E, 0x2066, 0x200B, 0x2028].contains($0.value)
        }
        XCTAssertTrue(found.isEmpty, "\(what) holds \(found.map { String($0.value, radix: 16) }): \(text.suffix(600))",
                      file: file, line: line)
    }

    func testControlAndBidiCharactersFromRedisReachNoTerminalPageOrLogAsThemselves() throws {
        let redis = try TestRedis(database: 89)
        try redis.flush()
        let ctl = WorkerctlRunner(redisURL: redis.url)
        let jid = "0123456789abcdef01234567"
        let evil = JSONValue.object([
            "class": .string("Evil\(Self.hostile)Job"), "queue": .string("q\(Self.hostile)"), "jid": .string(jid),
            "args": .array([.string("arg\(Self.hostile)")]), "retry": .bool(true), "created_at": .double(Clock.now()),
            "enqueued_at": .double(Clock.now()), "failed_at": .double(Clock.now()), "retry_count": .int(3),
            "error_class": .string("Boom\(Self.hostile)"), "error_message": .string("failed\(Self.hostile)"),
        ]).serialized()
        try redis.command("ZADD", Keys.dead, Clock.now(), evil)
        try redis.command("SADD", Keys.queues, "q\(Self.hostile)")
        try redis.command("LPUSH", "queue:q\(Self.hostile)", evil.replacingOccurrences(of: jid, with: "76543210fedcba9876543210"))

        for arguments in [["jobs", "ls", "--state", "dead"], ["jobs", "show", jid], ["jobs", "explain", jid], ["queues", "ls"],
                          ["jobs", "ls", "--state", "enqueued", "--queue", "q\(Self.hostile)"]] {
            let result = try ctl.run(arguments)
            XCTAssertEqual(result.status, 0, "\(arguments): \(result.stderr)")
            assertInert(result.stdout + result.stderr, "workerctl \(arguments.prefix(3).joined(separator: " "))")
        }
        let shown = try ctl.run("jobs", "show", jid)
        XCTAssertTrue(shown.stdout.contains("\\u001B]0;pwned\\u0007") && shown.stdout.contains("\\u202E"), shown.stdout)
        let json = try ctl.run("jobs", "show", jid, "--json")
        assertInert(json.stdout, "jobs show --json")
        let object = try XCTUnwrap(json.object, json.stdout)
        XCTAssertTrue(JSONValue.object(object).serialized().contains("Evil\u{1B}]0;pwned") || "\(object)".contains("pwned"),
                      "the JSON still parses, to the original text")

        // The dashboard: the job's page and the queues.
        let web = try ChildProcess(executable: TestServices.workerctl, arguments: ["web", "--port", "0"],
                                   environment: ["REDIS_URL": redis.url])
        children.append(web)
        var base = ""
        XCTAssertTrue(eventually {
            base = web.stderr.firstMatch(of: /"web_url":"([^"]+)"/).map { String($0.1) } ?? ""
            return !base.isEmpty
        }, web.stderr)
        for page in ["job/\(jid)", "queues", "jobs/dead", ""] {
            let body = try ChildProcess.run(try XCTUnwrap(TestServices.which("curl")), ["-s", "-m", "20", base + page])
            XCTAssertTrue(body.stdout.contains("pwned") || page.isEmpty, "GET /\(page) shows the job: \(body.stdout.prefix(300))")
            assertInert(body.stdout, "GET /\(page)")
        }

        // A worker's log (JSON lines, stderr being no terminal): a job fails with the hostile message.
        try redis.command("DEL", "queue:q\(Self.hostile)")
        _ = try redis.client.enqueue(NewJob("Fail", args: [.string("boom\(Self.hostile)")], retry: .bool(false)))
        let worker = try ChildProcess(executable: TestServices.workerctl,
                                      arguments: ["worker", "--no-database", "--concurrency", "1", "--poll-interval", "0.2"],
                                      environment: ["REDIS_URL": redis.url, "LOG_LEVEL": "debug"])
        children.append(worker)
        XCTAssertTrue(eventually(timeout: 30) { worker.stderr.contains("boom") }, worker.stderr)
        worker.signal(SIGTERM)
        _ = worker.wait()
        assertInert(worker.stderr, "the worker's log")
    }
}
