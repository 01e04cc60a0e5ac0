import Foundation
import WorkersHTTP
import WorkersQueue
import Workers

/// An HTTP-bound bench job (bench/http-bound.sh, issue 38 goal 2): records its pickup latency as `PickupProbe` does,
/// then makes one GET to `url` (bench/slow_http.c answers after a fixed delay) through the runtime's libcurl client,
/// as the domain's store and geocoding calls do; a status other than 200 fails the run.
///
/// A bench job: registered only with `--bench-jobs`. Any pool thread may run it; the client (its pool of easy
/// handles and shared connection cache) is one per process.
public struct HttpProbeJob: Job {
    /// `[url, folder]`.
    public struct Arguments: JobArguments, Equatable {
        public static let className = "HttpProbe"
        public static let layout = JobArgumentsLayout.positional
        public let url: String
        public let folder: String

        public init(url: String, folder: String) {
            self.url = url
            self.folder = folder
        }

        public init(from decoder: any Decoder) throws {
            var container = try decoder.unkeyedContainer()
            url = try container.decode(String.self)
            folder = try container.decode(String.self)
        }

        public func encode(to encoder: any Encoder) throws {
            var container = encoder.unkeyedContainer()
            try container.encode(url)
            try container.encode(folder)
        }
    }

    /// The process's client for every run of this job.
    private static let client = HTTPClient()

    public init() {}

    public func perform(_ arguments: Arguments, context: JobContext) throws {
        if let enqueuedAt = context.payload.enqueuedAt {
            try PickupSamples.record(Clock.now() - enqueuedAt, folder: arguments.folder)
        }
        let response = try Self.client.get(arguments.url)
        guard response.status == 200 else { throw UnexpectedStatus(status: response.status) }
    }

    /// The bench server answered something else than 200.
    public struct UnexpectedStatus: Error, CustomStringConvertible {
        public let status: Int
        public var description: String { "HTTP \(status)" }
    }
}
