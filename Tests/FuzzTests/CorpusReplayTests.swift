import Foundation
import WorkersFuzzTargets
import XCTest

/// Replays every committed corpus file `Tests/FuzzCorpus/<harness>/*` through its harness, in a plain debug build
/// (no sanitizer, no libFuzzer), deterministically: the fuzzers' findings stay fixed, and every review
/// reproduction stays a test (docs/fuzzing.md).
///
/// Each harness's files run in one `WorkersFuzzRunner` child process, so a file that traps fails this test with its name
/// and the trap's message instead of killing the test process; the replay then goes on with the next file.
final class CorpusReplayTests: XCTestCase {
    static let corpus = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("FuzzCorpus")

    /// The largest corpus file (bytes): small inputs keep the replay fast and the findings readable.
    static let maxFileSize = 4096

    func testEveryHarnessHasACorpusAndEveryFolderAHarness() throws {
        let folders = try FileManager.default.contentsOfDirectory(atPath: Self.corpus.path).filter { !$0.hasPrefix(".") }
        XCTAssertEqual(Set(folders), Set(FuzzHarnesses.all.map(\.name)), "Tests/FuzzCorpus/<harness> folders")
        for harness in FuzzHarnesses.all {
            XCTAssertFalse(try files(harness.name).isEmpty, "no corpus for \(harness.name)")
        }
    }

    func testPayload() throws { try replay("payload") }
    func testHTTPHeaders() throws { try replay("http-headers") }
    func testRedisURL() throws { try replay("redis-url") }
    func testPostgresURL() throws { try replay("postgres-url") }
    func testCron() throws { try replay("cron") }
    func testScheduleFile() throws { try replay("schedule-file") }
    func testAdminRecord() throws { try replay("admin-record") }
    func testAdminPaging() throws { try replay("admin-paging") }
    func testInflate() throws { try replay("inflate") }
    func testSettlement() throws { try replay("settlement") }

    // MARK: -

    func files(_ harness: String) throws -> [String] {
        let folder = Self.corpus.appendingPathComponent(harness)
        return try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { !$0.hasPrefix(".") }.sorted()
            .map { folder.appendingPathComponent($0).path }
    }

    /// Runs the harness's files in `WorkersFuzzRunner` processes, starting a new one after each file that killed one.
    func replay(_ harness: String, file: StaticString = #filePath, line: UInt = #line) throws {
        var pending = try files(harness)
        XCTAssertFalse(pending.isEmpty, "no corpus for \(harness)", file: file, line: line)
        for path in pending {
            let size = (try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0
            XCTAssertLessThanOrEqual(size, Self.maxFileSize, "\(path) is over \(Self.maxFileSize) bytes", file: file, line: line)
        }
        while !pending.isEmpty {
            let run = try Self.runner(harness, pending)
            let survived = Set(run.stdout.split(separator: "\n").compactMap { $0.hasPrefix("ok ") ? String($0.dropFirst(3)) : nil })
            if run.status == 0 && survived.count == pending.count { return }
            guard let culprit = pending.first(where: { !survived.contains($0) }) else {
                return XCTFail("WorkersFuzzRunner \(harness) exited \(run.status) after every file: \(run.stderr)", file: file, line: line)
            }
            let reason = Self.trapReason(run.stderr)
            XCTFail("\(harness): \(Self.relative(culprit)) \(run.timedOut ? "hung (no result in \(Self.timeout) s)" : "trapped (status \(run.status))"): \(reason)",
                    file: file, line: line)
            pending = Array(pending.drop(while: { $0 != culprit }).dropFirst())
        }
    }

    static let timeout: Double = 60

    /// The trap's message and the first two frames in the project's sources, from the Swift backtrace on stderr:
    /// `Swift runtime failure: arithmetic overflow | PayloadHarness.checkCounters(_:) PayloadHarness.swift:48:23 | …`.
    static func trapReason(_ stderr: String) -> String {
        let lines = stderr.split(separator: "\n")
        let message = lines.first { $0.contains("Fatal error") || $0.hasPrefix("*** Swift runtime failure") }
            .map { $0.trimmingCharacters(in: CharacterSet(charactersIn: "* ")) }
        let frames = lines.filter { $0.contains("/Sources/") && $0.contains(".swift:") && !$0.contains("[system]") }
            .prefix(2).map { line -> String in
                let function = line.range(of: #"0x[0-9a-f]+ "#, options: .regularExpression)
                    .map { line[$0.upperBound...].prefix(while: { $0 != "+" }).trimmingCharacters(in: .whitespaces) } ?? ""
                let location = line.split(separator: "/").last.map(String.init) ?? ""
                return "\(function) \(location)"
            }
        return ([message ?? "no message (status only)"] + frames).joined(separator: " | ")
    }

    static func relative(_ path: String) -> String {
        path.hasPrefix(corpus.path) ? "FuzzCorpus" + path.dropFirst(corpus.path.count) : path
    }

    /// The `WorkersFuzzRunner` binary built next to this test bundle.
    static var runnerBinary: URL {
        var directory = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().deletingLastPathComponent()
        while directory.path != "/" {
            let candidate = directory.appendingPathComponent("WorkersFuzzRunner")
            if FileManager.default.isExecutableFile(atPath: candidate.path) { return candidate }
            directory = directory.deletingLastPathComponent()
        }
        return corpus.deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent(".build/debug/WorkersFuzzRunner")
    }

    static func runner(_ harness: String, _ paths: [String]) throws -> (status: Int32, timedOut: Bool, stdout: String, stderr: String) {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("fuzz-replay-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let out = directory.appendingPathComponent("stdout"), err = directory.appendingPathComponent("stderr")
        _ = FileManager.default.createFile(atPath: out.path, contents: nil)
        _ = FileManager.default.createFile(atPath: err.path, contents: nil)
        let process = Process()
        process.executableURL = runnerBinary
        process.arguments = [harness] + paths
        process.standardOutput = try FileHandle(forWritingTo: out)
        process.standardError = try FileHandle(forWritingTo: err)
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let deadline = Date(timeIntervalSinceNow: timeout)
        while process.isRunning && Date() < deadline { Thread.sleep(forTimeInterval: 0.01) }
        let timedOut = process.isRunning
        if timedOut { process.terminate(); kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
        return (process.terminationStatus, timedOut,
                (try? String(contentsOf: out, encoding: .utf8)) ?? "", (try? String(contentsOf: err, encoding: .utf8)) ?? "")
    }
}
