import Foundation
import WorkersHTTP
import WorkersQueue
import WorkersStorage
import Workers

/// Test-only job for progress and cancellation (SteerTests; `workerctl worker --bench-jobs`): counts its runs in
/// Redis (`INCR probe:steer:runs:<jid>`), then takes `steps` steps of `step_ms` ms, each reporting its progress and
/// calling `context.checkCancellation()` — so a cancel stops it at the next step after its process's heartbeat.
///
/// `ledger`: `none` (no database), `inside` (the steps run inside its ledger transaction, which inserts a
/// `probe_rows` row first: a cancel rolls both back), `after` (the transaction commits first, then the steps: a
/// cancel comes after the commit). `fraction` (`"nan"`, `"-1"`, `"2"`, …) with `note_repeat`: instead of the steps'
/// reports, one report of 0.25 `"before"`, then one of that fraction with a note of `note_repeat` copies of a
/// 10-byte text holding control characters. `quiet`: no report at all. `url`: first a GET of it (60 s timeout) that
/// watches the run's cancellation, as the domain jobs' HTTP calls do. Retried on failure (3 times, 100 ms apart),
/// so a cancel settled as a failure would show as a second run.
public struct SteerProbeJob: Job {
    public static let options = JobOptions(maxRetries: 3, backoff: .schedule([.milliseconds(100)]), usesLedger: true)

    public struct Arguments: JobArguments, Equatable {
        public static let className = "SteerProbe"
        public var steps: Int
        public var stepMs: Int
        public var ledger: String?
        public var fraction: String?
        public var noteRepeat: Int?
        public var quiet: Bool?
        public var url: String?
        enum CodingKeys: String, CodingKey {
            case steps, stepMs = "step_ms", ledger, fraction, noteRepeat = "note_repeat", quiet, url
        }
        public init(steps: Int, stepMs: Int, ledger: String? = nil, fraction: String? = nil, noteRepeat: Int? = nil,
                    quiet: Bool? = nil) {
            (self.steps, self.stepMs, self.ledger, self.fraction, self.noteRepeat, self.quiet)
                = (steps, stepMs, ledger, fraction, noteRepeat, quiet)
        }
    }

    /// Ten bytes: letters, a NUL, an escape sequence, a newline and a tab.
    public static let noisyNote = "ab\u{0}\u{1B}[31m\n\t"

    let redis: RedisPool
    let http: HTTPClient

    public func perform(_ arguments: Arguments, context: JobContext) throws {
        _ = try redis.withConnection { try $0.command("INCR", BenchKeys.steerRuns(context.jid)) }
        if let url = arguments.url {
            context.progress(0, note: "calling")
            let cancellation = HTTPCancellation(isCancelled: { [cancellation = context.cancellation] in cancellation.isCancelled })
            _ = try http.send(HTTPRequest(url: url, timeout: .seconds(60), cancellation: cancellation))
        }
        if let text = arguments.fraction {
            context.progress(0.25, note: "before")
            context.progress(Double(text) ?? .nan,
                             note: String(repeating: Self.noisyNote, count: arguments.noteRepeat ?? 1))
        }
        let reports = arguments.fraction == nil && arguments.quiet != true
        func steps() throws {
            for step in 0..<max(0, arguments.steps) {
                if reports { context.progress(Double(step) / Double(max(1, arguments.steps)), note: "step \(step + 1) of \(arguments.steps)") }
                try context.checkCancellation()
                Thread.sleep(forTimeInterval: Double(arguments.stepMs) / 1000)
            }
        }
        func insert() throws {
            try context.transaction { connection in
                try connection.execute("INSERT INTO probe_rows (jid, note) VALUES ($1, 'steer')", [context.jid])
                if arguments.ledger == "inside" { try steps() }
            }
        }
        switch arguments.ledger ?? "none" {
        case "inside": try insert()
        case "after":
            try insert()
            try steps()
        default: try steps()
        }
        _ = try redis.withConnection { try $0.command("INCR", BenchKeys.steerDone(context.jid)) }
    }
}

/// `SteerProbe` as a group-commit class (`JobOptions.groupCommit`: its ledger transaction shares its pool thread's
/// COMMIT), same arguments: a cancel on group commit's fast path.
public struct SteerGroupProbeJob: Job {
    public static let className = "SteerGroupProbe"
    public static let options = JobOptions(maxRetries: 3, backoff: .schedule([.milliseconds(100)]), groupCommit: true)
    let probe: SteerProbeJob
    public func perform(_ arguments: SteerProbeJob.Arguments, context: JobContext) throws {
        try probe.perform(arguments, context: context)
    }
}

public enum SteerProbes {
    /// Registers `SteerProbe` and `SteerGroupProbe`, counting through `redisURL`.
    public static func register(into registry: inout JobRegistry, redisURL: String) {
        guard let pool = try? RedisPool(url: redisURL, maxConnections: 2) else { return }
        let probe = SteerProbeJob(redis: pool, http: HTTPClient(configuration: HTTPClientConfiguration()))
        registry.register(probe)
        registry.register(SteerGroupProbeJob(probe: probe))
    }
}
