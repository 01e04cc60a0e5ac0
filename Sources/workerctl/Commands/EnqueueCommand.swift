import ArgumentParser
import Foundation
import WorkersQueue
import WorkersSubjectKeys
import WorkersTelemetry
import Tracing

struct EnqueueCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "enqueue",
        abstract: "Enqueue a job (Sidekiq JSON), now or later.",
        discussion: "Prints the job's jid. Example: workerctl enqueue Sleep --args '[250]' --in 60"
    )

    @OptionGroup var redis: RedisOptions

    @OptionGroup var database: DatabaseOptions

    @Argument(help: "The job class (Sidekiq's \"class\").")
    var className: String

    @Option(name: .long, help: "Queue name.")
    var queue: String = "default"

    @Option(name: .long, help: "Arguments as a JSON array.")
    var args: String = "[]"

    @Option(name: .customLong("in"), help: "Run after this many seconds.")
    var delay: Double?

    @Option(name: .long, help: "Run at this Unix time (seconds).")
    var at: Double?

    @Option(name: .long, help: "Retry policy: true, false or a number of retries.")
    var retry: String = "true"

    @Option(name: .long, help: "Enqueue this many copies (for load tests).")
    var count: Int = 1

    @Option(name: .long, help: "With --count: jobs per round trip (1 = one at a time).")
    var batch: Int = 1000

    @Option(name: .long, help: "With --count: enqueue at this steady rate (jobs per second) instead of as fast as possible.")
    var rate: Double?

    @Option(name: .customLong("round-trips"),
            help: "With --count: write each round trip's duration (seconds, one per line) to this file once done (a benchmark's samples).")
    var roundTripsFile: String?

    @Option(name: .customLong("unique-for"),
            help: "Unique job for this many seconds: if a job with the same class, queue and args is live, print `duplicate of JID` and push nothing.")
    var uniqueFor: Double?

    @Option(name: .customLong("unique-until"), help: "With --unique-for: release the lock at start or success (default).")
    var uniqueUntil: String = "success"

    mutating func validate() throws {
        if delay != nil && at != nil { throw ValidationError("give --in or --at, not both") }
        if let delay, !(delay.isFinite && delay >= 0) { throw ValidationError("--in must be a non-negative number of seconds") }
        if let at, !(at.isFinite && at > 0) { throw ValidationError("--at must be a Unix time in seconds") }
        guard (1...10_000_000).contains(count) else { throw ValidationError("--count must be within 1...10000000") }
        guard (1...10_000).contains(batch) else { throw ValidationError("--batch must be within 1...10000") }
        if let rate, !(rate > 0 && rate <= 1_000_000) { throw ValidationError("--rate must be within 0...1000000 jobs/s") }
        if let uniqueFor {
            guard uniqueFor.isFinite && uniqueFor > 0 else { throw ValidationError("--unique-for must be a positive number of seconds") }
            guard count == 1 else { throw ValidationError("--unique-for enqueues one job: drop --count") }
        }
        if roundTripsFile != nil && (delay != nil || at != nil || uniqueFor != nil) {
            throw ValidationError("--round-trips measures pushes now: not with --in, --at or --unique-for")
        }
        guard UniqueUntil(rawValue: uniqueUntil) != nil else { throw ValidationError("--unique-until must be start or success") }
    }

    /// With tracing on, a `TRACEPARENT` (and `TRACESTATE`) in the environment is the parent of the enqueue
    /// spans (https://opentelemetry.io/docs/specs/otel/context/env-carriers/), so a script's trace goes on
    /// into the job.
    func run() throws {
        guard JobTracing.isEnabled, let header = ProcessInfo.processInfo.environment["TRACEPARENT"],
              let parent = TraceParent(header: header, traceState: ProcessInfo.processInfo.environment["TRACESTATE"])
        else { return try enqueue() }
        var context = ServiceContext.topLevel
        context.traceParent = parent
        try ServiceContext.withValue(context) { try enqueue() }
    }

    private func enqueue() throws {
        let parsedArgs: [JSONValue]
        do {
            guard case .array(let array) = try JSONValue.parse(args) else {
                throw CLIError.usage("--args must be a JSON array, e.g. '[1, \"two\"]'")
            }
            parsedArgs = array
        } catch let error as JSONParseError {
            throw CLIError.usage("--args is not valid JSON: \(error)")
        }
        let retryValue: JSONValue
        switch retry {
        case "true": retryValue = .bool(true)
        case "false": retryValue = .bool(false)
        default:
            guard let n = Int64(retry), n >= 0 else { throw CLIError.usage("--retry must be true, false or a non-negative integer") }
            retryValue = .int(n)
        }
        var job = NewJob(className, args: parsedArgs, queue: queue, retry: retryValue)
        // A class with personal arguments (docs/jobs-privacy.md): encrypted here, under the subject's key.
        if let sealer = try SubjectKeysSetup.sealer(forClass: className, databaseURL: database.resolvedURL()) {
            do { job = try sealer.sealed(job) } catch let error as EnqueueError { throw CLIError.usage(error.description) }
        }
        let replicaWait: ReplicaWait?
        do { replicaWait = try ReplicaWait.from(environment: ProcessInfo.processInfo.environment) } catch {
            throw CLIError.usage("\(error)")
        }
        // Each job goes to its queue's shard (REDIS_SHARDS / QUEUE_SHARDS, docs/sharding.md).
        let client: JobClient
        if let map = try WorkerConfigFile().shardMap(defaultURL: redis.resolvedURL()) {
            client = JobClient(shards: ShardPools(map: map, maxConnections: 1), replicaWait: replicaWait)
        } else {
            client = JobClient(pool: RedisPool(endpoint: try redis.endpoint(), maxConnections: 1), replicaWait: replicaWait)
        }
        if let uniqueFor {
            // Clamped only to stay a `Duration` (NaN, ∞ trap it); `enqueueUnique` refuses what is outside (0, 1 year].
            let policy = UniquePolicy(for: Bounded.duration(seconds: uniqueFor, max: 2 * UniquePolicy.maxSeconds),
                                      until: UniqueUntil(rawValue: uniqueUntil) ?? .success)
            let pushed: UniquePush
            do {
                pushed = try client.enqueueUnique(job, policy: policy, at: at ?? delay.map { Clock.now() + $0 })
            } catch let error as EnqueueError {
                throw CLIError.usage(error.description)
            } catch let error as RedisError {
                throw CLIError.runtime(error.description)
            }
            switch pushed {
            case .enqueued(let jid): print(jid)
            case .duplicate(let jid): print("duplicate of \(jid)")
            }
            return
        }
        let jobs = Array(repeating: job, count: count)
        let jids: [String]
        do {
            if let at {
                jids = try client.enqueueMany(jobs, at: Array(repeating: at, count: count))
            } else if let delay {
                jids = try client.enqueueMany(jobs, at: Array(repeating: Clock.now() + delay, count: count))
            } else {
                var all: [String] = []
                all.reserveCapacity(count)
                let started = Clock.now()
                let step = rate == nil ? batch : 1
                var roundTrips: [Double] = []
                if roundTripsFile != nil { roundTrips.reserveCapacity(jobs.count / step + 1) }
                for start in stride(from: 0, to: jobs.count, by: step) {
                    if let rate {
                        let due = started + Double(start) / rate
                        let wait = due - Clock.now()
                        if wait > 0 { Thread.sleep(forTimeInterval: wait) }
                    }
                    let sent = Clock.now()
                    all += try client.enqueueMany(Array(jobs[start..<min(start + step, jobs.count)]))
                    if roundTripsFile != nil { roundTrips.append(Clock.now() - sent) }
                }
                let elapsed = Clock.now() - started
                if let roundTripsFile {
                    let lines = roundTrips.map { String(format: "%.6f\n", $0) }.joined()
                    guard FileManager.default.createFile(atPath: roundTripsFile, contents: Data(lines.utf8)) else {
                        throw CLIError.runtime("cannot write --round-trips file \(roundTripsFile)")
                    }
                }
                if count > 1 {
                    print(String(format: "enqueued %d jobs in %.3f s: %.0f jobs/s (batch %d)", count, elapsed,
                                 Double(count) / elapsed, step))
                    return
                }
                jids = all
            }
        } catch let error as EnqueueError {
            throw CLIError.usage(error.description)
        } catch let error as RedisError {
            throw CLIError.runtime(error.description)
        }
        if count == 1 { print(jids[0]) } else { print("scheduled \(jids.count) jobs") }
    }
}
