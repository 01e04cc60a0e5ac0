import WorkersQueue
import Workers

/// The one stand-in for the jobs of an area that cannot run on this worker, registered under each of the area's
/// class names so that its jobs are not lost or killed as "unknown class":
/// - the area is not configured (`DomainJobs.register`: a variable missing or invalid): every run throws
///   `UnconfiguredJob.NotConfigured`; arguments are not read (`UnconfiguredArguments`, an `IgnoredJobArguments`);
/// - the receipts configuration cannot be turned into clients (`ReceiptJobs.register`: an unparsable root
///   certificate): every run throws `StoreUnavailable("receipts", …)`; arguments are the real job's, so a payload
///   that could never run still goes to dead as bad input.
/// Both errors are ordinary ones: the runner retries the job with backoff (25 retries), so it waits in `retry` with
/// the reason, visible to operators, until a worker that can run it takes it.
///
/// Thread rules: an immutable value; `perform` runs on any pool thread.
public struct UnusableAreaJob<Arguments: JobArguments>: Job {
    /// The names of the two stand-ins this type replaced, kept because a payload whose arguments do not decode
    /// names it in its dead reason (`arguments do not fit BrokenReceiptJob: …`). Always registered under an alias
    /// (the real class's name).
    public static var className: String { Arguments.self == UnconfiguredArguments.self ? "UnconfiguredJob" : "BrokenReceiptJob" }
    public static var options: JobOptions { JobOptions(maxRetries: 25) }

    /// What every run throws (see the type's cases).
    let failure: any Error

    public func perform(_ arguments: Arguments, context: JobContext) throws {
        throw failure
    }
}

/// The arguments of an unconfigured area's stand-in: any `args`, never read (`IgnoredJobArguments`).
public struct UnconfiguredArguments: IgnoredJobArguments {
    public static let className = "UnconfiguredJob"
    public init() {}
}

/// The namespace of the error an unconfigured area's jobs fail with. Its path is the `error_class` operators and
/// Ruby tools read (`UnconfiguredJob::NotConfigured`), so it keeps the name of the job type it was nested in.
public enum UnconfiguredJob {
    public struct NotConfigured: Error, CustomStringConvertible {
        public let area: String
        public let problem: String
        public init(area: String, problem: String) {
            self.area = area
            self.problem = problem
        }
        public var description: String { "the \(area) jobs are not configured on this worker: \(problem)" }
    }
}
