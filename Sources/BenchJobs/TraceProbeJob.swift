import Foundation
import WorkersHTTP
import WorkersQueue
import Workers
import WorkersStorage

/// Test-only job for the tracing tests (TracingTests; `workerctl worker --bench-jobs`): one HTTP GET of
/// `args[0]`, then its ledger transaction (`probe_rows` row with the HTTP status as note), then, when
/// `args[1]` names a class, enqueues that class with `args[2...]` — so one run shows every child span kind and
/// the context carried on to a follow-up job. A non-2xx answer or a transport error fails the run (retried).
public struct TraceProbeJob: Job {
    public static let options = JobOptions(maxRetries: 1, usesLedger: true)

    let http: HTTPClient
    let client: JobClient

    public init(http: HTTPClient, redis: RedisPool) {
        self.http = http
        self.client = JobClient(pool: redis)
    }

    public struct Arguments: JobArguments, Equatable {
        public static let className = "TraceProbe"
        public static let layout = JobArgumentsLayout.positional
        public let url: String
        public let followUp: String?
        public let followUpArgs: [JSONValue]
        public init(from decoder: any Decoder) throws {
            var container = try decoder.unkeyedContainer()
            url = try container.decode(String.self)
            followUp = container.isAtEnd ? nil : try container.decode(String.self)
            var rest: [JSONValue] = []
            while !container.isAtEnd { rest.append(.string(try container.decode(String.self))) }
            followUpArgs = rest
        }
        public func encode(to encoder: any Encoder) throws {
            var container = encoder.unkeyedContainer()
            try container.encode(url)
            if let followUp {
                try container.encode(followUp)
                for argument in followUpArgs { try container.encode(argument.stringValue ?? argument.serialized()) }
            }
        }
    }

    public func perform(_ arguments: Arguments, context: JobContext) throws {
        let response = try http.get(arguments.url)
        guard (200..<300).contains(response.status) else { throw JobError.retryAfter(.zero, reason: "HTTP \(response.status)") }
        try context.transaction { connection in
            try connection.execute("INSERT INTO probe_rows (jid, note) VALUES ($1, $2)",
                                   [context.jid, "http \(response.status)"])
        }
        if let followUp = arguments.followUp {
            try client.enqueue(NewJob(followUp, args: arguments.followUpArgs, queue: context.queue))
        }
    }
}

public enum TraceProbes {
    /// Registers `TraceProbe`, enqueuing follow-ups through `redisURL`.
    public static func register(into registry: inout JobRegistry, redisURL: String) {
        guard let pool = try? RedisPool(url: redisURL, maxConnections: 2) else { return }
        registry.register(TraceProbeJob(http: HTTPClient(configuration: HTTPClientConfiguration()), redis: pool))
    }
}
