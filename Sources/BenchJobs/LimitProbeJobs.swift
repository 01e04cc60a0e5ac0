import Foundation
import WorkersQueue
import Workers

/// Test-only jobs that declare limits and measure, in Redis, what the limiters let through
/// (LimiterTests; `workerctl worker --bench-jobs`). Each records with one Lua script on its own
/// pooled connection, so the figures come from Redis, not from any process's clock.
///
/// Keys written (test databases only): `probe:limits:running:<name>` (jobs of that limit inside
/// `perform` now), `probe:limits:max:<name>` (highest value seen), `probe:limits:done:<name>` (runs
/// finished), `probe:limits:windows` (HASH: window index of Redis time → admissions), `probe:limits:bucket`
/// (LIST of admission times, ms of Redis time).
public enum LimitProbes {
    /// Registers the three probe jobs, recording through `redisURL`.
    public static func register(into registry: inout JobRegistry, redisURL: String) {
        guard let pool = try? RedisPool(url: redisURL, maxConnections: 4) else { return }
        registry.register(LimitProbeConcurrentJob(redis: pool))
        registry.register(LimitProbeMutexJob(redis: pool))
        registry.register(LimitProbeWindowJob(redis: pool))
        registry.register(LimitProbeBucketJob(redis: pool))
    }

    static func measured(_ name: String, redis: RedisPool, milliseconds: Int, context: JobContext) throws {
        let running = BenchKeys.limitRunning(name)
        _ = try redis.withConnection {
            try $0.evaluate(enter, keys: [running, BenchKeys.limitMax(name)])
        }
        let end = Date().addingTimeInterval(Double(milliseconds) / 1000)
        while end.timeIntervalSinceNow > 0, !context.isCancelled {
            Thread.sleep(forTimeInterval: min(0.05, max(0, end.timeIntervalSinceNow)))
        }
        _ = try redis.withConnection {
            try $0.pipeline([["DECR", running], ["INCR", BenchKeys.limitDone(name)]])
        }
    }

    /// A short random delay: over-limit probes come back quickly.
    static let quickBackoff = OverLimitPolicy(reschedule: 1_000_000) { _, _ in .seconds(Double.random(in: 0.05...0.3)) }
}

/// `args: [milliseconds]`: at most 3 running fleet-wide (lease 2 s).
public struct LimitProbeConcurrentJob: Job {
    /// `[milliseconds]`.
    public struct Arguments: SingleJobArgument, Equatable {
        public static let className = "LimitProbeConcurrent"
        public let value: Int
        public init(value: Int) { self.value = value }
    }
    public static var options: JobOptions {
        var options = JobOptions(maxRetries: 0)
        options.limits = JobLimits([.concurrent("probe-concurrent", max: 3, lease: .seconds(2))], overLimit: LimitProbes.quickBackoff)
        return options
    }
    let redis: RedisPool
    public func perform(_ arguments: Arguments, context: JobContext) throws {
        try LimitProbes.measured("probe-concurrent", redis: redis, milliseconds: arguments.value, context: context)
    }
}

/// `args: [milliseconds, key]`: one at a time per key (lease 2 s); rescheduled 1.5 s later when over, at most
/// 5 times (then the normal retry path, next try in an hour).
public struct LimitProbeMutexJob: Job {
    public static var options: JobOptions {
        var options = JobOptions(maxRetries: 5, backoff: .schedule([.seconds(3600)]))
        options.limits = JobLimits([.concurrent("probe-mutex", max: 1, lease: .seconds(2), key: { $0.last?.stringValue })],
                                   overLimit: OverLimitPolicy(reschedule: 5) { _, _ in .milliseconds(1500) })
        return options
    }
    let redis: RedisPool
    public struct Arguments: JobArguments, Equatable {
        public static let className = "LimitProbeMutex"
        public static let layout = JobArgumentsLayout.positional
        public let milliseconds: Int
        public let key: String
        public init(milliseconds: Int, key: String) { (self.milliseconds, self.key) = (milliseconds, key) }
        public init(from decoder: any Decoder) throws {
            var container = try decoder.unkeyedContainer()
            milliseconds = try container.decode(Int.self)
            key = try container.decode(String.self)
        }
        public func encode(to encoder: any Encoder) throws {
            var container = encoder.unkeyedContainer()
            try container.encode(milliseconds)
            try container.encode(key)
        }
    }
    public func perform(_ arguments: Arguments, context: JobContext) throws {
        try LimitProbes.measured("probe-mutex-\(arguments.key)", redis: redis, milliseconds: arguments.milliseconds,
                                 context: context)
    }
}

/// `args: []`: at most 20 per 1-second window of Redis time; records its admission's window.
public struct LimitProbeWindowJob: Job {
    public struct Arguments: NoJobArguments, Equatable {
        public static let className = "LimitProbeWindow"
        public init() {}
    }
    public static var options: JobOptions {
        var options = JobOptions(maxRetries: 0)
        options.limits = JobLimits([.window("probe-window", max: 20, per: .seconds(1))],
                                   overLimit: OverLimitPolicy(reschedule: 1_000_000, backoff: OverLimitPolicy.limiterWait(jitter: .milliseconds(200))))
        return options
    }
    let redis: RedisPool
    public func perform(_ arguments: Arguments, context: JobContext) throws {
        guard let admitted = context.limitsAdmittedAt else { throw JobError.permanent("run without a limiter admission") }
        let window = Int((admitted.timeIntervalSince1970 * 1000).rounded()) / 1000
        _ = try redis.withConnection { try $0.command("HINCRBY", BenchKeys.limitWindows, window, 1) }
    }
}

/// `args: []`: a token bucket of 1 token per 200 ms; records its admission time (ms of Redis time).
public struct LimitProbeBucketJob: Job {
    public struct Arguments: NoJobArguments, Equatable {
        public static let className = "LimitProbeBucket"
        public init() {}
    }
    public static var options: JobOptions {
        var options = JobOptions(maxRetries: 0)
        options.limits = JobLimits([.bucket("probe-bucket", capacity: 1, per: .milliseconds(200))],
                                   overLimit: OverLimitPolicy(reschedule: 1_000_000, backoff: OverLimitPolicy.limiterWait(jitter: .milliseconds(100))))
        return options
    }
    let redis: RedisPool
    public func perform(_ arguments: Arguments, context: JobContext) throws {
        guard let admitted = context.limitsAdmittedAt else { throw JobError.permanent("run without a limiter admission") }
        _ = try redis.withConnection { try $0.command("RPUSH", BenchKeys.limitBucket, Int((admitted.timeIntervalSince1970 * 1000).rounded())) }
    }
}
