import Foundation

/// A program running on a pseudo-terminal through util-linux `script`, so that `isatty` is true
/// for its stdin and stdout. The test thread owns a session; nothing in it is shared.
///
/// The command is handed to `script` as `exec 'program' 'args'…`: `script -c` runs it through
/// `$SHELL -c` (or `/bin/sh`), and dash, unlike bash, forks instead of replacing itself, which
/// would leave a shell between `script` and the program and eat signals meant for it.
public final class PseudoTerminal {
    public static var isAvailable: Bool { TestServices.which("script") != nil }

    private let process = Process()
    private let stdin = Pipe()
    private let outputURL: URL
    private let executablePath: String

    /// Starts `arguments` (the first is the executable path) with `environment` added to this
    /// process's environment (plus `TERM=xterm` unless given).
    public init(_ arguments: [String], environment: [String: String] = [:]) throws {
        guard let script = TestServices.which("script") else {
            throw CocoaError(.executableNotLoadable, userInfo: [NSLocalizedDescriptionKey: "util-linux script is not installed"])
        }
        executablePath = URL(fileURLWithPath: arguments[0]).resolvingSymlinksInPath().path
        let quoted = arguments.map { "'" + $0.replacingOccurrences(of: "'", with: "'\\''") + "'" }.joined(separator: " ")
        process.executableURL = script
        process.arguments = ["-qfec", "exec " + quoted, "/dev/null"]
        process.environment = ProcessInfo.processInfo.environment.merging(["TERM": "xterm"].merging(environment) { $1 }) { $1 }
        outputURL = FileManager.default.temporaryDirectory.appendingPathComponent("pty-\(UUID().uuidString)")
        _ = FileManager.default.createFile(atPath: outputURL.path, contents: nil)
        process.standardInput = stdin
        process.standardOutput = try FileHandle(forWritingTo: outputURL)
        process.standardError = FileHandle.nullDevice
        try process.run()
    }

    deinit {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        try? FileManager.default.removeItem(at: outputURL)
    }

    /// Everything the program wrote to the terminal so far.
    public var output: String { (try? String(contentsOf: outputURL, encoding: .utf8)) ?? "" }

    /// Waits up to `timeout` s until the output contains `text`; false if it never did.
    @discardableResult
    public func waitFor(_ text: String, timeout: Double = 15) -> Bool {
        let deadline = Date(timeIntervalSinceNow: timeout)
        while !output.contains(text) {
            if !process.isRunning || Date() >= deadline { return output.contains(text) }
            Thread.sleep(forTimeInterval: 0.05)
        }
        return true
    }

    /// Types `input` into the terminal.
    public func type(_ input: String) { stdin.fileHandleForWriting.write(Data(input.utf8)) }

    /// The pid of the program itself (a descendant of `script` running the executable), or nil.
    public func programPID() -> Int32? {
        var pending = [process.processIdentifier]
        while let pid = pending.popLast() {
            if pid != process.processIdentifier,
               (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/exe")) == executablePath {
                return pid
            }
            let children = (try? String(contentsOfFile: "/proc/\(pid)/task/\(pid)/children", encoding: .utf8)) ?? ""
            pending += children.split(separator: " ").compactMap { Int32($0) }
        }
        return nil
    }

    /// Waits up to `timeout` s for the end (then kills `script` and returns -1); `script -e`
    /// passes the program's exit status on.
    public func wait(timeout: Double = 20) -> Int32 {
        let deadline = Date(timeIntervalSinceNow: timeout)
        while process.isRunning && Date() < deadline { Thread.sleep(forTimeInterval: 0.05) }
        if process.isRunning {
            process.terminate()
            process.waitUntilExit()
            return -1
        }
        return process.terminationStatus
    }

    /// Starts `arguments`, waits until the output contains `waitFor` (or 10 s), types `input`,
    /// and waits up to `timeout` s for the end. Returns the exit status and everything written.
    public static func run(_ arguments: [String], environment: [String: String] = [:], waitFor: String,
                           input: String, timeout: Double = 20) throws -> (status: Int32, output: String) {
        let terminal = try PseudoTerminal(arguments, environment: environment)
        terminal.waitFor(waitFor, timeout: 10)
        Thread.sleep(forTimeInterval: 0.2)
        terminal.type(input)
        let status = terminal.wait(timeout: timeout)
        return (status, terminal.output)
    }
}
