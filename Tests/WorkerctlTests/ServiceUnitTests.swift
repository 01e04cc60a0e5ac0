import Foundation
import WorkersQueue
import WorkersTestServices
import XCTest

/// `config/systemd/workers.service` and its environment file, exercised as a service manager would:
/// the unit's settings are checked against the worker's stop time, `systemd-analyze verify` reads
/// it, and its ExecStart command line runs with the environment file's variables (Redis and
/// PostgreSQL replaced by the test's) until it has processed a job, then stops on SIGTERM within
/// TimeoutStopSec. Where systemd runs as PID 1, the same command runs as a transient unit under
/// `systemd-run` instead of as a child of the test. Database 55.
final class ServiceUnitTests: XCTestCase {
    static let unitPath = "config/systemd/workers.service"
    static let environmentExample = "config/systemd/workers.env.example"

    var redis: TestRedis!
    var scratch: URL!

    override func setUpWithError() throws {
        redis = try TestRedis(database: 55)
        scratch = FileManager.default.temporaryDirectory.appendingPathComponent("service-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
    }

    override func tearDownWithError() throws { try? FileManager.default.removeItem(at: scratch) }

    private func repositoryFile(_ path: String) throws -> String {
        try String(contentsOf: TestServices.repositoryRoot.appendingPathComponent(path), encoding: .utf8)
    }

    func testUnitStopsLaterThanTheWorkerAndRestartsOnlyOnFailure() throws {
        let unit = try SystemdUnit(parsing: try repositoryFile(Self.unitPath))
        XCTAssertEqual(unit.value("Service", "Type"), "simple", "workerctl does not speak sd_notify")
        XCTAssertEqual(unit.value("Service", "Restart"), "on-failure")
        XCTAssertEqual(unit.value("Service", "KillSignal"), "SIGTERM")
        XCTAssertEqual(unit.value("Service", "ExecReload"), "/bin/kill -HUP $MAINPID", "SIGHUP reloads the schedule")
        XCTAssertEqual(unit.value("Service", "RestartPreventExitStatus"), "2", "exit 2 is a configuration error")
        let stopTimeout = try XCTUnwrap(unit.value("Service", "TimeoutStopSec").flatMap(Double.init))
        // The worker's stop ends by its shutdown deadline, shutdown_timeout + 5 s (WorkerProcess.shutdown);
        // the unit keeps the older, wider bound shutdown_timeout + max(shutdown_timeout, 5) as its margin.
        let shutdown = try Self.shutdownTimeout(configYAML: try repositoryFile(try XCTUnwrap(unit.configPath)))
        XCTAssertGreaterThan(stopTimeout, shutdown + max(shutdown, 5),
                             "TimeoutStopSec must outlast shutdown_timeout \(shutdown) s plus the settlement drain")
    }

    func testSystemdAnalyzeVerifiesTheUnit() throws {
        guard let analyze = TestServices.which("systemd-analyze") else {
            throw XCTSkip("systemd-analyze is not installed: the unit's syntax is not verified here")
        }
        // Verify needs ExecStart's program to exist: point it at the built binary.
        let text = try repositoryFile(Self.unitPath).replacingOccurrences(of: "/opt/workers/bin/workerctl",
                                                                          with: TestServices.workerctl.path)
        let copy = scratch.appendingPathComponent("workers.service")
        try text.write(to: copy, atomically: true, encoding: .utf8)
        let result = try ChildProcess.run(analyze, ["verify", copy.path])
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertEqual(result.stderr.trimmingCharacters(in: .whitespacesAndNewlines), "", "no unknown keys or bad values")
    }

    func testTheUnitsCommandLineProcessesAJobAndStopsOnSIGTERMWithinTimeoutStopSec() throws {
        let unit = try SystemdUnit(parsing: try repositoryFile(Self.unitPath))
        let command = try XCTUnwrap(unit.execStart, "ExecStart")
        let stopTimeout = try XCTUnwrap(unit.value("Service", "TimeoutStopSec").flatMap(Double.init))
        XCTAssertEqual(command.first, "/opt/workers/bin/workerctl")

        // WorkingDirectory stand-in: the repository's config/ as installed (ExecStart's paths are relative).
        let workingDirectory = scratch.appendingPathComponent("opt-workers")
        try FileManager.default.createDirectory(at: workingDirectory, withIntermediateDirectories: true)
        try FileManager.default.copyItem(at: TestServices.repositoryRoot.appendingPathComponent("config"),
                                         to: workingDirectory.appendingPathComponent("config"))

        // The environment file's variables (and Environment= lines), with the test's services and a
        // private database migrated as docs/deploy.md says (`workerctl migrate` before the first start).
        let database = try PostgresTestDatabase.create(prefix: "service_unit")
        defer { database.drop() }
        var environment = try SystemdUnit.environmentFile(try repositoryFile(Self.environmentExample))
        XCTAssertNotNil(environment["REDIS_URL"], "the example names REDIS_URL")
        XCTAssertNotNil(environment["DATABASE_URL"], "the example names DATABASE_URL")
        environment.merge(unit.environment) { $1 }
        environment["REDIS_URL"] = redis.url
        environment["DATABASE_URL"] = database.url
        environment["PRIVACY_EXPORT_DIR"] = scratch.appendingPathComponent("state/exports").path  // StateDirectory stand-in
        // The example names the KEK file a worker with PostgreSQL needs; here it is the test KEK, in a file as the
        // example says to make it (mode 0600), and no inline KEK beside it.
        XCTAssertEqual(environment["WORKERS_KEK_FILE"], "/etc/workers/secrets/workers-kek", "the example names the KEK file")
        let kekFile = scratch.appendingPathComponent("workers-kek").path
        let testKEK = try XCTUnwrap(ChildProcess.testKEK["WORKERS_KEK"] ?? ProcessInfo.processInfo.environment["WORKERS_KEK"])
        XCTAssertTrue(FileManager.default.createFile(atPath: kekFile, contents: Data(testKEK.utf8), attributes: [.posixPermissions: 0o600]))
        environment["WORKERS_KEK_FILE"] = kekFile
        environment["WORKERS_KEK"] = ""
        let migrate = try ChildProcess.run(TestServices.workerctl, ["migrate"], environment: environment)
        XCTAssertEqual(migrate.status, 0, migrate.stderr)

        let pid1 = (try? String(contentsOfFile: "/proc/1/comm", encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines) ?? "?"
        if pid1 == "systemd", TestServices.which("systemd-run") != nil, getuid() == 0 {
            try runUnderSystemd(command: command, workingDirectory: workingDirectory, environment: environment,
                                stopTimeout: stopTimeout, unit: unit)
            return
        }
        print("ServiceUnitTests: systemd is not PID 1 here (PID 1 is \(pid1)): running the unit's ExecStart directly: "
              + command.joined(separator: " "))
        let child = try ChildProcess(executable: TestServices.workerctl, arguments: Array(command.dropFirst()),
                                     environment: environment, currentDirectory: workingDirectory)
        defer { if child.isRunning { child.signal(SIGKILL) } }
        try enqueueAndWaitForProcessing(log: { child.stderr })
        XCTAssertEqual(try redis.int("SCARD", "processes"), 1)
        XCTAssertTrue(try redis.int("SCARD", "cron_jobs") > 0, "the scheduler synced config/schedule.yaml")

        child.signal(try XCTUnwrap(unit.killSignal, "KillSignal"))
        XCTAssertEqual(child.wait(timeout: stopTimeout), 0, "not stopped cleanly within TimeoutStopSec: \(child.stderr)")
        XCTAssertEqual(try redis.int("SCARD", "processes"), 0, "the worker deregistered")
    }

    private func enqueueAndWaitForProcessing(log: () -> String) throws {
        let enqueue = try WorkerctlRunner(redisURL: redis.url).run("enqueue", "Noop", "--queue", "default")
        XCTAssertEqual(enqueue.status, 0, enqueue.stderr)
        XCTAssertTrue(try eventually(timeout: 60) { try redis.processed() >= 1 }, log())
    }

    /// Where systemd is PID 1 (not on this project's CI machine, whose PID 1 is the sandbox's
    /// init): the command as a transient service with the unit's stop settings, stopped by systemctl.
    private func runUnderSystemd(command: [String], workingDirectory: URL, environment: [String: String],
                                 stopTimeout: Double, unit: SystemdUnit) throws {
        let name = "workers-test-\(UUID().uuidString.prefix(8).lowercased())"
        var arguments = ["--unit", name, "--collect", "--property", "WorkingDirectory=\(workingDirectory.path)"]
        for key in ["KillSignal", "KillMode", "TimeoutStopSec"] {
            if let value = unit.value("Service", key) { arguments += ["--property", "\(key)=\(value)"] }
        }
        for (key, value) in environment.sorted(by: { $0.key < $1.key }) { arguments += ["--setenv", "\(key)=\(value)"] }
        arguments += [TestServices.workerctl.path] + command.dropFirst()
        let started = try ChildProcess.run(try XCTUnwrap(TestServices.which("systemd-run")), arguments)
        XCTAssertEqual(started.status, 0, started.stderr)
        let systemctl = try XCTUnwrap(TestServices.which("systemctl"))
        defer { _ = try? ChildProcess.run(systemctl, ["kill", "--signal", "SIGKILL", name]) }
        try enqueueAndWaitForProcessing(log: { "journalctl -u \(name)" })
        let stopped = try ChildProcess.run(systemctl, ["stop", name], timeout: stopTimeout + 10)
        XCTAssertEqual(stopped.status, 0, stopped.stderr)
        XCTAssertEqual(try redis.int("SCARD", "processes"), 0, "the worker deregistered before systemd's timeout")
    }

    static func shutdownTimeout(configYAML: String) throws -> Double {
        for line in configYAML.split(separator: "\n") where line.hasPrefix("shutdown_timeout:") {
            let value = line.dropFirst("shutdown_timeout:".count).split(separator: "#").first ?? ""
            if let seconds = Double(value.trimmingCharacters(in: .whitespaces)) { return seconds }
        }
        throw SystemdUnit.UnreadableLine(line: "(no shutdown_timeout: line in the worker config)")
    }
}

/// The few parts of a systemd unit file these tests read (systemd.syntax(7)): `[Section]` headers,
/// `Key=value` lines, `#`/`;` comments. Keys may repeat (Environment=).
struct SystemdUnit {
    /// A line of a unit or environment file that is neither a comment nor `Key=value`.
    struct UnreadableLine: Error, CustomStringConvertible {
        let line: String
        var description: String { "unreadable line: \(line)" }
    }

    private var entries: [(section: String, key: String, value: String)] = []

    init(parsing text: String) throws {
        var section = ""
        for raw in text.split(separator: "\n", omittingEmptySubsequences: false) {
            let line = raw.trimmingCharacters(in: .whitespaces)
            if line.isEmpty || line.hasPrefix("#") || line.hasPrefix(";") { continue }
            if line.hasPrefix("["), line.hasSuffix("]") {
                section = String(line.dropFirst().dropLast())
                continue
            }
            guard let equals = line.firstIndex(of: "=") else { throw UnreadableLine(line: line) }
            entries.append((section, line[..<equals].trimmingCharacters(in: .whitespaces),
                            line[line.index(after: equals)...].trimmingCharacters(in: .whitespaces)))
        }
    }

    /// The last value of `key` in `section` (systemd: a later assignment wins).
    func value(_ section: String, _ key: String) -> String? {
        entries.last { $0.section == section && $0.key == key }?.value
    }

    /// ExecStart split on whitespace (the unit keeps it free of quotes and specifiers).
    var execStart: [String]? {
        value("Service", "ExecStart").map { $0.split(separator: " ").map(String.init) }
    }

    /// KillSignal= as a signal number (the names this unit may use).
    var killSignal: Int32? {
        switch value("Service", "KillSignal") ?? "SIGTERM" {  // systemd's default is SIGTERM
        case "SIGTERM": return SIGTERM
        case "SIGINT": return SIGINT
        case "SIGQUIT": return SIGQUIT
        case "SIGHUP": return SIGHUP
        default: return nil
        }
    }

    /// `--config PATH` of ExecStart, relative to WorkingDirectory.
    var configPath: String? {
        guard let command = execStart, let index = command.firstIndex(of: "--config"), index + 1 < command.count else { return nil }
        return command[index + 1]
    }

    /// The `Environment=NAME=value` assignments.
    var environment: [String: String] {
        var result: [String: String] = [:]
        for entry in entries where entry.section == "Service" && entry.key == "Environment" {
            for assignment in entry.value.split(separator: " ") {
                let parts = assignment.split(separator: "=", maxSplits: 1)
                if parts.count == 2 { result[String(parts[0])] = String(parts[1]) }
            }
        }
        return result
    }

    /// An EnvironmentFile: `NAME=value` lines, `#` comments (systemd.exec(7), EnvironmentFile=).
    static func environmentFile(_ text: String) throws -> [String: String] {
        var result: [String: String] = [:]
        for raw in text.split(separator: "\n") {
            let line = raw.trimmingCharacters(in: .whitespaces)
            if line.isEmpty || line.hasPrefix("#") || line.hasPrefix(";") { continue }
            let parts = line.split(separator: "=", maxSplits: 1)
            guard parts.count == 2 else { throw UnreadableLine(line: line) }
            result[String(parts[0])] = String(parts[1])
        }
        return result
    }
}
