import Foundation

/// One job class's figures over a period (`ClassMetricsReport.load`): what Sidekiq 7's Metrics tab shows.
public struct ClassMetricsSummary: Sendable, Equatable {
    /// The class as the workers recorded it: a registered class's name, or `_other` (`ClassMetricsLayout.otherClass`).
    public var className: String
    /// Runs that ended, successes and failures (as `stat:processed` counts them).
    public var runs: Int
    public var failed: Int
    /// Total execution time of the successful runs, in milliseconds.
    public var totalMilliseconds: Int
    /// The histogram bucket (its upper bound, ms) holding the median / 95th percentile successful run; `.infinity`
    /// for the slowest bucket (over 335 s); nil with no successful run in the period.
    public var p50Milliseconds: Double?
    public var p95Milliseconds: Double?

    public init(className: String, runs: Int, failed: Int, totalMilliseconds: Int, p50Milliseconds: Double?,
                p95Milliseconds: Double?) {
        self.className = className
        self.runs = runs
        self.failed = failed
        self.totalMilliseconds = totalMilliseconds
        self.p50Milliseconds = p50Milliseconds
        self.p95Milliseconds = p95Milliseconds
    }

    /// Mean execution time of the successful runs, ms.
    public var meanMilliseconds: Double? {
        runs > failed ? Double(totalMilliseconds) / Double(runs - failed) : nil
    }
}

/// The period a `ClassMetricsReport` covers.
public enum ClassMetricsPeriod: String, Sendable, CaseIterable {
    /// The last 60 minutes (one-minute buckets, the current one still filling).
    case hour
    /// The last 24 hours (144 ten-minute buckets, the current one still filling).
    case day

    /// The bucket names (`YYMMDD|H:MM` or `YYMMDD|H:M`) the period covers, newest first.
    func buckets(now: Double) -> [String] {
        switch self {
        case .hour: return (0..<60).map { ClassMetricsLayout.Minute(epochSeconds: now - Double($0) * 60).minute }
        case .day: return (0..<144).map { ClassMetricsLayout.Minute(epochSeconds: now - Double($0) * 600).tenMinutes }
        }
    }
}

/// Reads the per-class execution metrics the workers write (`ClassMetricsLayout`) for one period.
///
/// Reading only; two pipelined round trips: the period's counter hashes (60 or 144 HGETALLs), then the histograms of
/// the (at most `maxClasses`) busiest classes (one BITFIELD_RO per class and bucket). Any thread with its own
/// connection.
public enum ClassMetricsReport {
    /// At most this many classes are reported, busiest first (class names come from producers; a fleet's workers
    /// record only registered classes, but many fleets may share a Redis).
    public static let maxClasses = 200

    public static func load(_ connection: RedisConnection, period: ClassMetricsPeriod,
                            now: Double = Clock.now()) throws -> [ClassMetricsSummary] {
        try load([connection], period: period, now: now)
    }

    /// The figures summed over several Redis servers (the shards: each process flushes to the shard of its first
    /// heartbeat).
    public static func load(_ connections: [RedisConnection], period: ClassMetricsPeriod,
                            now: Double = Clock.now()) throws -> [ClassMetricsSummary] {
        let buckets = period.buckets(now: now)
        var totals: [String: (runs: Int, failed: Int, ms: Int)] = [:]
        for connection in connections {
            try connection.pipeline(buckets.map { ["HGETALL", ClassMetricsLayout.counters($0)] }) { _, reply in
            let items = reply.array ?? []
            var index = 0
            while index + 1 < items.count {
                defer { index += 2 }
                guard let field = items[index].string, let value = items[index + 1].string.flatMap({ Bounded.int(parsing: $0, in: 0...Bounded.maxCounter) }),
                      let bar = field.lastIndex(of: "|") else { continue }
                let name = String(field[..<bar])
                var entry = totals[name] ?? (0, 0, 0)
                switch field[field.index(after: bar)...] {
                case "p": entry.runs = Bounded.sum(entry.runs, value)
                case "f": entry.failed = Bounded.sum(entry.failed, value)
                case "ms": entry.ms = Bounded.sum(entry.ms, value)
                default: continue
                }
                totals[name] = entry
            }
            }
        }
        let classes = totals.sorted { ($0.value.runs, $1.key) > ($1.value.runs, $0.key) }.prefix(maxClasses).map(\.key)
        let bucketCount = ClassMetricsLayout.bucketUpperBoundsMs.count
        let get: [any RedisArgument] = (0..<bucketCount).flatMap { ["GET", "u32", "#\($0)"] as [any RedisArgument] }
        var histograms: [String: [Int]] = [:]
        var commands: [[any RedisArgument]] = []
        var owners: [String] = []
        for name in classes {
            for bucket in buckets {
                commands.append(["BITFIELD_RO", ClassMetricsLayout.histogram(className: name, bucket: bucket)] + get)
                owners.append(name)
            }
        }
        for connection in connections where !commands.isEmpty {
            try connection.pipeline(commands) { index, reply in
                let counts = (reply.array ?? []).map { $0.integer.map(Int.init) ?? 0 }
                var sum = histograms[owners[index]] ?? Array(repeating: 0, count: bucketCount)
                for (bucket, count) in counts.enumerated() where bucket < bucketCount { sum[bucket] = Bounded.sum(sum[bucket], count) }
                histograms[owners[index]] = sum
            }
        }
        return classes.map { name in
            let entry = totals[name]!
            let histogram = histograms[name] ?? []
            return ClassMetricsSummary(className: name, runs: entry.runs, failed: entry.failed,
                                       totalMilliseconds: entry.ms,
                                       p50Milliseconds: percentile(0.50, of: histogram),
                                       p95Milliseconds: percentile(0.95, of: histogram))
        }
    }

    /// The upper bound of the bucket holding the `quantile` (nearest rank) of `histogram`; nil when it is empty.
    package static func percentile(_ quantile: Double, of histogram: [Int]) -> Double? {
        let total = histogram.reduce(0, Bounded.sum)
        guard total > 0 else { return nil }
        let rank = max(1, Bounded.int((quantile * Double(total)).rounded(.up), in: 0...total))
        var seen = 0
        for (bucket, count) in histogram.enumerated() {
            seen = Bounded.sum(seen, count)
            if seen >= rank { return ClassMetricsLayout.bucketUpperBoundsMs[bucket] }
        }
        return ClassMetricsLayout.bucketUpperBoundsMs.last
    }
}
