import Foundation
import Logging
import WorkersQueue
import Synchronization
import WorkersTestServices
import Workers
import WorkersTestSupport
import XCTest

/// The one real-worker harness of JobsTests: a `WorkerProcess` inside the test process — fetcher, threads,
/// `JobRunner` (decode, validate, ledger check for a redelivery, retry rules, dead set), heartbeat, orphan
/// recovery — against a test Redis database and PostgreSQL, with timings short enough for tests.
/// For a job driven without Redis use `JobRunnerDriver`; for the `workerctl worker` binary, `ChildProcess`.
enum TestWorker {
    /// Starts a worker process running `registry`'s jobs; the caller shuts it down. `logger`: where the process
    /// and its jobs log (default: nothing below critical).
    static func start(redis: TestRedis, registry: JobRegistry, database: JobDatabase, concurrency: Int,
                      logger: Logger? = nil) throws -> WorkerProcess {
        var quiet = Logger(label: "test-worker")
        quiet.logLevel = .critical
        let process = try WorkerProcess(configuration: .forTests(redis: redis, concurrency: concurrency),
                                        registry: registry, database: database, logger: logger ?? quiet)
        try process.start()
        return process
    }
}

/// A one-thread `TestWorker` that settles one delivery at a time and reports how it settled, as the same
/// `Delivery` the in-process driver returns (assert with `Failure`). Its log records are kept in `logs`.
///
/// One instance per test; `run` must not be called from two threads at once (it waits for the worker's next
/// settlement). The worker keeps running until `shutdown()`.
final class SettlingWorker {
    let redis: TestRedis
    let logs = CapturedLogs()
    private let process: WorkerProcess

    /// Starts a worker with one thread on Redis database `redisDatabase` and `database`.
    init(redisDatabase: Int, registry: JobRegistry, database: JobDatabase, claimedBy file: String = #fileID) throws {
        redis = try TestRedis(database: redisDatabase, claimedBy: file)
        process = try TestWorker.start(redis: redis, registry: registry, database: database, concurrency: 1,
                                       logger: logs.logger(label: "settling-worker"))
    }

    func shutdown() { process.shutdown() }

    /// Pushes one delivery of `className` with `argsJSON` (a JSON array) and waits until the worker settled it.
    /// `retryCount` makes it a redelivery out of the retry set (the runner then consults the ledger first).
    /// The settled job is removed from the retry/dead set so that later runs start clean.
    func run(_ className: String, _ argsJSON: String, jid: String = Identifiers.jid(), retryCount: Int? = nil,
             file: StaticString = #filePath, line: UInt = #line) throws -> Delivery {
        let payload = try JobRunnerDriver.payload(className, try JobRunnerDriver.arguments(argsJSON), jid: jid,
                                                  retryCount: retryCount)
        let before = process.processedCount
        try redis.command("LPUSH", "queue:default", payload.serialized())
        guard eventually(timeout: 60, { process.processedCount > before }) else {
            XCTFail("the worker did not settle \(className) \(jid)", file: file, line: line)
            return .ack
        }
        for key in [Keys.dead, Keys.retry] {
            for raw in try redis.command("ZRANGE", key, 0, -1).strings {
                let settled = try JobPayload(parsing: raw)
                guard settled.jid == jid else { continue }
                let due = try redis.command("ZSCORE", key, raw).double ?? 0
                try redis.command("ZREM", key, raw)
                if key == Keys.dead { return .dead(payload: settled) }
                return .retry(next: settled, delay: due - (Delivery.failedAt(settled) ?? due))
            }
        }
        return .ack
    }
}

/// Log records captured from a worker and its jobs, for asserting which alerts a job raised. Any thread may append.
final class CapturedLogs: Sendable {
    struct Entry: Sendable, CustomStringConvertible {
        let level: Logger.Level
        let message: String
        let metadata: [String: String]
        var description: String { "\(level) \(message)" }
    }

    private let entries = Mutex<[Entry]>([])

    func append(_ entry: Entry) { entries.withLock { $0.append(entry) } }
    var all: [Entry] { entries.withLock { $0 } }
    func clear() { entries.withLock { $0.removeAll() } }

    /// A logger that writes every record at `level` and above here.
    func logger(label: String, level: Logger.Level = .trace) -> Logger {
        let sink = self
        var logger = Logger(label: label) { _ in CapturingLogHandler(sink: sink) }
        logger.logLevel = level
        return logger
    }

    /// The `alert` metadata of every record that has one, in order.
    var alerts: [String] { all.compactMap { $0.metadata["alert"] } }
    /// The `alert` of records marked `security=true`.
    var securityAlerts: [String] { all.filter { $0.metadata["security"] == "true" }.compactMap { $0.metadata["alert"] } }
    /// Records whose "<level> <message>" contains `text`.
    func messages(containing text: String) -> [String] { all.map(\.description).filter { $0.contains(text) } }
}

/// A `LogHandler` that keeps every record in a `CapturedLogs`.
struct CapturingLogHandler: LogHandler {
    let sink: CapturedLogs
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .trace

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        var merged = metadata
        if let explicit = event.metadata { merged.merge(explicit) { $1 } }
        sink.append(.init(level: event.level, message: event.message.description,
                          metadata: merged.mapValues { "\($0)" }))
    }
}
