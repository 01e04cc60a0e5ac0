import Foundation
import WorkersHTTP
import WorkersQueue
import WorkersSubjectKeys
import Workers

/// Registers every domain job from the process environment (`docs/jobs-*.md` list the variables).
///
/// An area whose configuration is incomplete is not left out: its classes are registered as
/// `UnusableAreaJob`, which fails *retryably* with the configuration problem as the error
/// (`UnconfiguredJob.NotConfigured`), so the jobs wait in `retry` (and stay visible to operators) until a
/// correctly configured worker runs them, instead of dying as "unknown class".
public enum DomainJobs {
    /// What start-up found for one area.
    public struct AreaStatus: Sendable {
        public let area: String
        public let classNames: [String]
        /// nil when the area is configured and its real jobs are registered.
        public let problem: String?
    }

    /// The argument types of domain classes that declare personal fields (docs/jobs-privacy.md, "Encrypted
    /// arguments"): what `workerctl enqueue` encrypts, and what a Swift producer hands its `SubjectArgumentsSealer`.
    public static let personalArgumentTypes: [any JobArguments.Type] = [ValidateReceiptArguments.self]

    /// How `workerctl jobs` and the dashboard show the domain's jobs: the default redaction, and each class's
    /// declared personal fields hidden (`ArgsRedactor.declaring`).
    public static let argsRedactor = ArgsRedactor.declaring(personalArgumentTypes)

    /// Registers the unconfigured area's stand-in (`UnusableAreaJob`) under each of `classNames`: their jobs retry,
    /// visible in `retry` with `problem`, until a worker that can run them takes them.
    public static func registerStandIns(for classNames: [String], area: String, problem: String,
                                        into registry: inout JobRegistry) {
        for className in classNames {
            registry.register(UnusableAreaJob<UnconfiguredArguments>(failure: UnconfiguredJob.NotConfigured(area: area, problem: problem)),
                              as: className)
        }
    }

    package static func register(into registry: inout JobRegistry, environment: [String: String],
                                redis: RedisPool, http: HTTPClient, shards: ShardPools? = nil,
                                subjectKeys: SubjectKeyStore? = nil) -> [AreaStatus] {
        var statuses: [AreaStatus] = []
        func area(_ name: String, _ classNames: [String], _ body: (inout JobRegistry) throws -> Void) {
            do {
                try body(&registry)
                statuses.append(AreaStatus(area: name, classNames: classNames, problem: nil))
            } catch {
                let problem = "\(error)"
                registerStandIns(for: classNames, area: name, problem: problem, into: &registry)
                statuses.append(AreaStatus(area: name, classNames: classNames, problem: problem))
            }
        }
        area("receipts", ReceiptJobs.classNames) { registry in
            ReceiptJobs.register(into: &registry, configuration: try ReceiptsConfiguration.fromEnvironment(environment),
                                 http: http)
        }
        area("geo", GeoJobs.classNames) { registry in
            try GeoJobs.register(into: &registry, configuration: try GeoConfiguration.fromEnvironment(environment),
                             http: http, redis: redis)
        }
        area("ads", AdsJobs.classNames) { registry in
            AdsJobs.register(into: &registry, configuration: try AdsConfiguration.fromEnvironment(environment),
                             http: http, redis: redis, shards: shards)
        }
        area("privacy", PrivacyJobs.classNames) { registry in
            PrivacyJobs.register(into: &registry, configuration: try PrivacyConfiguration.fromEnvironment(environment),
                                 redis: redis, shards: shards, subjectKeys: subjectKeys)
        }
        return statuses
    }
}
