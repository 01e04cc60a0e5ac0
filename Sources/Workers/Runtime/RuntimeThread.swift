import Foundation
import WorkersQueue
import Synchronization

/// One named runtime thread (fetcher, settler, heartbeat, housekeeper, watchdog) and the means to
/// stop it and wait for it.
///
/// Thread rules: `start` is called once, by the life cycle; `shouldStop` is read by the thread it
/// started; `requestStop`, `wait` and `stopAndWait` by any other thread (normally shutdown).
final class RuntimeThread: Sendable {
    let name: String
    private let stopRequested = Atomic<Bool>(false)
    private let done = DispatchGroup()

    init(name: String) { self.name = name }

    /// True once `requestStop` has been called; the thread's loop checks it between rounds.
    var shouldStop: Bool { stopRequested.load(ordering: .acquiring) }

    func start(_ body: @escaping @Sendable () -> Void) {
        Self.spawn(name, group: done, body)
    }

    func requestStop() { stopRequested.store(true, ordering: .releasing) }

    /// Waits until the thread's body has returned.
    func wait() { done.wait() }

    /// Waits until the thread's body has returned, at most `timeout` seconds; true if it did.
    func wait(timeout: Double) -> Bool {
        guard timeout.isFinite else { wait(); return true }
        return done.wait(timeout: .now() + max(0, timeout)) == .success
    }

    func stopAndWait() {
        requestStop()
        wait()
    }

    /// Starts `body` on a new named `Thread` (not a Dispatch worker: runtime threads block on I/O),
    /// inside `group` until it returns. The thread names itself once `start()` has returned: a name set before
    /// never reaches the OS on Linux, and one set before Foundation has stored the thread's handle is dropped too
    /// (the same race `BlockingThreads` had), leaving the creator's name in `top -H`, `perf` and core dumps.
    static func spawn(_ name: String, group: DispatchGroup, _ body: @escaping @Sendable () -> Void) {
        group.enter()
        let started = DispatchSemaphore(value: 0)
        let thread = Thread {
            started.wait()
            Thread.current.name = name
            body()
            group.leave()
        }
        thread.start()
        started.signal()
    }
}

/// One runtime thread's own Redis connection: opened on first use, replaced when found broken.
///
/// Thread rules: a value owned by exactly one thread (kept in that thread's loop or in the one
/// object that thread runs), never shared; hiredis contexts are not thread-safe.
struct RedisLink {
    let endpoint: RedisEndpoint
    private(set) var connection: RedisConnection?

    init(endpoint: RedisEndpoint, connection: RedisConnection? = nil) {
        self.endpoint = endpoint
        self.connection = connection
    }

    var isOpen: Bool { connection != nil }

    /// The open connection, or a new one.
    mutating func connected() throws(RedisError) -> RedisConnection {
        if let connection { return connection }
        let fresh = try RedisConnection(endpoint: endpoint)
        connection = fresh
        return fresh
    }

    /// Runs `body` on the connection (opening it if needed). A link found broken is replaced and the
    /// call made once more at once: after a Redis restart every idle connection is dead, which is
    /// not itself an outage. Only for idempotent calls (settle, heartbeat, housekeeping).
    mutating func withRetryOnStaleLink<T>(_ body: (RedisConnection) throws -> T) throws -> T {
        if let existing = connection {
            do { return try body(existing) } catch let error as RedisError where error.isConnectionFailure {
                drop()
            }
        }
        return try body(connected())
    }

    /// Closes and forgets the connection (after an error left it in an unknown state).
    mutating func drop() {
        connection?.close()
        connection = nil
    }
}
