import Foundation
import Logging

/// Settings of a `PostgresPool`.
public struct PostgresPoolConfiguration: Sendable {
    /// `postgres://...` URL every connection uses.
    public var url: String
    /// Most sessions open at once (checked out + idle). Must be at least 1.
    public var maxConnections: Int
    /// How long `withConnection` waits for a free connection before throwing `.poolTimeout`.
    public var checkoutTimeout: Duration
    /// First delay between failed connection attempts; doubles per failure up to `maxReconnectDelay`.
    public var initialReconnectDelay: Duration
    public var maxReconnectDelay: Duration
    /// An idle connection unused for longer than this is probed with `SELECT 1` before it is handed out.
    public var validationInterval: Duration
    public var connectionOptions: PostgresConnectionOptions

    public init(url: String, maxConnections: Int = 10, checkoutTimeout: Duration = .seconds(10),
                initialReconnectDelay: Duration = .milliseconds(100), maxReconnectDelay: Duration = .seconds(5),
                validationInterval: Duration = .seconds(30), connectionOptions: PostgresConnectionOptions = .init()) {
        self.url = url
        self.maxConnections = max(1, maxConnections)
        self.checkoutTimeout = checkoutTimeout
        self.initialReconnectDelay = initialReconnectDelay
        self.maxReconnectDelay = maxReconnectDelay
        self.validationInterval = validationInterval
        self.connectionOptions = connectionOptions
    }
}

/// A fixed-size pool of `PostgresConnection`s shared by the worker threads.
///
/// ## Threading
/// Thread-safe. All mutable state (`idle`, `openCount`, backoff, `isShutDown`) lives in `State` and is read
/// or written only while holding `condition` (an `NSCondition`), which is also what waiting checkouts
/// sleep on — hence `@unchecked Sendable`. Connecting, probing and closing sessions happen outside the
/// lock. A connection in `idle` belongs to the pool; one handed to a `withConnection` body belongs to that
/// call's thread until the body returns (see `PostgresConnection`'s ownership invariant).
///
/// ## Health
/// - An idle connection is checked before hand-out (`checkAlive()`, plus `SELECT 1` when it sat idle longer
///   than `validationInterval`); a dead one is closed and replaced.
/// - A connection whose body failed with a connection error (or that libpq reports as broken) is closed,
///   and so are all idle ones (a lost session usually means the server restarted).
/// - Opening connections backs off exponentially after failures, so a restarting server is not hammered;
///   the first successful connect resets the backoff. Callers see `.connection` errors meanwhile, which
///   are `isTransient`: the worker retries the job later instead of sending it to `dead`.
public final class PostgresPool: @unchecked Sendable {
    public let configuration: PostgresPoolConfiguration
    private let logger: Logger
    private let condition = NSCondition()
    private var state = State()  // guarded by `condition`

    private struct Idle {
        let connection: PostgresConnection
        let since: ContinuousClock.Instant
    }

    private struct State {
        var idle: [Idle] = []
        /// Connections that exist or are being opened (idle + checked out + connecting).
        var openCount = 0
        var isShutDown = false
        var consecutiveConnectFailures = 0
        var connectAttempts = 0
        var nextConnectAttempt: ContinuousClock.Instant?
        var lastConnectError: PostgresError?
    }

    /// A snapshot of the pool's counters.
    public struct Statistics: Sendable, Equatable {
        public var open: Int
        public var idle: Int
        /// Connections this pool has tried to open since it was created (successful or not).
        public var connectAttempts: Int
        public var inUse: Int { open - idle }
    }

    public init(configuration: PostgresPoolConfiguration, logger: Logger = Logger(label: "storage.pool")) {
        self.configuration = configuration
        self.logger = logger
    }

    public convenience init(url: String, maxConnections: Int = 10) {
        self.init(configuration: PostgresPoolConfiguration(url: url, maxConnections: maxConnections))
    }

    deinit {
        for entry in state.idle { entry.connection.close() }
    }

    public var statistics: Statistics {
        condition.lock()
        defer { condition.unlock() }
        return Statistics(open: state.openCount, idle: state.idle.count, connectAttempts: state.connectAttempts)
    }

    /// Checks a connection out (waiting up to `checkoutTimeout`), runs `body` with it on the calling thread,
    /// and returns it to the pool — or closes it if it broke. The connection must not escape `body`.
    ///
    /// Throws `.poolTimeout` when no connection frees up in time, `.connection` when none can be opened,
    /// `.poolClosed` after `shutdown()`, or whatever `body` throws.
    @discardableResult
    public func withConnection<T>(_ body: (PostgresConnection) throws -> T) throws -> T {
        let connection = try checkout()
        let value: T
        do {
            value = try body(connection)
        } catch {
            checkin(connection, failure: error)
            throw error
        }
        checkin(connection, failure: nil)
        return value
    }

    /// Closes idle connections and refuses further checkouts; checked-out ones close when returned.
    public func shutdown() {
        condition.lock()
        state.isShutDown = true
        let idle = state.idle
        state.idle.removeAll()
        state.openCount -= idle.count
        condition.broadcast()
        condition.unlock()
        for entry in idle { entry.connection.close() }
    }

    // MARK: - Checkout

    private enum Step {
        case reuse(Idle)
        case open
    }

    private func checkout() throws -> PostgresConnection {
        let deadline = ContinuousClock.now + configuration.checkoutTimeout
        while true {
            let step = try nextStep(deadline: deadline)
            switch step {
            case .reuse(let entry):
                if isHealthy(entry) { return entry.connection }
                logger.debug("discarding dead idle connection", metadata: ["pid": "\(entry.connection.backendPID)"])
                entry.connection.close()
                releaseSlot()
            case .open:
                do {
                    let connection = try PostgresConnection(url: configuration.url, options: configuration.connectionOptions)
                    recordConnectSuccess()
                    return connection
                } catch {
                    recordConnectFailure(error)
                    releaseSlot()
                    throw error
                }
            }
        }
    }

    /// Under the lock: take an idle connection, or reserve a slot to open one, or wait.
    private func nextStep(deadline: ContinuousClock.Instant) throws -> Step {
        condition.lock()
        defer { condition.unlock() }
        while true {
            if state.isShutDown {
                throw PostgresError(category: .poolClosed, message: "the connection pool was shut down")
            }
            if let entry = state.idle.popLast() {
                return .reuse(entry)
            }
            let now = ContinuousClock.now
            if state.openCount < configuration.maxConnections {
                if let notBefore = state.nextConnectAttempt, now < notBefore {
                    // Backing off after failed connects: wait for the backoff, unless our deadline comes first.
                    if deadline <= notBefore {
                        throw state.lastConnectError
                            ?? PostgresError(category: .connection, message: "database unavailable (backing off)")
                    }
                    _ = condition.wait(until: Date(timeIntervalSinceNow: (notBefore - now).seconds))
                    continue
                }
                state.openCount += 1
                state.connectAttempts += 1
                // Let other checkouts wait for this attempt's outcome instead of piling on while failing.
                if state.consecutiveConnectFailures > 0 {
                    state.nextConnectAttempt = now + configuration.initialReconnectDelay
                }
                return .open
            }
            if now >= deadline {
                throw PostgresError(category: .poolTimeout,
                                    message: "no database connection free within \(configuration.checkoutTimeout) (max \(configuration.maxConnections))")
            }
            _ = condition.wait(until: Date(timeIntervalSinceNow: (deadline - now).seconds))
        }
    }

    private func isHealthy(_ entry: Idle) -> Bool {
        guard entry.connection.checkAlive(), !entry.connection.isInTransaction else { return false }
        if ContinuousClock.now - entry.since > configuration.validationInterval {
            return (try? entry.connection.query("SELECT 1")) != nil
        }
        return true
    }

    // MARK: - Checkin

    private func checkin(_ connection: PostgresConnection, failure: (any Error)?) {
        var reusable = connection.isOpen && !(failure.map { PostgresError.isConnectionFailure($0) } ?? false)
        if reusable, connection.isInTransaction {
            // A body that left a transaction open (e.g. it issued BEGIN itself): never leak it to the next job.
            _ = try? connection.execute("ROLLBACK")
            reusable = connection.isOpen && !connection.isInTransaction
        }
        let connectionLost = !reusable && ((failure.map { PostgresError.isConnectionFailure($0) } ?? false) || !connection.isOpen)

        condition.lock()
        var toClose: [PostgresConnection] = []
        if reusable && !state.isShutDown {
            state.idle.append(Idle(connection: connection, since: .now))
        } else {
            toClose.append(connection)
            state.openCount -= 1
        }
        if connectionLost {
            // The server probably restarted: every idle session is likely dead too.
            toClose += state.idle.map(\.connection)
            state.openCount -= state.idle.count
            state.idle.removeAll()
        }
        condition.broadcast()
        condition.unlock()

        if connectionLost {
            logger.warning("database connection lost; closing \(toClose.count) connection(s)",
                           metadata: ["error": "\(failure.map { "\($0)" } ?? "broken connection")"])
        }
        for connection in toClose { connection.close() }
    }

    private func releaseSlot() {
        condition.lock()
        state.openCount -= 1
        condition.broadcast()
        condition.unlock()
    }

    private func recordConnectSuccess() {
        condition.lock()
        if state.consecutiveConnectFailures > 0 {
            logger.info("database reachable again", metadata: ["after_failures": "\(state.consecutiveConnectFailures)"])
        }
        state.consecutiveConnectFailures = 0
        state.nextConnectAttempt = nil
        state.lastConnectError = nil
        condition.broadcast()
        condition.unlock()
    }

    private func recordConnectFailure(_ error: any Error) {
        condition.lock()
        state.consecutiveConnectFailures += 1
        let exponent = min(state.consecutiveConnectFailures - 1, 20)
        var delay = configuration.initialReconnectDelay * (1 << exponent)
        if delay > configuration.maxReconnectDelay { delay = configuration.maxReconnectDelay }
        // Up to 20 % jitter so that many processes do not reconnect in lockstep.
        delay += delay * Double.random(in: 0...0.2)
        state.nextConnectAttempt = .now + delay
        state.lastConnectError = error as? PostgresError
            ?? PostgresError(category: .connection, message: "\(error)")
        let failures = state.consecutiveConnectFailures
        condition.unlock()
        logger.warning("cannot connect to the database", metadata: [
            "url": "\(PostgresURL.redacted(configuration.url))", "failures": "\(failures)",
            "retry_in": "\(delay)", "error": "\(error)",
        ])
    }
}

extension Duration {
    /// The duration in seconds as a Double.
    var seconds: Double {
        let parts = components
        return Double(parts.seconds) + Double(parts.attoseconds) / 1e18
    }
}
