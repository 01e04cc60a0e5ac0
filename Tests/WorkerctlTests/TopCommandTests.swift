import Foundation
import WorkersQueue
import WorkersTestServices
import XCTest

/// `workerctl top` (database 44): one frame when stdout is not a terminal, and the live mode
/// under a pseudo-terminal (util-linux `script`) restoring the terminal on q and SIGTERM.
final class TopCommandTests: XCTestCase {
    var redis: TestRedis!
    var ctl: WorkerctlRunner!

    override func setUpWithError() throws {
        redis = try TestRedis(database: 44)
        ctl = WorkerctlRunner(redisURL: redis.url)
        try redis.client.enqueueMany([NewJob("A", queue: "critical"), NewJob("B", queue: "mailers")])
        try redis.command("ZADD", Keys.dead, Clock.now(), JSONValue.object([
            "class": "Doomed", "args": [], "jid": "dddddddddddddddddddddddd", "queue": "default",
            "error_class": "RuntimeError", "error_message": "it broke", "failed_at": .double(Clock.now())]).serialized())
    }

    func testOneFrameWhenNotATerminal() throws {
        let result = try ctl.run("top")
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertTrue(result.stdout.contains("critical"), result.stdout)
        XCTAssertTrue(result.stdout.contains("mailers"), result.stdout)
        XCTAssertTrue(result.stdout.contains("RuntimeError: it broke"), result.stdout)
        XCTAssertFalse(result.stdout.contains("\u{1B}["), "no escape sequences when not a terminal")

        let json = try XCTUnwrap(ctl.run("top", "--json").object)
        XCTAssertEqual(json.keys, ["time", "throughput", "stats", "busy", "recent_failures"])
        XCTAssertEqual(json["recent_failures"]?.arrayValue?.first?.objectValue?["jid"], "dddddddddddddddddddddddd")
    }

    func assertRestored(_ output: String, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertTrue(output.contains("\u{1B}[?1049h"), "entered the alternate screen", file: file, line: line)
        let tail = output.components(separatedBy: "\u{1B}[?1049h").last ?? ""
        XCTAssertTrue(tail.contains("\u{1B}[?25h\u{1B}[?1049l"), "cursor shown and main screen restored: \(tail.suffix(80).debugDescription)",
                      file: file, line: line)
    }

    func testLiveModeQuitsOnQAndRestoresTheTerminal() throws {
        try XCTSkipUnless(PseudoTerminal.isAvailable, "util-linux script is not installed")
        let result = try PseudoTerminal.run([TestServices.workerctl.path, "top", "--interval", "0.2"],
                                            environment: ["REDIS_URL": redis.url], waitFor: "mailers", input: "q")
        XCTAssertEqual(result.status, 0, result.output)
        XCTAssertTrue(result.output.contains("RECENT ERRORS"), result.output)
        assertRestored(result.output)
    }

    func testLiveModeRestoresTheTerminalOnSIGTERMAndSIGINT() throws {
        try XCTSkipUnless(PseudoTerminal.isAvailable, "util-linux script is not installed")
        for number in [SIGTERM, SIGINT] {
            let terminal = try PseudoTerminal([TestServices.workerctl.path, "top", "--interval", "0.2"],
                                              environment: ["REDIS_URL": redis.url, "COLUMNS": "120", "LINES": "40"])
            XCTAssertTrue(terminal.waitFor("mailers"), terminal.output)
            let pid = try XCTUnwrap(terminal.programPID(), "workerctl runs under script")
            kill(pid, number)
            let result = (status: terminal.wait(timeout: 15), output: terminal.output)
            XCTAssertEqual(result.status, 0, "signal \(number)")
            assertRestored(result.output)
        }
    }
}
