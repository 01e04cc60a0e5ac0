import Foundation
import Logging
import Queue
import Synchronization
import TestSupport
import Workers
import XCTest

/// Runs receipt jobs through a real worker: `WorkerProcess` → `JobRunner` (decode, validate, ledger check for a
/// redelivery, retry rules, dead set) against Redis and PostgreSQL, one job at a time, and reports how each
/// delivery settled. Unlike `JobDriver` nothing is called around the runner.
///
/// One instance per test; `run` must not be called from two threads at once (it waits for the worker's next
/// settlement). The worker keeps running until `shutdown()`.
final class ReceiptsRunner {
    /// How the worker settled one delivery.
    enum Settled: Equatable, CustomStringConvertible {
        /// Acknowledged: performed, or skipped because the ledger holds its jid.
        case done
        /// Put in the retry set with this error.
        case retry(errorClass: String, message: String)
        /// Put in the dead set with this error.
        case dead(errorClass: String, message: String)

        var description: String {
            switch self {
            case .done: return "done"
            case .retry(let c, let m): return "retry(\(c): \(m))"
            case .dead(let c, let m): return "dead(\(c): \(m))"
            }
        }
    }

    let redis: TestRedis
    let logs = CapturedLogs()
    private let process: WorkerProcess

    /// Starts a worker with one thread on Redis database `redisDatabase` (emptied) and `database`.
    init(redisDatabase: Int, registry: JobRegistry, database: JobDatabase) throws {
        redis = try TestRedis(database: redisDatabase)
        var configuration = WorkerConfiguration()
        configuration.redisURL = redis.url
        configuration.concurrency = 1
        configuration.heartbeatInterval = 0.2
        configuration.fetcherHeartbeatTTL = 1
        configuration.orphanSweepInterval = 0.3
        configuration.pollInterval = 0.2
        configuration.shutdownTimeout = 2
        let sink = logs
        let logger = Logger(label: "receipts-runner") { _ in CapturingLogHandler(sink: sink) }
        process = try WorkerProcess(configuration: configuration, registry: registry, database: database, logger: logger)
        try process.start()
    }

    func shutdown() { process.shutdown() }

    /// Pushes one delivery of `className` with `argsJSON` (a JSON array) and waits until the worker settled it.
    /// `retryCount` makes it a redelivery out of the retry set (the runner then consults the ledger first).
    /// The settled job is removed from the retry/dead set so that later runs start clean.
    func run(_ className: String, _ argsJSON: String, jid: String = Identifiers.jid(), retryCount: Int? = nil,
             file: StaticString = #filePath, line: UInt = #line) throws -> Settled {
        guard case .array(let args) = try JSONValue.parse(argsJSON) else { throw JobError.badInput("args must be an array") }
        var payload = try JobClient.payload(for: NewJob(className, args: args), jid: jid, createdAt: Clock.now(),
                                            enqueuedAt: Clock.now())
        if let retryCount { payload.fields["retry_count"] = .int(Int64(retryCount)) }
        let before = process.processedCount
        try redis.command("LPUSH", "queue:default", payload.serialized())
        guard eventually(timeout: 60, { process.processedCount > before }) else {
            XCTFail("the worker did not settle \(className) \(jid)", file: file, line: line)
            return .done
        }
        for (key, dead) in [(Keys.dead, true), (Keys.retry, false)] {
            for raw in try redis.command("ZRANGE", key, 0, -1).strings {
                let settled = try JobPayload(parsing: raw)
                guard settled.jid == jid else { continue }
                try redis.command("ZREM", key, raw)
                let errorClass = settled.errorClass ?? "", message = settled.errorMessage ?? ""
                return dead ? .dead(errorClass: errorClass, message: message) : .retry(errorClass: errorClass, message: message)
            }
        }
        return .done
    }
}

/// Assertions on a settlement, each naming exactly the outcome it expects.
enum Settles {
    /// Dead at once (no retry) with `errorClass` and a message starting with `prefix`.
    static func dead(_ settled: ReceiptsRunner.Settled, errorClass: String, messagePrefix prefix: String,
                     file: StaticString = #filePath, line: UInt = #line) {
        guard case .dead(let c, let m) = settled, c == errorClass, m.hasPrefix(prefix) else {
            return XCTFail("expected dead(\(errorClass): \(prefix)…), got \(settled)", file: file, line: line)
        }
    }

    /// In the retry set with `errorClass` and a message starting with `prefix`.
    static func retry(_ settled: ReceiptsRunner.Settled, errorClass: String, messagePrefix prefix: String,
                      file: StaticString = #filePath, line: UInt = #line) {
        guard case .retry(let c, let m) = settled, c == errorClass, m.hasPrefix(prefix) else {
            return XCTFail("expected retry(\(errorClass): \(prefix)…), got \(settled)", file: file, line: line)
        }
    }
}

/// Log records captured from a worker, for asserting which alerts a job raised. Any thread may append.
final class CapturedLogs: Sendable {
    struct Entry: Sendable {
        let level: Logger.Level
        let message: String
        let metadata: [String: String]
    }

    private let entries = Mutex<[Entry]>([])

    func append(_ entry: Entry) { entries.withLock { $0.append(entry) } }
    var all: [Entry] { entries.withLock { $0 } }
    func clear() { entries.withLock { $0.removeAll() } }

    /// The `alert` metadata of every record that has one, in order.
    var alerts: [String] { all.compactMap { $0.metadata["alert"] } }
    /// The `alert` of records marked `security=true`.
    var securityAlerts: [String] { all.filter { $0.metadata["security"] == "true" }.compactMap { $0.metadata["alert"] } }
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
