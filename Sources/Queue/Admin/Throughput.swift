/// Runs processed and failed in one span of time (a minute, or several summed).
public struct ThroughputBucket: Sendable, Equatable {
    /// Epoch seconds at which the span starts (a whole UTC minute).
    public var start: Double
    /// Length of the span in seconds.
    public var seconds: Double
    public var processed: Int
    public var failed: Int

    public init(start: Double, seconds: Double, processed: Int, failed: Int) {
        self.start = start
        self.seconds = seconds
        self.processed = processed
        self.failed = failed
    }

    /// Runs per second over the span.
    public var processedPerSecond: Double { Double(processed) / seconds }
    public var failedPerSecond: Double { Double(failed) / seconds }
}

/// The per-minute history of runs that the settle script keeps (`Keys.statMinutelyProcessed` /
/// `statMinutelyFailed`: one hash per UTC day, minute of the day → count, counted with the same
/// "only if this call removed the job" rule as `stat:processed`). What the dashboard's last-hour and
/// last-day graphs draw. Reading only; at most two days' hashes are read, in one round trip.
public enum Throughput {
    /// The `minutes` minutes up to and including the current one, oldest first, summed into buckets of
    /// `bucketMinutes` (the last bucket ends with the current minute, which is still filling).
    /// `minutes` must be a positive multiple of `bucketMinutes` and at most 2,880 (the retention is 3 days).
    public static func load(_ connection: RedisConnection, minutes: Int, bucketMinutes: Int = 1,
                            now: Double = Clock.now()) throws -> [ThroughputBucket] {
        guard minutes > 0, minutes <= 2_880, bucketMinutes > 0, minutes % bucketMinutes == 0 else {
            throw AdminError.invalidArgument("minutes must be within 1...2880 and a multiple of the bucket (\(minutes), \(bucketMinutes))")
        }
        let current = Int((now / 60).rounded(.down))
        let first = current - minutes + 1
        // Group the minutes by UTC day: one HMGET per day and counter.
        var days: [(day: String, minutes: [Int])] = []
        for minute in first...current {
            let day = Clock.utcDay(Double(minute) * 60)
            if days.last?.day == day { days[days.count - 1].minutes.append(minute) } else { days.append((day, [minute])) }
        }
        var commands: [[any RedisArgument]] = []
        for (day, dayMinutes) in days {
            let fields: [any RedisArgument] = dayMinutes.map { String(((($0 % 1440) + 1440) % 1440)) }
            commands.append(["HMGET", Keys.statMinutelyProcessed(day: day)] + fields)
            commands.append(["HMGET", Keys.statMinutelyFailed(day: day)] + fields)
        }
        let replies = try connection.pipeline(commands)
        var processed: [Int] = []
        var failed: [Int] = []
        for (index, entry) in days.enumerated() {
            func counts(_ reply: RedisReply) -> [Int] {
                let values = reply.array ?? []
                return entry.minutes.indices.map { $0 < values.count ? Bounded.counter(values[$0].string) : 0 }
            }
            processed += counts(replies[2 * index])
            failed += counts(replies[2 * index + 1])
        }
        let perMinute = (0..<minutes).map { offset in
            ThroughputBucket(start: Double(first + offset) * 60, seconds: 60, processed: processed[offset], failed: failed[offset])
        }
        return regroup(perMinute, bucketMinutes: bucketMinutes)
    }

    /// Consecutive buckets summed `bucketMinutes` at a time (one read of a day gives both the last hour per minute and
    /// the day per quarter hour). `buckets.count` should be a multiple of `bucketMinutes`; a shorter last group is kept.
    public static func regroup(_ buckets: [ThroughputBucket], bucketMinutes: Int) -> [ThroughputBucket] {
        guard bucketMinutes > 1 else { return buckets }
        return stride(from: 0, to: buckets.count, by: bucketMinutes).map { start in
            let group = buckets[start..<min(buckets.count, start + bucketMinutes)]
            return ThroughputBucket(start: group.first!.start, seconds: group.reduce(0) { $0 + $1.seconds },
                                    processed: group.reduce(0) { Bounded.sum($0, $1.processed) },
                                    failed: group.reduce(0) { Bounded.sum($0, $1.failed) })
        }
    }
}
