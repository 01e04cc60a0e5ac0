import Foundation
import WorkersQueue
import WorkersTestServices
import XCTest

/// Hostile payloads among ordinary jobs, through real processes (issue 32): two `workerctl worker` processes with a
/// short heartbeat, a `workerctl web` and the operator's commands, on one Redis (database 19). Both workers stay
/// alive, every ordinary job runs, every hostile one ends in dead with a reason, nothing stays in a working list,
/// and every command and dashboard page still answers.
final class PoisonPillTests: XCTestCase {
    var children: [ChildProcess] = []

    override func tearDown() {
        for child in children where child.isRunning { child.signal(SIGKILL); _ = child.wait() }
        children = []
        super.tearDown()
    }

    /// Hostile payloads, each with a jid that marks it, and the words its dead entry's reason must hold.
    static let hostile: [(jid: String, raw: String, reason: String)] = [
        ("hostile00000000000000001",
         #"{"class":"Noop","args":[],"jid":"hostile00000000000000001","queue":"default","retry_count":9223372036854775807,"interrupted_count":9223372036854775807}"#,
         #""retry_count" is 9223372036854775807"#),
        ("hostile00000000000000002",
         #"{"class":"Noop","args":[],"jid":"hostile00000000000000002","queue":"default","retry_count":-9223372036854775808}"#,
         #""retry_count" is -9223372036854775808"#),
        ("hostile00000000000000003",
         #"{"class":"Noop","args":[],"jid":"hostile00000000000000003","queue":"default","interrupted_count":1e300}"#,
         #""interrupted_count" must be an integer"#),
        ("hostile00000000000000004",
         #"{"class":"Sleep","args":["x"],"jid":"hostile00000000000000004","queue":"default","unique_for":1e300,"enqueued_at":-1e300}"#,
         "arguments do not fit Sleep"),
        ("hostile00000000000000005",
         #"{"class":"Fail","args":["boom"],"jid":"hostile00000000000000005","queue":"default","retry":9223372036854775807,"retry_count":999999,"unique_for":1e15,"retry_for":1e300,"created_at":1e300}"#,
         "boom"),
        ("hostile00000000000000006",
         "{\"class\":\"Noop\",\"args\":" + String(repeating: "[", count: 5000) + String(repeating: "]", count: 5000)
            + ",\"jid\":\"hostile00000000000000006\"}",
         "payload is not JSON"),
        ("hostile00000000000000007", #"{"class":"NoSuchJob","args":[],"jid":"hostile00000000000000007","retry":true}"#,
         "unknown job class"),
    ]

    func testHostilePayloadsEndInDeadWhileBothWorkersAndTheOperatorsToolsAnswer() throws {
        let redis = try TestRedis(database: 19)
        let ctl = WorkerctlRunner(redisURL: redis.url)
        // Ordinary jobs, the hostile ones between them.
        var ordinary: [String] = []
        for index in 0..<40 {
            ordinary.append(try redis.client.enqueue(NewJob("Noop", args: [.int(Int64(index))])))
            if index % 6 == 0, index / 6 < Self.hostile.count {
                try redis.command("LPUSH", "queue:default", Self.hostile[index / 6].raw)
            }
        }
        // A due retry with counters at the limit (the move of due entries), and a queue nobody serves whose only job
        // has an absurd enqueued_at (the latency pages and `queues ls`, review M3).
        try redis.command("ZADD", Keys.retry, 1, #"{"class":"Noop","args":[],"jid":"hostile00000000000000008","queue":"default","retry_count":9223372036854775807}"#)
        try redis.command("SADD", Keys.queues, "stranded")
        try redis.command("LPUSH", "queue:stranded", #"{"class":"Noop","args":[],"jid":"hostile00000000000000009","queue":"stranded","enqueued_at":-1e300}"#)
        // A process that died holding a hostile job: whichever worker sweeps first must survive it (review H1).
        try redis.command("LPUSH", Keys.working(queue: "default", identity: "gone:1:abcdef012345"),
                          #"{"class":"Noop","args":[],"jid":"hostile00000000000000010","queue":"default","retry_count":9223372036854775807,"interrupted_count":9223372036854775807}"#)

        let workers = try (0..<2).map { _ in
            try ChildProcess(executable: TestServices.workerctl,
                             arguments: ["worker", "--no-database", "--queue", "default", "--concurrency", "3",
                                         "--heartbeat-interval", "0.2", "--heartbeat-ttl", "1", "--poll-interval", "0.2",
                                         "--shutdown-timeout", "3", "--unknown-class-grace", "0"],
                             environment: ["REDIS_URL": redis.url])
        }
        children += workers

        let hostileJids = Self.hostile.map(\.jid) + ["hostile00000000000000008", "hostile00000000000000010"]
        XCTAssertTrue(try eventually(timeout: 30) {
            try redis.int("LLEN", "queue:default") == 0 && redis.workingKeys().isEmpty
                && deadEntries(redis).count == hostileJids.count
        }, "dead: \((try? deadEntries(redis))?.map(\.jid) ?? []); stderr: \(workers.map(\.stderr).joined().suffix(2000))")

        // Both workers alive, every ordinary job ran (none in retry or dead), every hostile one dead with its reason.
        for worker in workers { XCTAssertTrue(worker.isRunning, "a worker died: \(worker.stderr.suffix(2000))") }
        let dead = try deadEntries(redis)
        XCTAssertEqual(Set(dead.map(\.jid)), Set(hostileJids))
        for (jid, _, reason) in Self.hostile {
            let message = dead.first { $0.jid == jid }?.message ?? ""
            XCTAssertTrue(message.contains(reason), "\(jid): '\(message)' lacks '\(reason)'")
        }
        for entry in dead { XCTAssertFalse(entry.message.isEmpty, "\(entry.jid) is dead without a reason") }
        XCTAssertEqual(try redis.int("ZCARD", Keys.retry), 0)
        XCTAssertGreaterThanOrEqual(try redis.processed(), ordinary.count)
        XCTAssertTrue(try eventually { try ctl.run("workers", "ls", "--json").object?["processes"]?.arrayValue?.count == 2 })

        // The operator's commands answer.
        for arguments in [["queues", "ls"], ["queues", "ls", "--json"], ["jobs", "ls", "--state", "dead"],
                          ["jobs", "ls", "--state", "dead", "--json"], ["jobs", "ls", "--state", "enqueued", "--queue", "stranded"],
                          ["jobs", "ls", "--state", "dead", "--page", "400000000000000000"], ["queues", "inspect", "stranded"],
                          ["jobs", "show", "hostile00000000000000009"], ["workers", "ls"], ["stats"]] {
            // 0, or 2 with its reason for a page out of range; never a trap (SIGILL/SIGTRAP: 132/133, 4/5).
            let result = try ctl.run(arguments)
            XCTAssertTrue(result.status == 0 || (result.status == 2 && result.stderr.contains("page must be within")),
                          "workerctl \(arguments.joined(separator: " ")): \(result.status) \(result.stderr.suffix(500))")
        }

        // Every dashboard page answers, and the server is still there afterwards.
        let web = try ChildProcess(executable: TestServices.workerctl, arguments: ["web", "--port", "0"],
                                   environment: ["REDIS_URL": redis.url])
        children.append(web)
        var base = ""
        XCTAssertTrue(eventually {
            base = web.stderr.firstMatch(of: /"web_url":"([^"]+)"/).map { String($0.1) } ?? ""
            return !base.isEmpty
        }, web.stderr)
        let anyDead = try XCTUnwrap(dead.first?.jid)
        let pages = ["", "queues", "processes", "limits", "unique", "cron", "batches", "search?q=Noop",
                     "jobs/dead", "jobs/retry", "jobs/scheduled", "jobs/enqueued", "jobs/busy", "jobs/enqueued?queue=stranded",
                     "jobs/dead?page=400000000000000000", "jobs/dead?page=-9223372036854775808", "jobs/dead?page=1e300",
                     "job/\(anyDead)", "job/hostile00000000000000009"]
        for page in pages {
            let status = try httpStatus(base + page)
            XCTAssertTrue((200..<500).contains(status), "GET /\(page) answered \(status)")
        }
        XCTAssertTrue(web.isRunning, "the dashboard died: \(web.stderr.suffix(2000))")
        for worker in workers { XCTAssertTrue(worker.isRunning) }
    }

    /// The dead set's entries: the jid a hostile payload carried (inside a `BadPayload` envelope's `raw_payload`
    /// when the payload was unreadable) and the entry's reason.
    private func deadEntries(_ redis: TestRedis) throws -> [(jid: String, message: String)] {
        try redis.command("ZRANGE", Keys.dead, 0, -1).strings.map { raw in
            let fields = (try? JSONValue.parse(raw))?.objectValue ?? [:]
            let original = fields["raw_payload"]?.stringValue ?? raw
            let jid = original.firstMatch(of: /"jid":"([0-9a-z]+)"/).map { String($0.1) } ?? "?"
            return (jid, fields["error_message"]?.stringValue ?? "")
        }
    }

    private func httpStatus(_ url: String) throws -> Int {
        let result = try ChildProcess.run(try XCTUnwrap(TestServices.which("curl")),
                                          ["-s", "-o", "/dev/null", "-m", "20", "-w", "%{http_code}", url])
        return Int(result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
    }
}
