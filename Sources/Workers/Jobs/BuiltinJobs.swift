import Foundation
import WorkersQueue

/// Does nothing. For smoke tests and benchmarks.
public struct NoopJob: Job {
    public init() {}
    /// Accepts any `args` without reading them (Noop is used with whatever a benchmark sends).
    public struct Arguments: IgnoredJobArguments {
        public static let className = "Noop"
        public init() {}
    }
    public func perform(_ arguments: Arguments, context: JobContext) throws {}
}

/// Sleeps `args[0]` milliseconds (0…3,600,000), a smoke-test stand-in for a slow job. It looks at
/// its cancellation flag at least every `checkInterval` seconds and stops with `Cancelled` once the
/// runtime has abandoned the run (timeout, or shutdown past its deadline), so an abandoned Sleep
/// does not keep its thread for the rest of its hour.
public struct SleepJob: Job {
    public init() {}

    /// `args: [milliseconds]`, 0...3,600,000.
    public struct Arguments: JobArguments, Equatable {
        public static let className = "Sleep"
        public static let layout = JobArgumentsLayout.positional
        public let milliseconds: Int
        public init(milliseconds: Int) throws(JobError) {
            guard (0...3_600_000).contains(milliseconds) else {
                throw .badInput("milliseconds must be within 0...3600000, got \(milliseconds)")
            }
            self.milliseconds = milliseconds
        }
        public init(from decoder: any Decoder) throws {
            var container = try decoder.unkeyedContainer()
            let milliseconds = try container.decode(Int.self)
            if !container.isAtEnd {
                throw DecodingError.dataCorruptedError(in: container, debugDescription: "expected one argument")
            }
            try self.init(milliseconds: milliseconds)
        }
        public func encode(to encoder: any Encoder) throws {
            var container = encoder.unkeyedContainer()
            try container.encode(milliseconds)
        }
    }

    /// Longest sleep between two looks at the cancellation flag.
    static let checkInterval = 0.05

    /// The run was abandoned by the runtime before the sleep was over.
    public struct Cancelled: Error, CustomStringConvertible {
        public let sleptMilliseconds: Int
        public var description: String { "cancelled after \(sleptMilliseconds) ms" }
    }

    public func perform(_ arguments: Arguments, context: JobContext) throws {
        let start = Date()
        let end = start.addingTimeInterval(Double(arguments.milliseconds) / 1000)
        while true {
            let left = end.timeIntervalSinceNow
            if left <= 0 { return }
            if context.isCancelled {
                throw Cancelled(sleptMilliseconds: Int(Date().timeIntervalSince(start) * 1000))
            }
            Thread.sleep(forTimeInterval: min(left, Self.checkInterval))
        }
    }
}

/// Always fails with `args[0]` as the message: to see retries and the dead set at work.
public struct FailJob: Job {
    public init() {}

    /// `args: [message]`.
    public struct Arguments: SingleJobArgument, Equatable {
        public static let className = "Fail"
        public let value: String
        public init(value: String) { self.value = value }
    }

    public struct Failure: Error, CustomStringConvertible {
        public let message: String
        public var description: String { message }
    }

    public func perform(_ arguments: Arguments, context: JobContext) throws {
        throw Failure(message: arguments.value)
    }
}

extension JobRegistry {
    /// A registry holding the built-in smoke-test jobs `Noop`, `Sleep` and `Fail` (README.md, "Enqueueing").
    /// The bench/test job `ProbeInsert` is not among them: see the `BenchJobs` target.
    public static func builtins() -> JobRegistry {
        var registry = JobRegistry()
        registry.register(NoopJob())
        registry.register(SleepJob())
        registry.register(FailJob())
        return registry
    }
}
