import Foundation

/// A program started by a test (the `workerctl` binary, Ruby, Python fakes), with its output
/// captured to files so a test can read it after the fact.
public final class ChildProcess: @unchecked Sendable {
    public let process = Process()
    public let stdoutURL: URL
    public let stderrURL: URL

    /// Starts `executable` with `arguments`; `environment` is added to this process's environment.
    public init(executable: URL, arguments: [String], environment: [String: String] = [:],
                currentDirectory: URL? = nil) throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("child-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        stdoutURL = directory.appendingPathComponent("stdout")
        stderrURL = directory.appendingPathComponent("stderr")
        _ = FileManager.default.createFile(atPath: stdoutURL.path, contents: nil)
        _ = FileManager.default.createFile(atPath: stderrURL.path, contents: nil)
        process.executableURL = executable
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(Self.testKEK) { old, _ in old }
            .merging(environment) { $1 }
        if let currentDirectory { process.currentDirectoryURL = currentDirectory }
        process.standardOutput = try FileHandle(forWritingTo: stdoutURL)
        process.standardError = try FileHandle(forWritingTo: stderrURL)
        process.standardInput = FileHandle.nullDevice
        try process.run()
    }

    /// The KEK a child `workerctl` gets unless the test's environment or the call sets one (docs/jobs-privacy.md): a
    /// worker with PostgreSQL refuses to start without a key store when it registers a class with personal arguments
    /// (the receipts). Test-only: 32 zero bytes, id `test-1`, the same for every test, so the shared database's KEK
    /// check row always matches.
    public static let testKEK: [String: String] =
        ProcessInfo.processInfo.environment["WORKERS_KEK"] != nil || ProcessInfo.processInfo.environment["WORKERS_KEK_FILE"] != nil
        ? [:] : ["WORKERS_KEK": "test-1:" + Data(count: 32).base64EncodedString()]

    public var pid: Int32 { process.processIdentifier }
    public var isRunning: Bool { process.isRunning }

    public func signal(_ number: Int32) { kill(process.processIdentifier, number) }

    /// Waits for exit (at most `timeout` s, then SIGKILL) and returns the exit status.
    @discardableResult
    public func wait(timeout: Double = 30) -> Int32 {
        let deadline = Date(timeIntervalSinceNow: timeout)
        while process.isRunning && Date() < deadline { Thread.sleep(forTimeInterval: 0.02) }
        if process.isRunning {
            signal(SIGKILL)
            let killDeadline = Date(timeIntervalSinceNow: 5)
            while process.isRunning && Date() < killDeadline { Thread.sleep(forTimeInterval: 0.02) }
            if process.isRunning { return -1 }
        }
        return process.terminationStatus
    }

    public var stdout: String { (try? String(contentsOf: stdoutURL, encoding: .utf8)) ?? "" }
    public var stderr: String { (try? String(contentsOf: stderrURL, encoding: .utf8)) ?? "" }

    deinit { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }

    /// Runs a program to completion and returns (status, stdout, stderr).
    public static func run(_ executable: URL, _ arguments: [String], environment: [String: String] = [:],
                           timeout: Double = 60) throws -> (status: Int32, stdout: String, stderr: String) {
        let child = try ChildProcess(executable: executable, arguments: arguments, environment: environment)
        let status = child.wait(timeout: timeout)
        return (status, child.stdout, child.stderr)
    }
}

extension TestServices {
    /// The `workerctl` binary built next to the test bundle (`swift build --build-tests` builds it).
    public static var workerctl: URL {
        let testBinary = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        var directory = testBinary.deletingLastPathComponent()
        while directory.path != "/" {
            let candidate = directory.appendingPathComponent("workerctl")
            if FileManager.default.isExecutableFile(atPath: candidate.path) { return candidate }
            directory = directory.deletingLastPathComponent()
        }
        return repositoryRoot.appendingPathComponent(".build/debug/workerctl")
    }

    /// Finds a program on PATH (e.g. `ruby`).
    public static func which(_ name: String) -> URL? {
        for directory in (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":") {
            let candidate = URL(fileURLWithPath: String(directory)).appendingPathComponent(name)
            if FileManager.default.isExecutableFile(atPath: candidate.path) { return candidate }
        }
        return nil
    }
}
