import Foundation

/// Does nothing. For smoke tests and benchmarks.
public struct NoopJob: Job {
    public static let className = "Noop"
    public init() {}
    public func perform(_ arguments: IgnoredArguments, context: JobContext) throws {}
}

/// Arguments that accept any `args` without reading them (no decoding cost).
protocol AnyArguments { init() }

/// Accepts any `args` (Noop is used with whatever a benchmark sends).
public struct IgnoredArguments: Decodable, Sendable, AnyArguments {
    public init() {}
    public init(from decoder: any Decoder) throws {}
}

/// Sleeps `args[0]` milliseconds (0…3,600,000) without looking at cancellation, so it also
/// stands for a job that hangs.
public struct SleepJob: Job {
    public static let className = "Sleep"
    public init() {}

    public struct Arguments: Decodable, Sendable, ValidatedArguments {
        public let milliseconds: Int
        public init(from decoder: any Decoder) throws {
            var container = try decoder.unkeyedContainer()
            milliseconds = try container.decode(Int.self)
            if !container.isAtEnd {
                throw DecodingError.dataCorruptedError(in: container, debugDescription: "expected one argument")
            }
        }
        public func validate() throws(JobError) {
            guard (0...3_600_000).contains(milliseconds) else {
                throw .badInput("milliseconds must be within 0...3600000, got \(milliseconds)")
            }
        }
    }

    public func perform(_ arguments: Arguments, context: JobContext) throws {
        Thread.sleep(forTimeInterval: Double(arguments.milliseconds) / 1000)
    }
}

/// Always fails with `args[0]` as the message: to see retries and the dead set at work.
public struct FailJob: Job {
    public static let className = "Fail"
    public init() {}

    public struct Failure: Error, CustomStringConvertible {
        public let message: String
        public var description: String { message }
    }

    public func perform(_ arguments: SingleArgument<String>, context: JobContext) throws {
        throw Failure(message: arguments.value)
    }
}

/// Inserts one row (`probe_rows`: its jid and `args[0]` as a note) through the ledger: the job
/// the exactly-once tests, the chaos run and the PostgreSQL benchmark count. An optional second
/// argument holds the transaction open that many milliseconds (0...10000) before it commits, so the
/// chaos run's kills and restarts land inside open transactions. A group-commit job.
public struct ProbeInsertJob: Job {
    public static let className = "ProbeInsert"
    public static let options = JobOptions(usesLedger: true, groupCommit: true)
    public init() {}

    public struct Arguments: Decodable, Sendable {
        public let note: String
        public let pauseMilliseconds: Int
        public init(from decoder: any Decoder) throws {
            var container = try decoder.unkeyedContainer()
            note = container.isAtEnd ? "" : try container.decode(String.self)
            pauseMilliseconds = container.isAtEnd ? 0 : try container.decode(Int.self)
            guard (0...10_000).contains(pauseMilliseconds) else {
                throw DecodingError.dataCorruptedError(in: container, debugDescription:
                    "pause must be within 0...10000 ms, got \(pauseMilliseconds)")
            }
            if !container.isAtEnd {
                throw DecodingError.dataCorruptedError(in: container, debugDescription: "expected at most two arguments")
            }
        }
    }

    public func perform(_ arguments: Arguments, context: JobContext) throws {
        try context.transaction { connection in
            try connection.execute("INSERT INTO probe_rows (jid, note) VALUES ($1, $2)", [context.jid, arguments.note])
            if arguments.pauseMilliseconds > 0 { Thread.sleep(forTimeInterval: Double(arguments.pauseMilliseconds) / 1000) }
        }
    }
}

extension JobRegistry {
    /// A registry holding the built-in `Noop`, `Sleep`, `Fail` and `ProbeInsert` jobs.
    public static func builtins() -> JobRegistry {
        var registry = JobRegistry()
        registry.register(NoopJob())
        registry.register(SleepJob())
        registry.register(FailJob())
        registry.register(ProbeInsertJob())
        return registry
    }
}
