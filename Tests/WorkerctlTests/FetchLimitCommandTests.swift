import Foundation
import WorkersQueue
import WorkersTestServices
import XCTest

/// `--fetch-max-payload` and `fetch_max_payload_bytes` reach a real `workerctl worker`'s fetch (the flag wins over the
/// file; out of range: exit 2); the stub is shown by `workerctl jobs ls --state dead` and `jobs show`, its retry is
/// refused, and the worker's log names the jid and size, never the payload (database 165).
final class FetchLimitCommandTests: XCTestCase {
    func testTheFetchLimitComesFromTheFlagOrTheFileAndItsStubIsShownNotRetried() throws {
        let redis = try TestRedis(database: 165)
        try redis.flush()
        let ctl = WorkerctlRunner(redisURL: redis.url)
        let config = FileManager.default.temporaryDirectory.appendingPathComponent("fetch-limit-\(UUID().uuidString).yaml")
        try "fetch_max_payload_bytes: 4096\nqueues:\n  - default\n".write(to: config, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: config) }
        let filler = String(repeating: "z", count: 3000)
        let jid = "f1f1f1f1f1f1f1f1f1f1f1f1"
        let payload = #"{"class":"Noop","args":["\#(filler)"],"jid":"\#(jid)"}"#
        try redis.command("LPUSH", Keys.queue("default"), payload)

        let worker = try ChildProcess(executable: TestServices.workerctl,
                                      arguments: ["worker", "--no-database", "--config", config.path, "--fetch-max-payload", "2048"],
                                      environment: ["REDIS_URL": redis.url])
        defer { worker.signal(SIGKILL) }
        XCTAssertTrue(try eventually(timeout: 15) { try redis.int("ZCARD", Keys.dead) == 1 }, worker.stderr)
        XCTAssertTrue(eventually(timeout: 10) { worker.stderr.contains(jid) }, "one log line names the jid: \(worker.stderr)")
        XCTAssertTrue(worker.stderr.contains("\(payload.utf8.count)"), "and the size: \(worker.stderr)")
        XCTAssertFalse(worker.stderr.contains("zzzzzzzz"), "no payload content in the log")

        let list = try ctl.run("jobs", "ls", "--state", "dead", "--json")
        XCTAssertEqual(list.status, 0, list.stderr)
        let row = try XCTUnwrap(list.object?["jobs"]?.arrayValue?.first?.objectValue)
        XCTAssertEqual(row["jid"]?.stringValue, jid)
        XCTAssertEqual(row["class"]?.stringValue, "Noop")
        let show = try ctl.run("jobs", "show", jid)
        XCTAssertEqual(show.status, 0, show.stderr)
        XCTAssertTrue(show.stdout.contains("PayloadTooLarge"), show.stdout)
        XCTAssertTrue(show.stdout.contains("over the fetch limit of 2048 bytes"), "the flag won over the file: \(show.stdout)")
        let retry = try ctl.run("jobs", "retry", jid)
        XCTAssertNotEqual(retry.status, 0, "a stub has nothing to run: \(retry.stdout)")
        XCTAssertEqual(try redis.int("ZCARD", Keys.dead), 1)
        XCTAssertEqual(try redis.int("LLEN", Keys.queue("default")), 0)

        for refused in [["--fetch-max-payload", "1000"], ["--fetch-max-payload", "-1"]] {
            let result = try ctl.run(["worker", "--no-database"] + refused)
            XCTAssertEqual(result.status, 2, "\(refused): \(result.stderr)")
        }
        try "fetch_max_payload_bytes: 100\n".write(to: config, atomically: true, encoding: .utf8)
        let fromFile = try ctl.run("worker", "--no-database", "--config", config.path)
        XCTAssertEqual(fromFile.status, 2, fromFile.stderr)
    }
}
