import Foundation
import WorkersQueue
import WorkersTestServices
import XCTest

/// The reconnect rule holds for the whole process by construction (`ConnectThrottle`): whatever a loop does — here
/// four threads reconnecting without any pause — a server that does not answer gets a few attempts a second, and a
/// server that answers again is reached by every thread at once.
final class ConnectThrottleTests: XCTestCase {
    func testThreadsReconnectingWithoutPauseReachAServerThatHangsUpAFewTimesASecond() throws {
        let port = try TestServices.closedPort()
        let listener = try AcceptCounter(port: port)
        defer { listener.stop() }
        let url = "redis://127.0.0.1:\(port)/0"
        let started = Date()
        let errors = Errors()
        Self.onThreads(4) {
            while Date().timeIntervalSince(started) < 3 {
                do { try RedisConnection(url: url).command("PING") } catch { errors.add("\(error)") }
            }
        }
        let seconds = Date().timeIntervalSince(started)
        let lastError = errors.all.last ?? ""
        // 0.05-0.1 s after the first failure, doubling to 1-2 s: about 6 attempts in 3 s, whatever the callers do.
        XCTAssertLessThanOrEqual(Double(listener.count), 4 * seconds, "\(listener.count) attempts in \(seconds) s")
        XCTAssertGreaterThan(listener.count, 1, "the server was tried again")
        // A refused attempt still says why the server is unreachable.
        XCTAssertTrue(lastError.contains("127.0.0.1:\(port)"), lastError)
        XCTAssertTrue(lastError.contains("reconnect backoff") || lastError.contains("closed"), lastError)

        // The server answers again: once one attempt got an answer, every thread connects at once.
        listener.stop()
        let server = try TestServices.startRedisServer(port: port)
        defer { server.signal(SIGKILL) }
        XCTAssertTrue(eventually { (try? RedisConnection(url: url).command("PING")) != nil })
        let failures = Errors()
        let together = Barrier(8)
        Self.onThreads(8) {
            together.wait()
            do { try RedisConnection(url: url).command("PING") } catch { failures.add("\(error)") }
        }
        XCTAssertEqual(failures.all, [], "a server that answers is never held back")
    }

    /// Runs `body` on `count` new threads at once and waits for all of them.
    static func onThreads(_ count: Int, _ body: @escaping @Sendable () -> Void) {
        let group = DispatchGroup()
        for _ in 0..<count {
            group.enter()
            Thread { body(); group.leave() }.start()
        }
        group.wait()
    }

    /// Error texts collected from several threads.
    final class Errors: @unchecked Sendable {
        private let lock = NSLock()
        private var texts: [String] = []
        func add(_ text: String) { lock.withLock { texts.append(text) } }
        var all: [String] { lock.withLock { texts } }
    }
}
