import Foundation
import WorkersQueue
import Workers

/// A test job for batches: `args = [outcome, milliseconds]`. It sleeps `milliseconds` (0...10000,
/// checking its cancellation flag), then `ok` succeeds, `flaky` fails on its first attempt and
/// succeeds on the next, `doomed` always fails (enqueue it with a small `retry` to see it die).
/// Retries come back at once (backoff 0 s), so a test's batch finishes within a few poll
/// intervals. No database: a run repeated after a SIGKILL really runs twice, which is what the
/// batch counting must absorb. Registered only with `--bench-jobs`, like `ProbeInsert`.
public struct BatchProbeJob: Job {
    public static let options = JobOptions(maxRetries: 25, backoff: .schedule([.zero]), timeout: .seconds(60))
    public init() {}

    /// `[outcome, milliseconds?]`; a value is valid by construction (`JobError.badInput` otherwise).
    public struct Arguments: JobArguments, Equatable {
        public static let className = "BatchProbe"
        public static let layout = JobArgumentsLayout.positional
        public let outcome: String
        public let milliseconds: Int
        public init(outcome: String, milliseconds: Int = 0) throws(JobError) {
            guard ["ok", "flaky", "doomed"].contains(outcome) else { throw .badInput("outcome must be ok, flaky or doomed") }
            guard (0...10_000).contains(milliseconds) else { throw .badInput("milliseconds must be within 0...10000") }
            self.outcome = outcome
            self.milliseconds = milliseconds
        }
        public init(from decoder: any Decoder) throws {
            var container = try decoder.unkeyedContainer()
            let outcome = try container.decode(String.self)
            let milliseconds = container.isAtEnd ? 0 : try container.decode(Int.self)
            if !container.isAtEnd {
                throw DecodingError.dataCorruptedError(in: container, debugDescription: "expected at most two arguments")
            }
            try self.init(outcome: outcome, milliseconds: milliseconds)
        }
        public func encode(to encoder: any Encoder) throws {
            var container = encoder.unkeyedContainer()
            try container.encode(outcome)
            try container.encode(milliseconds)
        }
    }

    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    public func perform(_ arguments: Arguments, context: JobContext) throws {
        let end = Date().addingTimeInterval(Double(arguments.milliseconds) / 1000)
        while Date() < end, !context.isCancelled { Thread.sleep(forTimeInterval: 0.005) }
        switch arguments.outcome {
        case "flaky" where context.attempt == 1: throw Failure(description: "flaky: fails on its first attempt")
        case "doomed": throw Failure(description: "doomed: always fails")
        default: return
        }
    }
}
