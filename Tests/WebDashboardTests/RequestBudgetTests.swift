import Foundation
import WorkersQueue
import WorkersScheduler
import WorkersTestServices
import XCTest

/// Issue 51 point 3: no dashboard GET, scrape or `workerctl` read sends a command whose cost grows with what a
/// producer can grow. Each request runs against a private redis-server no one else uses (`RequestCostMeter`), which
/// counts its commands and reply bytes exactly, with no clock; the state is built at 1× and at 100× of every
/// dimension at once (queue names, keys, processes, cancels, limiter instances, unique locks, batches and a
/// batch's failed jobs), and each request must stay under its one fixed bound at both scales.
///
/// Coverage is checked against the code: the dashboard's GET routes are read from its route table
/// (Sources/WebDashboard/WebServer.swift, `router.get`), `workerctl`'s commands from its command tree
/// (`workerctl --experimental-dump-help`); a route or command without a row here fails the test.
///
/// Ports: the private Redis on 6531 (`REQUEST_BUDGET_REDIS_PORT` to move it).
final class RequestBudgetTests: XCTestCase {
    var web: ChildProcess?

    override func tearDown() {
        if let web { web.signal(SIGTERM); _ = web.wait() }
        web = nil
        super.tearDown()
    }

    /// One dimension a producer can grow, and how many of it the state holds at 1×.
    static let dimensions: [(name: String, atOne: Int)] = [
        ("queue names", 100), ("keys", 1_000), ("processes", 20), ("cancels", 10), ("limiter instances", 10),
        ("unique locks", 10), ("batches", 10), ("a batch's failed jobs", 10),
    ]

    /// The fixed jobs and entries every page is asked about (the same at every scale).
    struct Subjects: Sendable {
        var deadJid = "", enqueuedJid = "", overLimitJid = "", retryJid = "", scheduledJid = "", bid = ""
    }

    /// Builds the state at `scale` × every dimension (after `FLUSHALL`). Bulk entries are written by Lua loops (one
    /// call each), with key names built by `Keys` and passed in.
    func buildState(_ connection: RedisConnection, scale: Int) throws -> Subjects {
        try connection.command("FLUSHALL")
        let now = Clock.now()
        func loop(_ body: String, keys: [String], _ argv: [any RedisArgument]) throws {
            try connection.send(["EVAL", body, keys.count] + keys.map { $0 as any RedisArgument } + argv).checked()
        }
        func count(_ name: String) -> Int { Self.dimensions.first { $0.name == name }!.atOne * scale }
        // Queue names (empty queues, as a producer's `SADD queues` of fresh names leaves them).
        try loop("for i = 1, tonumber(ARGV[1]) do redis.call('SADD', KEYS[1], 'bulk-' .. i) end",
                 keys: [Keys.queues], [count("queue names")])
        // Keys: progress notes of jobs long gone, one string each.
        try loop("for i = 1, tonumber(ARGV[1]) do redis.call('SET', ARGV[2] .. i, '{}') end",
                 keys: [], [count("keys"), JobProgress.key(jid: "fill-")])
        // Processes: registered, alive, one busy thread each, serving `default`.
        try loop("""
            for i = 1, tonumber(ARGV[1]) do
              local id = 'host-' .. i .. ':1:abc'
              redis.call('SADD', KEYS[1], id)
              redis.call('HSET', id, 'info', '{"hostname":"host","pid":1,"identity":"' .. id .. '","queues":["default"],"concurrency":5,"labels":[],"tag":""}', 'busy', 1, 'beat', ARGV[2], 'quiet', 'false', 'rss', 1024, 'rtt_us', 10)
            end
            """, keys: [Keys.processes], [count("processes"), now])
        // Cancels: marks of jobs not found yet.
        try loop("""
            for i = 1, tonumber(ARGV[1]) do
              redis.call('ZADD', KEYS[1], ARGV[2], 'cancelled' .. i)
              redis.call('SET', ARGV[3] .. i, ARGV[2])
            end
            """, keys: [JobCancels.set], [count("cancels"), Int(now) + 86_400, JobCancels.markKey(jid: "cancelled")])
        // Limiter instances: one declared concurrent limit, an instance per key, each at its maximum.
        try connection.command("HSET", LimitKeys.declared, "per-user", "concurrent 1 60000")
        try loop("""
            for i = 1, tonumber(ARGV[1]) do redis.call('ZADD', ARGV[2] .. i, ARGV[3], 'lease-' .. i) end
            """, keys: [], [count("limiter instances"), LimitKeys.instance(name: "per-user", key: "user-"),
                            Int(now * 1000) + 3_600_000])
        // Unique locks, each with its owner record.
        try loop("""
            for i = 1, tonumber(ARGV[1]) do
              local digest = redis.sha1hex('lock' .. i) .. string.sub(redis.sha1hex('x' .. i), 1, 24)
              local jid = 'uniq' .. i
              redis.call('SET', ARGV[2] .. digest, jid, 'EX', 3600)
              redis.call('HSET', ARGV[3] .. jid, 'class', 'Noop', 'queue', 'default', 'lock', ARGV[2] .. digest, 'for', '3600')
            end
            """, keys: [], [count("unique locks"), "unique:", Keys.uniqueOwner("")])
        // Batches, as `Batches.create` writes them (one job each), and one batch with many failed jobs.
        for index in 0..<count("batches") {
            _ = try Batches.create(connection, NewBatch(description: "batch \(index)", jobs: [NewJob("Noop", args: [.int(Int64(index))], queue: "batched")]))
        }
        let shown = try Batches.create(connection, NewBatch(description: "the one shown", jobs: [NewJob("Noop", args: [], queue: "batched")]))
        try loop("for i = 1, tonumber(ARGV[1]) do redis.call('SADD', KEYS[1], 'failed' .. i) end",
                 keys: [Keys.batch(shown.bid) + "-failed"], [count("a batch's failed jobs")])

        // The subjects: a dead, a retry, a scheduled, an over-limit scheduled and an enqueued job; a cron entry.
        var subjects = Subjects(bid: shown.bid)
        func payload(_ className: String, queue: String = "default", _ fields: [String: JSONValue] = [:]) throws -> (String, String) {
            var job = try JobClient.payload(for: NewJob(className, args: [.int(1)], queue: queue), createdAt: now, enqueuedAt: now)
            for (name, value) in fields { job.fields[name] = value }
            return (try XCTUnwrap(job.jid), job.serialized())
        }
        let failure: [String: JSONValue] = ["error_class": .string("RuntimeError"), "error_message": .string("boom"),
                                            "failed_at": .double(now), "retry_count": .int(2)]
        var entry = try payload("Failing", failure)
        subjects.deadJid = entry.0
        try connection.command("ZADD", Keys.dead, now, entry.1)
        entry = try payload("Failing", failure)
        subjects.retryJid = entry.0
        try connection.command("ZADD", Keys.retry, now + 600, entry.1)
        entry = try payload("Later")
        subjects.scheduledJid = entry.0
        try connection.command("ZADD", Keys.schedule, now + 3600, entry.1)
        entry = try payload("Limited", ["overrated": .int(1)])
        subjects.overLimitJid = entry.0
        try connection.command("ZADD", Keys.schedule, now + 60, entry.1)
        entry = try payload("Noop")
        subjects.enqueuedJid = entry.0
        try connection.command("LPUSH", Keys.queue("default"), entry.1)
        try connection.command("SADD", Keys.queues, "default")
        let cron = try ScheduleEntry(name: "nightly", cron: try CronExpression("0 3 * * *"), className: "NightlyReport",
                                     queue: "default", args: [])
        try CronStore(connection: connection).sync([cron])
        return subjects
    }

    /// A dashboard request: what it asks and the most it may cost at any scale.
    struct Probe: Sendable {
        var route: String
        var path: @Sendable (Subjects) -> String
        var method = "GET"
        var maxCommands: Int
        var maxReplyBytes: Int
    }

    /// Every GET route of the route table, with the bound each request must stay under at 1× and 100× alike.
    static let webProbes: [Probe] = [
        Probe(route: "/", path: { _ in "/" }, maxCommands: 5_500, maxReplyBytes: 300_000),
        Probe(route: "/assets/app.css", path: { _ in "/assets/app.css" }, maxCommands: 0, maxReplyBytes: 0),
        Probe(route: "/assets/app.js", path: { _ in "/assets/app.js" }, maxCommands: 0, maxReplyBytes: 0),
        Probe(route: "/api/stats.json", path: { _ in "/api/stats.json" }, maxCommands: 2_200, maxReplyBytes: 100_000),
        Probe(route: "/queues", path: { _ in "/queues" }, maxCommands: 7_500, maxReplyBytes: 250_000),
        Probe(route: "/processes", path: { _ in "/processes" }, maxCommands: 1_100, maxReplyBytes: 300_000),
        Probe(route: "/limits", path: { _ in "/limits" }, maxCommands: 150, maxReplyBytes: 50_000),
        Probe(route: "/metrics", path: { _ in "/metrics" }, maxCommands: 250, maxReplyBytes: 50_000),
        Probe(route: "/unique", path: { _ in "/unique" }, maxCommands: 350, maxReplyBytes: 60_000),
        Probe(route: "/outbox", path: { _ in "/outbox" }, maxCommands: 0, maxReplyBytes: 0),
        Probe(route: "/search", path: { _ in "/search?q=Noop" }, maxCommands: 9_500, maxReplyBytes: 600_000),
        Probe(route: "/jobs/:state", path: { _ in "/jobs/enqueued" }, maxCommands: 1_100, maxReplyBytes: 60_000),
        Probe(route: "/jobs/:state", path: { _ in "/jobs/enqueued?q=nothing" }, maxCommands: 2_200, maxReplyBytes: 600_000),
        Probe(route: "/jobs/:state", path: { _ in "/jobs/busy" }, maxCommands: 3_300, maxReplyBytes: 100_000),
        Probe(route: "/jobs/:state", path: { _ in "/jobs/dead" }, maxCommands: 20, maxReplyBytes: 20_000),
        Probe(route: "/jobs/:state", path: { _ in "/jobs/retry" }, maxCommands: 20, maxReplyBytes: 20_000),
        Probe(route: "/jobs/:state", path: { _ in "/jobs/scheduled" }, maxCommands: 20, maxReplyBytes: 20_000),
        Probe(route: "/job/:jid", path: { "/job/\($0.deadJid)" }, maxCommands: 4_400, maxReplyBytes: 600_000),
        Probe(route: "/job/:jid", path: { "/job/\($0.enqueuedJid)" }, maxCommands: 5_500, maxReplyBytes: 600_000),
        Probe(route: "/job/:jid", path: { "/job/\($0.overLimitJid)" }, maxCommands: 7_800, maxReplyBytes: 600_000),
        Probe(route: "/job/:jid", path: { "/job/\($0.retryJid)" }, maxCommands: 4_400, maxReplyBytes: 600_000),
        Probe(route: "/cron", path: { _ in "/cron" }, maxCommands: 20, maxReplyBytes: 20_000),
        Probe(route: "/cron/:name", path: { _ in "/cron/nightly" }, maxCommands: 20, maxReplyBytes: 20_000),
        Probe(route: "/batches", path: { _ in "/batches" }, maxCommands: 250, maxReplyBytes: 50_000),
        Probe(route: "/batch/:bid", path: { "/batch/\($0.bid)" }, maxCommands: 20, maxReplyBytes: 20_000),
    ]

    /// A `workerctl` read: the command's words, its arguments, and the most it may cost at any scale.
    struct CLIProbe: Sendable {
        var command: String
        var arguments: @Sendable (Subjects) -> [String] = { _ in [] }
        var maxCommands: Int
        var maxReplyBytes: Int
    }

    /// Every `workerctl` command that reads Redis, with its bound (a process's own connection set-up included).
    static let cliProbes: [CLIProbe] = [
        CLIProbe(command: "stats", maxCommands: 3_200, maxReplyBytes: 150_000),
        CLIProbe(command: "stats", arguments: { _ in ["--classes"] }, maxCommands: 300, maxReplyBytes: 50_000),
        CLIProbe(command: "queues ls", maxCommands: 7_500, maxReplyBytes: 250_000),
        CLIProbe(command: "queues inspect", arguments: { _ in ["default"] }, maxCommands: 20, maxReplyBytes: 20_000),
        CLIProbe(command: "jobs ls", arguments: { _ in ["--state", "enqueued"] }, maxCommands: 1_100, maxReplyBytes: 60_000),
        CLIProbe(command: "jobs ls", arguments: { _ in ["--state", "enqueued", "--grep", "nothing"] }, maxCommands: 2_200, maxReplyBytes: 600_000),
        CLIProbe(command: "jobs ls", arguments: { _ in ["--state", "busy"] }, maxCommands: 3_300, maxReplyBytes: 100_000),
        CLIProbe(command: "jobs ls", arguments: { _ in ["--state", "dead"] }, maxCommands: 20, maxReplyBytes: 20_000),
        CLIProbe(command: "jobs show", arguments: { [$0.deadJid] }, maxCommands: 8_500, maxReplyBytes: 1_200_000),
        CLIProbe(command: "jobs explain", arguments: { [$0.enqueuedJid] }, maxCommands: 6_000, maxReplyBytes: 600_000),
        CLIProbe(command: "jobs explain", arguments: { [$0.overLimitJid] }, maxCommands: 7_800, maxReplyBytes: 200_000),
        CLIProbe(command: "workers ls", maxCommands: 1_100, maxReplyBytes: 300_000),
        CLIProbe(command: "top", arguments: { _ in ["--once", "--json"] }, maxCommands: 6_500, maxReplyBytes: 300_000),
        CLIProbe(command: "cron ls", maxCommands: 20, maxReplyBytes: 20_000),
        CLIProbe(command: "cron history", arguments: { _ in ["nightly"] }, maxCommands: 20, maxReplyBytes: 20_000),
        CLIProbe(command: "unique ls", maxCommands: 350, maxReplyBytes: 60_000),
        CLIProbe(command: "unique show", arguments: { _ in ["uniq1"] }, maxCommands: 4_500, maxReplyBytes: 600_000),
        CLIProbe(command: "batches ls", maxCommands: 250, maxReplyBytes: 50_000),
        CLIProbe(command: "batches show", arguments: { [$0.bid] }, maxCommands: 20, maxReplyBytes: 60_000),
        CLIProbe(command: "limits ls", maxCommands: 150, maxReplyBytes: 50_000),
        CLIProbe(command: "keys journal", maxCommands: 20, maxReplyBytes: 20_000),
    ]

    /// The other commands of the tree, and why they are not probed here.
    static let cliNotReads: [String: String] = [
        "worker": "runs a worker", "run": "runs workers and the scheduler", "scheduler": "runs the scheduler",
        "relay": "runs the outbox relay", "web": "serves the dashboard (probed route by route above)",
        "migrate": "PostgreSQL only", "revenue": "PostgreSQL only", "outbox status": "PostgreSQL only",
        "export verify-url": "checks a URL, reads nothing", "help": "prints help",
        "enqueue": "writes", "queues pause": "writes", "queues resume": "writes", "queues clear": "writes",
        "jobs retry": "writes", "jobs run": "writes", "jobs kill": "writes", "jobs delete": "writes", "jobs cancel": "writes",
        "workers quiet": "writes", "workers stop": "writes", "workers prune": "writes (a maintenance sweep)",
        "cron enable": "writes", "cron disable": "writes", "cron run": "writes", "cron delete": "writes",
        "unique release": "writes", "keys rotate": "writes (PostgreSQL)", "keys new-kek": "writes a file",
        "keys scrub-errors": "writes (a maintenance sweep)", "keys recover": "writes (PostgreSQL)",
    ]

    /// The leaf commands of `workerctl`'s command tree (`--experimental-dump-help`), as words ("jobs ls").
    func commandTree() throws -> Set<String> {
        let dump = try ChildProcess.run(TestServices.workerctl, ["--experimental-dump-help"])
        let root = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(dump.stdout.utf8)) as? [String: Any])
        var leaves: Set<String> = []
        func walk(_ command: [String: Any], _ path: [String]) {
            let subcommands = command["subcommands"] as? [[String: Any]] ?? []
            if subcommands.isEmpty { leaves.insert(path.joined(separator: " ")) }
            for sub in subcommands { walk(sub, path + [sub["commandName"] as? String ?? "?"]) }
        }
        walk(try XCTUnwrap(root["command"] as? [String: Any]), [])
        return leaves
    }

    /// Routes whose page at 100× is past its budget (names, processes, keys, instances, jids) and must say "partial"
    /// (the live JSON: `"partial":true`), and at 1× must not.
    static let partialAtScale: Set<String> = ["/", "/api/stats.json", "/queues", "/processes", "/limits", "/unique", "/batch/:bid"]

    /// The dashboard's GET routes as its route table declares them.
    func routeTable() throws -> Set<String> {
        let source = try String(contentsOf: TestServices.repositoryRoot.appendingPathComponent("Sources/WebDashboard/WebServer.swift"),
                                encoding: .utf8)
        return Set(source.matches(of: /router\.get\("([^"]+)"\)/).map { String($0.1) })
    }

    func testEveryDashboardGETScrapeAndWorkerctlReadStaysUnderOneBoundAtOneAndAHundredTimesEveryDimension() throws {
        let commands = try commandTree()
        let probed = Set(Self.cliProbes.map(\.command))
        XCTAssertEqual(commands.subtracting(probed).subtracting(Self.cliNotReads.keys), [],
                       "workerctl commands neither probed (cliProbes) nor said not to read Redis (cliNotReads)")
        XCTAssertEqual(probed.union(Self.cliNotReads.keys).subtracting(commands), [], "rows for commands the tree no longer has")
        let declared = try routeTable()
        XCTAssertFalse(declared.isEmpty, "no router.get found in WebServer.swift")
        let covered = Set(Self.webProbes.map(\.route))
        XCTAssertEqual(declared.subtracting(covered), [], "GET routes without a request-cost probe: add a row to webProbes")
        XCTAssertEqual(covered.subtracting(declared), [], "probes of routes the table no longer has")

        let port = Int(ProcessInfo.processInfo.environment["REQUEST_BUDGET_REDIS_PORT"] ?? "") ?? 6531
        let meter = try RequestCostMeter(port: port)
        defer { meter.stop() }
        let setup = try meter.connection()
        let server = try ChildProcess(executable: TestServices.workerctl, arguments: ["web", "--port", "0"],
                                      environment: ["REDIS_URL": meter.url, "DATABASE_URL": ""])
        web = server
        var base: String?
        XCTAssertTrue(eventually { base = server.stderr.firstMatch(of: /"web_url":"http:\/\/([^"]+)\/"/).map { "http://" + $0.1 }; return base != nil },
                      server.stderr)
        let url = try XCTUnwrap(base)
        let curl = try XCTUnwrap(TestServices.which("curl"))

        var report: [String] = []
        for scale in [1, 100] {
            let subjects = try buildState(setup, scale: scale)
            for probe in Self.webProbes {
                let path = probe.path(subjects)
                var status = ""
                var body = ""
                let cost = try meter.measure {
                    let run = try ChildProcess.run(curl, ["-s", "-o", "-", "-w", "\n%{http_code}", url + path], timeout: 120)
                    body = run.stdout
                    status = String(body.split(separator: "\n").last ?? "")
                }
                XCTAssertTrue(status == "200", "\(path) at \(scale)×: HTTP \(status): \(body.suffix(300))")
                XCTAssertLessThanOrEqual(cost.commands, probe.maxCommands, "\(path) at \(scale)×: \(cost)")
                XCTAssertLessThanOrEqual(cost.replyBytes, probe.maxReplyBytes, "\(path) at \(scale)×: \(cost)")
                report.append("\(scale)× \(path): \(cost); \(body.utf8.count) bytes of body")
                // Past its budget a page says so; within it, it does not.
                if Self.partialAtScale.contains(probe.route) {
                    let says = probe.route == "/api/stats.json" ? body.contains("\"partial\":true") : body.contains("partial")
                    XCTAssertEqual(says, scale == 100, "\(path) at \(scale)× and the word partial")
                }
            }
            // The bulk route (a POST, but one any page of the dashboard may send): 200 ticked jids looked for in
            // every queue, one budget for all of them.
            let page = try ChildProcess.run(curl, ["-s", url + "/jobs/dead"]).stdout
            let token = try XCTUnwrap(page.firstMatch(of: /name="csrf" value="([0-9a-f]{64})"/).map { String($0.1) })
            var form = ["-s", "-o", "/dev/null", "-w", "%{http_code}", "--data-urlencode", "csrf=\(token)", "--data-urlencode", "shard=0"]
            for index in 0..<200 { form += ["--data-urlencode", "jid=gone\(index)"] }
            var bulkStatus = ""
            let bulk = try meter.measure {
                bulkStatus = try ChildProcess.run(curl, form + [url + "/jobs/enqueued/selected/delete"], timeout: 120).stdout
            }
            XCTAssertTrue(["200", "303"].contains(bulkStatus), "bulk at \(scale)×: HTTP \(bulkStatus)")
            XCTAssertLessThanOrEqual(bulk.commands, 11_000, "bulk at \(scale)×: \(bulk)")
            XCTAssertLessThanOrEqual(bulk.replyBytes, 2_500_000, "bulk at \(scale)×: \(bulk)")
            report.append("\(scale)× POST /jobs/enqueued/selected/delete (200 jids): \(bulk)")

            // A worker's `/metrics` scrape reads the queue gauges through a `LargestQueues` kept across scrapes
            // (workerctl's `QueueGauges.refresh`: the largest 1,000 queues) and four set sizes. Measured at its second
            // scrape, when it also compares the first one's largest.
            let gauges = LargestQueues(limit: 1000, namesPerCall: 2000)  // workerctl's QueueGauges
            _ = try gauges.next(setup)
            let scrape = try meter.measure {
                let connection = try meter.connection()
                _ = try gauges.next(connection)
                _ = try connection.pipeline([["ZCARD", Keys.schedule], ["ZCARD", Keys.retry], ["ZCARD", Keys.dead],
                                             ["SCARD", Keys.processes]])
                connection.close()
            }
            XCTAssertLessThanOrEqual(scrape.commands, 8_500, "scrape at \(scale)×: \(scrape)")
            XCTAssertLessThanOrEqual(scrape.replyBytes, 250_000, "scrape at \(scale)×: \(scrape)")
            report.append("\(scale)× worker /metrics: \(scrape)")

            for probe in Self.cliProbes {
                let arguments = probe.command.split(separator: " ").map(String.init) + probe.arguments(subjects)
                var result: (status: Int32, stdout: String, stderr: String)?
                let cost = try meter.measure {
                    result = try ChildProcess.run(TestServices.workerctl, arguments,
                                                  environment: ["REDIS_URL": meter.url, "DATABASE_URL": ""], timeout: 120)
                }
                let line = arguments.joined(separator: " ")
                // `jobs explain` exits 1 when it did not find the job: past 1,000 queue names its queue may be unread
                // ("search stopped at its budget"), which is the partial answer, not a failure.
                let partialExplain = probe.command == "jobs explain" && result?.status == 1 && (result?.stdout ?? "").contains("budget")
                XCTAssertTrue(result?.status == 0 || partialExplain, "workerctl \(line) at \(scale)×: \(result?.stdout ?? "") \(result?.stderr ?? "")")
                XCTAssertLessThanOrEqual(cost.commands, probe.maxCommands, "workerctl \(line) at \(scale)×: \(cost)")
                XCTAssertLessThanOrEqual(cost.replyBytes, probe.maxReplyBytes, "workerctl \(line) at \(scale)×: \(cost)")
                report.append("\(scale)× workerctl \(line): \(cost)\(result?.stderr.contains("partial:") == true ? " [partial]" : "")")
            }
        }
        print(report.joined(separator: "\n"))
    }
}
