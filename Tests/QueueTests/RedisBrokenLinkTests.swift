import Foundation
import WorkersQueue
import WorkersTestServices
import XCTest

/// A server that drops a link while we write to it (`CLIENT KILL`, an idle `timeout`, a proxy's reset, a restart):
/// the write fails with EPIPE and the command throws `.io`; SIGPIPE, whose default action ends the process, is
/// blocked on every thread that talks to Redis (CHiredis's shim) and consumed after the failure.
final class RedisBrokenLinkTests: XCTestCase {
    private func assertADroppedLinkUnderAWriteIsAnError(url: String, file: StaticString = #filePath, line: UInt = #line) throws {
        let victim = try RedisConnection(url: url)
        let id = try XCTUnwrap(victim.command("CLIENT", "ID").integer)
        try RedisConnection(url: url).command("CLIENT", "KILL", "ID", id)
        Thread.sleep(forTimeInterval: 0.2)
        // Megabytes after the server closed: the first write draws a reset, the next ones EPIPE (and SIGPIPE).
        let big = [UInt8](repeating: 65, count: 8_000_000)
        var failures = 0
        for _ in 0..<3 {
            do { _ = try victim.pipeline([["SET", "a", big], ["SET", "b", big]]) } catch let error as RedisError {
                XCTAssertTrue(error.isConnectionFailure, "\(error)", file: file, line: line)
                failures += 1
                break
            }
        }
        XCTAssertEqual(failures, 1, "the dropped link was noticed", file: file, line: line)
        var pending = sigset_t()
        sigemptyset(&pending)
        sigpending(&pending)
        XCTAssertEqual(sigismember(&pending, SIGPIPE), 0, "no SIGPIPE left pending on this thread", file: file, line: line)
        XCTAssertEqual(try victim.command("PING").string, "PONG", "the next command reconnects", file: file, line: line)
    }

    func testAPlainLinkDroppedUnderAWriteIsAnIOErrorNotTheEndOfTheProcess() throws {
        let port = try TestServices.closedPort()
        let server = try TestServices.startRedisServer(port: port)
        defer { server.signal(SIGKILL); server.wait() }
        XCTAssertTrue(eventually { (try? RedisConnection(url: "redis://127.0.0.1:\(port)/0")) != nil })
        try assertADroppedLinkUnderAWriteIsAnError(url: "redis://127.0.0.1:\(port)/0")
    }

    func testATLSLinkDroppedUnderAWriteIsAnIOErrorNotTheEndOfTheProcess() throws {
        let certificates = try TLSTestCertificates()
        defer { certificates.remove() }
        let server = try TLSRedisServer(certificates: certificates)
        defer { server.stop() }
        try assertADroppedLinkUnderAWriteIsAnError(url: server.url())
    }
}
