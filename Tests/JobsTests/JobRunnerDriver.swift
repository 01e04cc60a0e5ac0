import Foundation
import Logging
import Queue
import Storage
@testable import Workers
import XCTest

/// Delivers jobs through the worker's own `JobRunner` — payload parsing, registry and argument
/// validation, the ledger check of a redelivery, Sidekiq's retry and dead rules — and hands back
/// what the worker would do with the job, without Redis in between. A test drives retries by
/// delivering the payload of a `.retry` again (its `retry_count` then makes the runner consult the
/// ledger, as a real redelivery does). Stateless; any thread may call it.
struct JobRunnerDriver {
    let runner: JobRunner

    init(registry: JobRegistry, database: JobDatabase) {
        var logger = Logger(label: "job-runner-driver")
        logger.logLevel = .critical
        runner = JobRunner(registry: registry, configuration: WorkerConfiguration(), database: database, logger: logger)
    }

    /// What the runner decided for one delivery.
    enum Delivery: Sendable, CustomStringConvertible {
        /// Done (succeeded, or already applied according to the ledger).
        case ack
        /// Failed; `next` is the payload the worker would put in `retry` (retry_count, error fields), due after `delay`.
        case retry(next: JobPayload, delay: Double)
        /// Failed for good; `payload` is what the worker would put in `dead`.
        case dead(payload: JobPayload)
        /// Dropped (retry disabled).
        case drop

        /// `error_class` of a failed delivery.
        var errorClass: String? { failedPayload?.fields["error_class"]?.stringValue }
        /// `error_message` of a failed delivery.
        var errorMessage: String? { failedPayload?.fields["error_message"]?.stringValue }

        var failedPayload: JobPayload? {
            switch self {
            case .retry(let next, _): return next
            case .dead(let payload): return payload
            case .ack, .drop: return nil
            }
        }

        var description: String {
            switch self {
            case .ack: return "ack"
            case .retry(_, let delay): return "retry in \(delay) s (\(errorClass ?? "?"): \(errorMessage ?? "?"))"
            case .dead: return "dead (\(errorClass ?? "?"): \(errorMessage ?? "?"))"
            case .drop: return "drop"
            }
        }
    }

    /// One delivery of `payload`.
    func deliver(_ payload: JobPayload) throws -> Delivery {
        let job = FetchedJob(queue: payload.fields["queue"]?.stringValue ?? "default", raw: Array(payload.serialized().utf8),
                             workingKey: "driver")
        let parsed = JobRunner.parse(job)
        let started = Clock.now()
        let execution = Execution(job: job, payload: try? parsed.get(), threadID: "driver", startedAt: started,
                                  timeout: runner.timeout(for: try? parsed.get()))
        switch runner.run(job, payload: parsed, execution: execution).settlement {
        case .ack: return .ack
        case .drop: return .drop
        case .retry(let text, let at): return .retry(next: try JobPayload(parsing: text), delay: at - started)
        case .dead(let text): return .dead(payload: try JobPayload(parsing: text))
        case .requeue(let text): throw DriverError("the runner requeued the job: \(text)")
        }
    }

    /// A first delivery of a new job of `className` with `args`.
    func deliver(_ className: String, _ args: [JSONValue]) throws -> Delivery {
        try deliver(try Self.payload(className, args))
    }

    static func payload(_ className: String, _ args: [JSONValue]) throws -> JobPayload {
        try JobClient.payload(for: NewJob(className, args: args), jid: Identifiers.jid(), createdAt: Clock.now(),
                              enqueuedAt: Clock.now())
    }

    struct DriverError: Error, CustomStringConvertible {
        let description: String
        init(_ description: String) { self.description = description }
    }
}

/// Fails unless `delivery` is `.ack` (the job succeeded, or the ledger already held it).
func XCTAssertAck(_ delivery: @autoclosure () throws -> JobRunnerDriver.Delivery, _ message: String = "",
                  file: StaticString = #filePath, line: UInt = #line) {
    do {
        let value = try delivery()
        guard case .ack = value else { return XCTFail("expected ack, got \(value) \(message)", file: file, line: line) }
    } catch {
        XCTFail("delivery threw \(error) \(message)", file: file, line: line)
    }
}
