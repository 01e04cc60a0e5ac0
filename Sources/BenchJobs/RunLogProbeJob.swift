import Foundation
import WorkersQueue
import Workers

/// Records every run outside the ledger and outside Redis: at the start of `perform` it appends its jid as one line
/// to `<folder>/runs.<pid>` (one write(2), the `PickupProbe` way), then fails when its second argument is `"fail"`
/// (a plain error: retried, or dead with `retry: 0`). A third argument pauses the run that many milliseconds first
/// (0…1000), so a test can set the drain's pace. A test reads the files to tell each job ran once, none missing,
/// none twice — whatever Redis refused meanwhile (docs/redis-full.md).
///
/// A bench job: registered only with `--bench-jobs`. Any pool thread may run it.
public struct RunLogProbeJob: Job {
    /// `[folder, "ok" | "fail", pause milliseconds?]`.
    public struct Arguments: JobArguments, Equatable {
        public static let className = "RunLogProbe"
        public static let layout = JobArgumentsLayout.positional
        /// Versioned, for the rolling-deploy tests: this release writes version 2 and decodes 1 and 2
        /// (`workerctl worker --bench-args-version 1` stands in for a release that decodes only 1).
        public static let argumentsVersion: Int? = 2
        public static let decodableArgumentsVersions: ClosedRange<Int>? = 1...2
        public let folder: String
        public let outcome: String
        public let pauseMilliseconds: Int

        public init(folder: String, outcome: String = "ok", pauseMilliseconds: Int = 0) {
            self.folder = folder
            self.outcome = outcome
            self.pauseMilliseconds = pauseMilliseconds
        }

        public init(from decoder: any Decoder) throws {
            var container = try decoder.unkeyedContainer()
            folder = try container.decode(String.self)
            outcome = container.isAtEnd ? "ok" : try container.decode(String.self)
            pauseMilliseconds = container.isAtEnd ? 0 : min(max(try container.decode(Int.self), 0), 1000)
        }

        public func encode(to encoder: any Encoder) throws {
            var container = encoder.unkeyedContainer()
            try container.encode(folder)
            try container.encode(outcome)
            try container.encode(pauseMilliseconds)
        }
    }

    /// The failure a `"fail"` run throws.
    public struct AskedToFail: Error, CustomStringConvertible {
        public var description: String { "RunLogProbe asked to fail" }
    }

    public init() {}

    public func perform(_ arguments: Arguments, context: JobContext) throws {
        if arguments.pauseMilliseconds > 0 { Thread.sleep(forTimeInterval: Double(arguments.pauseMilliseconds) / 1000) }
        try PickupSamples.append(line: (context.payload.jid ?? "-") + "\n", folder: arguments.folder, file: "runs")
        if arguments.outcome == "fail" { throw AskedToFail() }
    }
}
