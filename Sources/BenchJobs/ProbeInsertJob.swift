import Foundation
import WorkersQueue
import WorkersStorage
import Workers

/// Inserts one row (`probe_rows`: its jid and `args[0]` as a note) through the ledger: the job
/// the exactly-once tests, the chaos run and the PostgreSQL benchmark count. An optional second
/// argument holds the transaction open that many milliseconds (0...10000) before it commits, so the
/// chaos run's kills and restarts land inside open transactions. A group-commit job.
///
/// A bench/test job, not a production one: a worker registers it only when started with the
/// hidden `--bench-jobs` flag, and its table exists only where `BenchSchema.create` made it
/// (`workerctl migrate --bench-tables`, or the tests' setup).
public struct ProbeInsertJob: Job {
    public static let options = JobOptions(usesLedger: true, groupCommit: true)
    public init() {}

    /// `[note?, pauseMilliseconds?]`.
    public struct Arguments: JobArguments, Equatable {
        public static let className = "ProbeInsert"
        public static let layout = JobArgumentsLayout.positional
        public let note: String
        public let pauseMilliseconds: Int
        public init(note: String = "", pauseMilliseconds: Int = 0) { (self.note, self.pauseMilliseconds) = (note, pauseMilliseconds) }
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
        public func encode(to encoder: any Encoder) throws {
            var container = encoder.unkeyedContainer()
            try container.encode(note)
            if pauseMilliseconds != 0 { try container.encode(pauseMilliseconds) }
        }
    }

    public func perform(_ arguments: Arguments, context: JobContext) throws {
        try context.transaction { connection in
            // Its result is not read: on group commit's fast path it goes with the next statement that reads.
            try connection.write("INSERT INTO probe_rows (jid, note) VALUES ($1, $2)", [context.jid, arguments.note])
            if arguments.pauseMilliseconds > 0 { Thread.sleep(forTimeInterval: Double(arguments.pauseMilliseconds) / 1000) }
        }
    }
}
