import Foundation
import WorkersQueue
import Synchronization

/// This process's per-class execution figures since the last flush (runs, failed runs, milliseconds and the
/// duration histogram of successful runs), written to Redis by the heartbeat once per beat in Sidekiq 8's metrics
/// layout (`ClassMetricsLayout`; read by `ClassMetrics.read`, `workerctl stats --classes`, the dashboard and
/// Sidekiq Web's Metrics tab).
///
/// Cost: recording is in memory — a dictionary lookup of the class name and a few increments under one of
/// `stripeCount` locks picked by the calling thread, so pool threads rarely contend; a flush is one pipelined round
/// trip per beat whose size is bounded by the registered classes (+ `_other`), never by the jobs run.
///
/// Thread rules: `record` from any pool thread (through `ClassMetricsMiddleware`); `flush` from the heartbeat
/// thread that owns the connection. Invariant: a run is counted in exactly one flush (the stripes are swapped out
/// under their locks); a flush that fails loses its figures (metrics are best effort; jobs are unaffected).
final class ClassMetricsRecorder: Sendable {
    /// Registered class name → index; every other class counts under `names.count - 1` (`_other`).
    private let indexByClass: [String: Int]
    private let names: [String]
    private let stripes: [Stripe]
    /// A power of two: `record` picks a stripe from the top 3 bits of a hash.
    static let stripeCount = 8

    /// One lock's share of the figures (a class: `Mutex` cannot be copied into an array).
    private final class Stripe: Sendable {
        let tally: Mutex<Tally>
        init(classes: Int) { tally = Mutex(Tally(classes: classes)) }
    }

    /// Figures for every class, indexed as `names`.
    struct Tally: Sendable {
        var runs: [Int]
        var failed: [Int]
        var milliseconds: [Double]
        /// `classes × buckets` counters, row per class.
        var histogram: [UInt32]

        init(classes: Int) {
            runs = Array(repeating: 0, count: classes)
            failed = runs
            milliseconds = Array(repeating: 0, count: classes)
            histogram = Array(repeating: 0, count: classes * ClassMetricsLayout.bucketUpperBoundsMs.count)
        }

        mutating func add(_ other: Tally) {
            for i in runs.indices {
                runs[i] += other.runs[i]
                failed[i] += other.failed[i]
                milliseconds[i] += other.milliseconds[i]
            }
            for i in histogram.indices { histogram[i] = histogram[i].addingReportingOverflow(other.histogram[i]).partialValue }
        }
    }

    init(registeredClasses: [String]) {
        let names = registeredClasses.filter { $0 != ClassMetricsLayout.otherClass } + [ClassMetricsLayout.otherClass]
        self.names = names
        indexByClass = Dictionary(uniqueKeysWithValues: names.dropLast().enumerated().map { ($1, $0) })
        stripes = (0..<Self.stripeCount).map { _ in Stripe(classes: names.count) }
    }

    /// Counts one run of `className` (a registered class, else `_other`); a successful run's `milliseconds` go to
    /// its total and histogram (Sidekiq leaves failed runs' durations out: they say little about the job's speed).
    func record(className: String, failed: Bool, milliseconds: Double) {
        let index = indexByClass[className] ?? names.count - 1
        let bucket = failed ? 0 : ClassMetricsLayout.bucket(milliseconds: milliseconds)
        // Fibonacci hashing of the thread's id (thread ids are stack addresses megabytes apart: their low bits agree).
        let stripe = Int((UInt(pthread_self()) &* 0x9E37_79B9_7F4A_7C15) >> 61)
        stripes[stripe].tally.withLock { tally in
            tally.runs[index] += 1
            if failed {
                tally.failed[index] += 1
            } else {
                tally.milliseconds[index] += milliseconds.isFinite ? max(0, milliseconds) : 0
                let cell = index * ClassMetricsLayout.bucketUpperBoundsMs.count + bucket
                tally.histogram[cell] = tally.histogram[cell] &+ 1
            }
        }
    }

    /// Takes every stripe's figures, leaving them empty.
    func drain() -> Tally {
        var total = Tally(classes: names.count)
        for stripe in stripes {
            let taken = stripe.tally.withLock { tally in
                let taken = tally
                tally = Tally(classes: names.count)
                return taken
            }
            total.add(taken)
        }
        return total
    }

    /// The commands that add `tally` to Redis for the minute of `now` (none when nothing ran).
    func commands(for tally: Tally, now: Double) -> [[any RedisArgument]] {
        let minute = ClassMetricsLayout.Minute(epochSeconds: now)
        let shortKey = ClassMetricsLayout.counters(minute.minute)
        let midKey = ClassMetricsLayout.counters(minute.tenMinutes)
        let short = ClassMetricsLayout.minuteTTLSeconds, mid = ClassMetricsLayout.tenMinuteTTLSeconds
        let buckets = ClassMetricsLayout.bucketUpperBoundsMs.count
        var commands: [[any RedisArgument]] = []
        for (index, name) in names.enumerated() where tally.runs[index] > 0 {
            for key in [shortKey, midKey] {
                commands.append(["HINCRBY", key, ClassMetricsLayout.runsField(name), tally.runs[index]])
                if tally.failed[index] > 0 {
                    commands.append(["HINCRBY", key, ClassMetricsLayout.failedField(name), tally.failed[index]])
                }
                let ms = Bounded.int(tally.milliseconds[index].rounded(), in: 0...Bounded.maxCounter)
                if ms > 0 { commands.append(["HINCRBY", key, ClassMetricsLayout.millisecondsField(name), ms]) }
            }
            let row = tally.histogram[(index * buckets)..<((index + 1) * buckets)]
            guard row.contains(where: { $0 > 0 }) else { continue }
            let histograms: [(key: String, type: String, ttl: Int)] = [
                (ClassMetricsLayout.sidekiqHistogram(className: name, window: minute.histogramWindow), "u16", short),
                (ClassMetricsLayout.histogram(className: name, bucket: minute.minute), "u32", short),
                (ClassMetricsLayout.histogram(className: name, bucket: minute.tenMinutes), "u32", mid),
            ]
            for histogram in histograms {
                var bitfield: [any RedisArgument] = ["BITFIELD", histogram.key, "OVERFLOW", "SAT"]
                for (bucket, count) in row.enumerated() where count > 0 {
                    bitfield += ["INCRBY", histogram.type, "#\(bucket)", Int(count)]
                }
                commands.append(bitfield)
                commands.append(["EXPIRE", histogram.key, histogram.ttl])
            }
        }
        guard !commands.isEmpty else { return [] }
        commands.append(["EXPIRE", shortKey, short])
        commands.append(["EXPIRE", midKey, mid])
        return commands
    }

    /// Writes what was recorded since the last flush, in one pipelined round trip (nothing when nothing ran).
    func flush(on connection: RedisConnection, now: Double = Clock.now()) throws {
        let commands = commands(for: drain(), now: now)
        guard !commands.isEmpty else { return }
        _ = try connection.pipeline(commands)
    }
}

/// The per-class metrics, written as the runtime's `RunMiddleware`: counts each run that ended (success or failure,
/// as `stat:processed` does; a redelivery the ledger found applied counts as a run, a job rescheduled over its
/// limits or group commit's redo does not) with its duration from the run's start.
///
/// Stateless apart from the shared recorder; any pool thread.
struct ClassMetricsMiddleware: RunMiddleware {
    let recorder: ClassMetricsRecorder

    func run(_ request: RunRequest, next: (RunRequest) -> RunResult) -> RunResult {
        record(request, next(request))
    }

    func run(async request: RunRequest, next: (RunRequest) async -> RunResult) async -> RunResult {
        record(request, await next(request))
    }

    private func record(_ request: RunRequest, _ result: RunResult) -> RunResult {
        if case .settled(_, let counts) = result, counts.contains(.processed) {
            recorder.record(className: request.payload.className, failed: counts.contains(.failed),
                            milliseconds: (Clock.now() - request.execution.startedAt) * 1_000)
        }
        return result
    }
}
