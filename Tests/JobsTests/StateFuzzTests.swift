import WorkersBenchJobs
import Foundation
import WorkersQueue
import WorkersTestServices
import WorkersWebDashboard
import XCTest

/// Issue 51 point 2: any value at any key the key types can build leaves every reader alive. Each iteration empties
/// a private redis-server, writes a random hostile value of a random Redis type at every key pattern of the key
/// catalogue (parts taken from the state, so that readers look at them), then runs every leaf command of `workerctl`,
/// every GET route of the dashboard, and the long-running commands (worker, run, scheduler, relay, top, with short
/// intervals: fetch, run, settle, heartbeat, move-due, recover, prune, cron, relay, limiter admission, batch
/// counters) against it. Asserts: no process ends by a trap or a hang, every long-running child is alive until it is
/// stopped, every route answers an HTTP status (no 5xx but a 503 with a reason, no dropped connection) within its
/// command budget (with 10,000 more names in `queues`), and a cancel issued after the hostile state still stops its
/// running job (once the keys of a wrong type that refuse it are deleted). The seed is printed; `STATE_FUZZ_SEED`
/// replays it, `STATE_FUZZ_ITERATIONS` (default 2) runs more (`bench/fuzz.sh state`). docs/fuzzing.md, "The state
/// fuzzer"; findings: StateFuzzFindingsTests.
///
/// Runs its own redis-server on `STATE_FUZZ_REDIS_PORT` (default 6561, `RequestCostMeter`) and a PostgreSQL database
/// of its own; the test thread drives everything, the children are separate processes.
final class StateFuzzTests: XCTestCase {
    var children: [ChildProcess] = []
    /// This iteration's tallies, printed at its end: runs of commands and how many exited non-zero, GETs and how many
    /// answered other than 200 (each with the first line of its message, for the log).
    var tally = (commands: 0, failedCommands: [String: Int](), gets: 0, otherStatus: [String: Int]())

    override func tearDown() {
        for child in children where child.isRunning { child.signal(SIGKILL); _ = child.wait() }
        children = []
        super.tearDown()
    }

    static var environment: [String: String] { ProcessInfo.processInfo.environment }

    // MARK: The enumerations match the generators

    func testEveryKeyPatternCommandAndRouteHasAGenerator() throws {
        XCTAssertEqual(Set(KeyCatalogue.all.map(\.name)).subtracting(StateGenerators.generators.keys), [],
                       "key patterns without a generator (StateGenerators.generators)")
        XCTAssertEqual(Set(StateGenerators.generators.keys).subtracting(KeyCatalogue.all.map(\.name)), [],
                       "generators without a key pattern")
        var random = SplitMix64(seed: 1)
        let state = FuzzState(&random, now: 1_765_000_000)
        for pattern in KeyCatalogue.all {
            for part in pattern.parts {
                XCTAssertNotNil(state.values(for: part, of: pattern), "no values for part \(part.name) of \(pattern)")
            }
        }
        let leaves = try Self.leafCommands()
        XCTAssertGreaterThan(leaves.count, 40, "the command tree: \(leaves)")
        XCTAssertEqual(Set(leaves).subtracting(StateReaders.commands.keys), [], "commands without a generator (StateReaders.commands)")
        XCTAssertEqual(Set(StateReaders.commands.keys).subtracting(leaves), [], "generators without a command")
        let routes = WebServer.getRoutes
        XCTAssertGreaterThan(routes.count, 10, "the route table: \(routes)")
        XCTAssertEqual(Set(routes).subtracting(StateReaders.routes.keys), [], "GET routes without a generator (StateReaders.routes)")
        XCTAssertEqual(Set(StateReaders.routes.keys).subtracting(routes), [], "generators without a route")
        XCTAssertEqual(Set(StateReaders.routeBudgets.keys), Set(routes), "GET routes without a command budget (StateReaders.routeBudgets)")
    }

    /// The leaf commands of `workerctl` (`jobs ls`, `worker`), from its own command tree (`--experimental-dump-help`).
    static func leafCommands() throws -> [String] {
        let dump = try ChildProcess.run(TestServices.workerctl, ["--experimental-dump-help"])
        guard dump.status == 0, let root = try JSONValue.parse(dump.stdout).objectValue?["command"]?.objectValue else {
            throw Failure("workerctl --experimental-dump-help: \(dump.status) \(dump.stderr.prefix(500))")
        }
        var leaves: [String] = []
        func walk(_ command: JSONObject, _ path: [String]) {
            let subcommands = command["subcommands"]?.arrayValue?.compactMap(\.objectValue) ?? []
            if subcommands.isEmpty { leaves.append(path.joined(separator: " ")) }
            for sub in subcommands { walk(sub, path + [sub["commandName"]?.stringValue ?? "?"]) }
        }
        walk(root, [])
        return leaves
    }

    struct Failure: Error, CustomStringConvertible {
        let description: String
        init(_ description: String) { self.description = description }
    }

    // MARK: The fuzzer

    func testAnyStateAtEveryKeyLeavesEveryCommandRouteAndLoopAnsweringWithoutATrap() throws {
        let port = Self.environment["STATE_FUZZ_REDIS_PORT"].flatMap { Int($0) } ?? 6561
        let seed = Self.environment["STATE_FUZZ_SEED"].flatMap { UInt64($0) } ?? UInt64.random(in: 1...UInt64.max)
        let iterations = Self.environment["STATE_FUZZ_ITERATIONS"].flatMap { Int($0) } ?? 2
        print("StateFuzzTests: seed \(seed), \(iterations) iteration(s) (replay one: STATE_FUZZ_SEED=<its seed> STATE_FUZZ_ITERATIONS=1)")

        // A redis-server of the test's own, which counts each GET's commands (RequestBudgetTests' meter).
        let meter = try RequestCostMeter(port: port)
        defer { meter.stop() }
        let redisURL = meter.url
        let connection = try meter.connection()

        let database = try PostgresTestDatabase.create(prefix: "statefuzz")
        defer { database.drop() }
        let migrate = try ChildProcess.run(TestServices.workerctl, ["migrate", "--bench-tables"], environment: ["DATABASE_URL": database.url])
        XCTAssertEqual(migrate.status, 0, migrate.stderr)
        let environment = ["REDIS_URL": redisURL, "DATABASE_URL": database.url]

        let web = try ChildProcess(executable: TestServices.workerctl, arguments: ["web", "--port", "0"], environment: environment)
        children.append(web)
        var base = ""
        XCTAssertTrue(eventually(timeout: 30) {
            base = web.stderr.firstMatch(of: /"web_url":"([^"]+)"/).map { String($0.1) } ?? ""
            return !base.isEmpty || !web.isRunning
        }, web.stderr)
        XCTAssertFalse(base.isEmpty, "the dashboard did not start: \(web.stderr.suffix(2000))")

        var seeds = SplitMix64(seed: seed)
        for iteration in 0..<iterations {
            let iterationSeed = iteration == 0 ? seed : seeds.next()
            print("StateFuzzTests: iteration \(iteration + 1) of \(iterations): STATE_FUZZ_SEED=\(iterationSeed)")
            let failures = testRun.map { $0.totalFailureCount } ?? 0
            try fuzz(seed: iterationSeed, connection: connection, meter: meter, environment: environment, web: web, base: base)
            if (testRun?.totalFailureCount ?? 0) > failures {
                print("StateFuzzTests: FAILED with STATE_FUZZ_SEED=\(iterationSeed)")
            }
        }
        XCTAssertTrue(web.isRunning, "the dashboard died: \(web.stderr.suffix(2000))")
    }

    /// One iteration: the state of `seed`, then every reader.
    private func fuzz(seed: UInt64, connection: RedisConnection, meter: RequestCostMeter, environment: [String: String],
                      web: ChildProcess, base: String) throws {
        var r = SplitMix64(seed: seed)
        _ = try connection.command("FLUSHALL")
        let time = try connection.command("TIME").strings
        let now = Double(Int(time.first ?? "") ?? 0)
        let state = FuzzState(&r, now: now)
        let written = try write(state, &r, connection)
        print("StateFuzzTests: wrote \(written.keys) keys (\(written.wrongType) of a wrong type) at \(KeyCatalogue.all.count) key patterns")
        // 10,000 names in `queues` (when it is a set): each GET must stay under its command budget all the same.
        if ["set", "none"].contains(try connection.command("TYPE", Keys.queues).string ?? "") {
            try connection.send(["EVAL", "for i = 1, tonumber(ARGV[1]) do redis.call('SADD', KEYS[1], 'bulk-' .. i) end", 1,
                                 Keys.queues, Self.bulkQueueNames]).checked()
        }
        let label = "seed \(seed)"

        for (path, command) in StateReaders.commands.sorted(by: { $0.key < $1.key }) where command.phase == .read {
            for arguments in command.arguments(&r, state) { try runCommand(path, arguments, environment, label) }
        }
        for (route, urls) in StateReaders.routes.sorted(by: { $0.key < $1.key }) {
            for url in urls(&r, state) {
                let cost = try meter.measure { try get(base + url, route: route, web: web, label) }
                let budget = StateReaders.routeBudgets[route] ?? 0
                XCTAssertLessThanOrEqual(cost.commands, budget, "\(label): GET \(url) (\(route)) sent \(cost) — over its budget of \(budget) commands")
            }
        }
        for (path, command) in StateReaders.commands.sorted(by: { $0.key < $1.key }) where command.phase == .admin {
            for arguments in command.arguments(&r, state) { try runCommand(path, arguments, environment, label) }
        }
        try loops(state, &r, connection, environment, label)
        print("StateFuzzTests: \(label): \(tally.commands) command runs, \(tally.failedCommands.values.reduce(0, +)) exited non-zero "
              + "(with a message); \(tally.gets) GETs, \(tally.otherStatus.values.reduce(0, +)) answered other than 200")
        if Self.environment["STATE_FUZZ_VERBOSE"] != nil {
            for (line, count) in tally.failedCommands.sorted(by: { $0.key < $1.key }) { print("   \(count)x \(line)") }
            for (line, count) in tally.otherStatus.sorted(by: { $0.key < $1.key }) { print("   \(count)x GET \(line)") }
        }
        tally = (0, [:], 0, [:])
        XCTAssertTrue(web.isRunning, "\(label): the dashboard died: \(web.stderr.suffix(3000))")
    }

    /// Writes every key pattern's keys (parts from the state); a tenth of the keys left out. In half the iterations a
    /// sixth of the keys are of a wrong type; in the others every key has its own type (so that readers, whose first
    /// WRONGTYPE ends their read with a message, get to parse every hostile value).
    private func write(_ state: FuzzState, _ r: inout SplitMix64, _ connection: RedisConnection) throws -> (keys: Int, wrongType: Int) {
        var keys = 0, wrong = 0
        let wrongTypes = r.chance(0.5) ? 0.16 : 0
        for pattern in KeyCatalogue.all {
            guard let generator = StateGenerators.generators[pattern.name] else {
                XCTFail("no generator for key pattern \(pattern)")
                continue
            }
            var combinations: [[String]] = [[]]
            for part in pattern.parts {
                guard let values = state.values(for: part, of: pattern) else {
                    XCTFail("no values for part \(part.name) of \(pattern)")
                    return (keys, wrong)
                }
                combinations = combinations.flatMap { prefix in values.map { prefix + [$0] } }
            }
            for parts in combinations where !r.chance(0.1) {
                let types = Array(pattern.types).sorted { $0.rawValue < $1.rawValue }
                let others = KeyPattern.RedisType.allCases.filter { !pattern.types.contains($0) }
                let wrongType = !others.isEmpty && r.chance(wrongTypes)
                let type = wrongType ? r.pick(others) : r.pick(types)
                let content = generator(&r, state, type)
                let key = pattern.key(parts)
                for reply in try connection.pipeline(content.commands(key)) {
                    if case .error(let message) = reply { XCTFail("writing \(key) (\(pattern.name)): \(message)") }
                }
                keys += 1
                if wrongType { wrong += 1 }
            }
        }
        return (keys, wrong)
    }

    // MARK: Checks

    /// Signals that are a trap, a crash or a hang (SIGKILL after the timeout), never a clean end.
    static let crashSignals: Set<Int32> = [SIGILL, SIGTRAP, SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGKILL]

    /// Fails when `child` (ended) died of a trap or was killed after hanging; a non-zero exit must say why.
    private func checkEnded(_ child: ChildProcess, status: Int32, _ what: String, _ label: String, stopped: Bool = false) {
        let signalled = child.process.terminationReason == .uncaughtSignal
        if signalled && (Self.crashSignals.contains(status) || !stopped) {
            XCTFail("\(label): \(what) ended by signal \(status)\(status == SIGKILL ? " (hung: killed after its timeout)" : ""): \(child.stderr.suffix(3000))")
        } else if !signalled, [132, 133, 134, 139].contains(status) {
            XCTFail("\(label): \(what) exited \(status) (a trap): \(child.stderr.suffix(3000))")
        } else if !signalled, status != 0, child.stderr.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty,
                  child.stdout.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty {
            XCTFail("\(label): \(what) exited \(status) without a message")
        }
    }

    private func runCommand(_ path: String, _ arguments: [String], _ environment: [String: String], _ label: String) throws {
        let argv = path.split(separator: " ").map(String.init) + arguments
        let child = try ChildProcess(executable: TestServices.workerctl, arguments: argv, environment: environment)
        let status = child.wait(timeout: 60)
        checkEnded(child, status: status, "workerctl \(argv.map { $0.debugDescription }.joined(separator: " "))", label)
        tally.commands += 1
        if status != 0 {
            let message = child.stderr.split(separator: "\n").first.map { String($0.prefix(120)) } ?? ""
            tally.failedCommands["\(path) \(status): \(message)", default: 0] += 1
        }
    }

    /// GETs `url`: an HTTP status must come back (curl's 000 is a dropped connection), never a 5xx but a 503 that
    /// says why.
    private func get(_ url: String, route: String, web: ChildProcess, _ label: String) throws {
        let curl = try XCTUnwrap(TestServices.which("curl"))
        let result = try ChildProcess.run(curl, ["-s", "-m", "30", "-w", "\n%{http_code}", url], timeout: 60)
        let lines = result.stdout.split(separator: "\n", omittingEmptySubsequences: false)
        let status = Int(lines.last.map(String.init)?.trimmingCharacters(in: .whitespaces) ?? "") ?? 0
        let body = lines.dropLast().joined(separator: "\n")
        tally.gets += 1
        if status != 200 { tally.otherStatus["\(route) \(status)", default: 0] += 1 }
        if status == 0 {
            XCTFail("\(label): GET \(url) (\(route)): no answer (curl \(result.status)); web: \(web.stderr.suffix(2000))")
        } else if status >= 500, status != 503 || body.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty {
            XCTFail("\(label): GET \(url) (\(route)): \(status) \(body.prefix(500))")
        }
    }

    // MARK: The loops: long-running commands as children, and a cancel

    /// Starts worker, run, scheduler, relay and top against the state; checks that a cancel accepted now stops a
    /// running job; stops each child (SIGTERM) after its cycles and checks it was alive until then and ended cleanly.
    private func loops(_ state: FuzzState, _ r: inout SplitMix64, _ connection: RedisConnection,
                       _ environment: [String: String], _ label: String) throws {
        let schedule = FileManager.default.temporaryDirectory.appendingPathComponent("state-fuzz-\(UUID().uuidString).yaml")
        defer { try? FileManager.default.removeItem(at: schedule) }
        let entries = state.cronNames.filter { $0.allSatisfy { $0.isLetter || $0.isNumber || "_.-".contains($0) } }.map { name in
            "- name: \(name)\n  cron: \"* * * * *\"\n  class: SteerProbe\n  queue: \(state.plainQueues[0])\n  args: [{steps: 1, step_ms: 1}]\n  catch_up: all\n  catch_up_window: 7d\n"
        }
        try entries.joined().write(to: schedule, atomically: true, encoding: .utf8)
        // `run` serves the state's queues; `worker` only the cancel check's queue (one queue key of a wrong type fails
        // a whole fetch, so a worker serving the state's queues may never fetch the probe).
        let worker = ["--bench-jobs", "--concurrency", "2", "--heartbeat-interval", "0.2", "--heartbeat-ttl", "2",
                      "--orphan-sweep-interval", "0.5", "--poll-interval", "0.1", "--shutdown-timeout", "2",
                      "--unknown-class-grace", "0", "--outbox-relay", "--outbox-poll-interval", "0.2", "--queue", Self.cancelQueue]
        let scheduler = ["--schedule", schedule.path, "--max-sleep", "0.5"]
        let commands: [(String, [String])] = [
            ("worker", ["worker"] + worker),
            ("run", ["run"] + worker + state.plainQueues.flatMap { ["--queue", $0] } + scheduler),
            ("scheduler", ["scheduler"] + scheduler),
            ("relay", ["relay", "--outbox-poll-interval", "0.2", "--lost-job-interval", "1"]),
        ]
        XCTAssertEqual(Set(commands.map(\.0) + ["web", "top"]),
                       Set(StateReaders.commands.filter { $0.value.phase == .child }.keys), "a long-running command without a child here")
        var started: [(String, ChildProcess)] = []
        for (name, argv) in commands {
            let child = try ChildProcess(executable: TestServices.workerctl, arguments: argv, environment: environment.merging(["COLUMNS": "120", "LINES": "40"]) { $1 })
            children.append(child)
            started.append((name, child))
        }
        // top's full-screen loop needs a terminal (without one it prints one frame): util-linux `script`.
        let top = PseudoTerminal.isAvailable
            ? try PseudoTerminal([TestServices.workerctl.path, "top", "--interval", "0.2"],
                                 environment: environment.merging(["COLUMNS": "120", "LINES": "40"]) { $1 }) : nil
        try cancelStopsItsJob(state, &r, connection, environment, workers: started.filter { ["worker", "run"].contains($0.0) }.map(\.1), label)
        // At least a few cycles of every loop (heartbeat 0.2 s, sweep 0.5 s, poll 0.1 s, relay 0.2 s).
        Thread.sleep(forTimeInterval: 1.5)
        if let top {
            let framed = top.waitFor("127.0.0.1:", timeout: 15)  // the address heads every frame, an error frame too
            let alive = top.programPID().map { kill($0, 0) == 0 } ?? false
            top.type("q")
            let status = top.wait(timeout: 15)
            // `script -e` passes the program's status on; a trap is 128 + its signal.
            if !framed || !alive || status != 0 {
                XCTFail("\(label): workerctl top (in a terminal): frame \(framed), alive \(alive), status \(status): \(top.output.suffix(3000))")
            }
        }
        for (name, child) in started {
            let alive = child.isRunning
            if alive { child.signal(SIGTERM) }
            let status = child.wait(timeout: 30)
            if !alive {
                XCTFail("\(label): workerctl \(name) ended before it was stopped: status \(status) \(child.stderr.suffix(3000))")
            } else {
                checkEnded(child, status: status, "workerctl \(name) (stopped with SIGTERM)", label, stopped: true)
            }
        }
    }

    static let cancelQueue = "fuzz-cancel"
    /// Names added to `queues` (a set) in every iteration, past what any page may read one by one.
    static let bulkQueueNames = 10_000

    /// A `SteerProbe` pushed to the queue the `worker` child serves: once it runs, `workerctl jobs cancel` must stop it
    /// (the worker logs it cancelled; its 6,000 steps of 50 ms would take 5 minutes). A key of a wrong type may keep
    /// the workers from fetching (`paused`) or make the cancel refuse with WRONGTYPE (a clear message, exit 1): then
    /// the keys of a wrong type are deleted — the values stay hostile, the 10,000 live marks too — and the step is
    /// tried again, which must succeed.
    private func cancelStopsItsJob(_ state: FuzzState, _ r: inout SplitMix64, _ connection: RedisConnection,
                                   _ environment: [String: String], workers: [ChildProcess], _ label: String) throws {
        let jid = r.hex(24)
        let payload = #"{"class":"SteerProbe","args":[{"steps":6000,"step_ms":50,"ledger":"none","quiet":true}],"jid":"\#(jid)","queue":"\#(Self.cancelQueue)","retry":true,"created_at":\#(state.now),"enqueued_at":\#(state.now)}"#
        _ = try connection.command("LPUSH", Keys.queue(Self.cancelQueue), payload)
        let runs = BenchKeys.steerRuns(jid)
        func started(_ timeout: Double) -> Bool {
            eventually(timeout: timeout) { ((try? connection.command("GET", runs).string).flatMap { Int($0) } ?? 0) >= 1 }
        }
        var repaired = 0
        if !started(10) {
            repaired = try deleteKeysOfAWrongType(connection)
            guard started(30) else {
                XCTFail("\(label): the cancel check's probe never started (\(repaired) keys of a wrong type deleted): "
                        + workers.map { String($0.stderr.suffix(3000)) }.joined(separator: "\n---\n"))
                return
            }
        }
        func cancel() throws -> (Int32, String) {
            let child = try ChildProcess(executable: TestServices.workerctl, arguments: ["jobs", "cancel", jid], environment: environment)
            let status = child.wait(timeout: 60)
            checkEnded(child, status: status, "workerctl jobs cancel (the check's probe)", label)
            return (status, child.stdout + child.stderr)
        }
        var (status, output) = try cancel()
        if status != 0 {
            repaired += try deleteKeysOfAWrongType(connection)
            (status, output) = try cancel()
        }
        print("StateFuzzTests: \(label): cancel check: \(repaired) keys of a wrong type deleted first; cancels holds \((try? connection.command("ZCARD", CancelKeys.set).integer) ?? -1)")
        XCTAssertEqual(status, 0, "\(label): jobs cancel of a running job refused with only keys of their own types: \(output.prefix(1000))")
        guard status == 0 else { return }
        let stopped = eventually(timeout: 30) {
            workers.contains { worker in
                worker.stderr.split(separator: "\n").contains { $0.contains(jid) && $0.contains("cancelled") }
            }
        }
        XCTAssertTrue(stopped, "\(label): the cancel of \(jid) was accepted (\(output.prefix(300))) but its job kept running: "
                      + workers.map { $0.stderr.suffix(2000) }.joined(separator: "\n---\n"))
    }

    /// Deletes every key whose Redis type no key pattern it matches allows; returns how many.
    private func deleteKeysOfAWrongType(_ connection: RedisConnection) throws -> Int {
        var cursor = "0", deleted = 0
        repeat {
            let reply = try connection.command("SCAN", cursor, "COUNT", 1000)
            guard case .array(let parts) = reply, parts.count == 2 else { break }
            cursor = parts[0].string ?? "0"
            for key in parts[1].strings {
                let patterns = KeyCatalogue.all.filter { $0.matches(key) }
                guard !patterns.isEmpty, let type = try connection.command("TYPE", key).string.flatMap(KeyPattern.RedisType.init(rawValue:)),
                      !patterns.contains(where: { $0.types.contains(type) }) else { continue }
                _ = try connection.command("DEL", key)
                deleted += 1
            }
        } while cursor != "0"
        return deleted
    }
}
