import Foundation
import WorkersQueue

/// What the dashboard's live view shows (`/api/stats.json`, polled by `/assets/app.js`): the totals and the last
/// `minutes` minutes processed / failed, summed over the shards.
///
/// Invariant: the JSON has a fixed shape and a bounded size whatever Redis holds — eleven integer counters, a
/// `partial` flag, a time and exactly `minutes` buckets of three numbers (a few hundred bytes); no name, jid or
/// payload. Reading one shard costs a bounded number of commands whatever a producer added (review M5): counters
/// and set sizes, `SSCAN` of at most `Stats.sampleProcesses` processes and `QueueAdmin.sampleNames` queue names,
/// `HGET busy` and `LLEN` of each read, then the per-minute read (`Throughput.load`). With more names than that,
/// `enqueued` and `busy` are sums over those read and `partial` is true.
struct LiveStats: Sendable, Equatable {
    /// The minutes the live chart shows (the current one last, still filling).
    static let minutes = 10

    var time: Double
    var processed = 0, failed = 0, processedToday = 0, failedToday = 0
    var busy = 0, enqueued = 0, scheduled = 0, retries = 0, dead = 0, processes = 0
    /// `SCARD queues`, summed over the shards.
    var queues = 0
    /// Some queue names or processes were left unread: `enqueued` and `busy` are lower bounds.
    var partial = false
    /// Oldest first, `minutes` of them.
    var buckets: [ThroughputBucket] = []

    static func zero(now: Double) -> LiveStats { LiveStats(time: now) }

    /// One shard's figures at `now`.
    static func load(_ connection: RedisConnection, now: Double) throws -> LiveStats {
        let day = Clock.utcDay(now)
        let fast = try connection.pipeline([
            ["GET", Keys.statProcessed], ["GET", Keys.statFailed],
            ["GET", Keys.statProcessed(day: day)], ["GET", Keys.statFailed(day: day)],
            ["ZCARD", Keys.schedule], ["ZCARD", Keys.retry], ["ZCARD", Keys.dead],
            ["SCARD", Keys.processes], ["SCARD", Keys.queues],
        ])
        for reply in fast { try reply.checked() }
        func int(_ reply: RedisReply) -> Int { Bounded.int(reply.integer ?? 0, in: 0...Bounded.maxCounter) }
        func counter(_ reply: RedisReply) -> Int { Bounded.counter(reply.string) }
        let processBudget = ScanBudget(maxEntries: Stats.sampleProcesses)
        let queueBudget = ScanBudget(maxEntries: QueueAdmin.sampleNames)
        let processes = try processBudget.members(of: Keys.processes, connection)
        let queues = try queueBudget.members(of: Keys.queues, connection)
        let sizes = try connection.pipeline(processes.map { ["HGET", Keys.process($0), "busy"] }
                                            + queues.map { ["LLEN", Keys.queue($0)] })
        var stats = LiveStats(time: now)
        stats.processed = counter(fast[0])
        stats.failed = counter(fast[1])
        stats.processedToday = counter(fast[2])
        stats.failedToday = counter(fast[3])
        stats.scheduled = int(fast[4])
        stats.retries = int(fast[5])
        stats.dead = int(fast[6])
        stats.processes = int(fast[7])
        stats.queues = int(fast[8])
        stats.partial = processBudget.exhausted || queueBudget.exhausted
        stats.busy = sizes.prefix(processes.count).reduce(0) { Bounded.sum($0, counter($1)) }
        stats.enqueued = sizes.dropFirst(processes.count).reduce(0) { Bounded.sum($0, int($1)) }
        stats.buckets = try Throughput.load(connection, minutes: minutes, now: now)
        return stats
    }

    /// Adds another shard's figures (bucket by bucket: every shard is read for the same `time`).
    mutating func add(_ other: LiveStats) {
        processed = Bounded.sum(processed, other.processed)
        failed = Bounded.sum(failed, other.failed)
        processedToday = Bounded.sum(processedToday, other.processedToday)
        failedToday = Bounded.sum(failedToday, other.failedToday)
        busy = Bounded.sum(busy, other.busy)
        enqueued = Bounded.sum(enqueued, other.enqueued)
        scheduled = Bounded.sum(scheduled, other.scheduled)
        retries = Bounded.sum(retries, other.retries)
        dead = Bounded.sum(dead, other.dead)
        processes = Bounded.sum(processes, other.processes)
        queues = Bounded.sum(queues, other.queues)
        partial = partial || other.partial
        if buckets.isEmpty { buckets = other.buckets } else {
            for index in buckets.indices where index < other.buckets.count {
                buckets[index].processed = Bounded.sum(buckets[index].processed, other.buckets[index].processed)
                buckets[index].failed = Bounded.sum(buckets[index].failed, other.buckets[index].failed)
            }
        }
    }

    /// The endpoint's body: `{"time":…,"processed":…,…,"minutes":[{"start":…,"processed":…,"failed":…},…]}`.
    func json() -> String {
        let counters: [(String, Int)] = [
            ("processed", processed), ("failed", failed), ("processed_today", processedToday), ("failed_today", failedToday),
            ("busy", busy), ("enqueued", enqueued), ("scheduled", scheduled), ("retries", retries), ("dead", dead),
            ("processes", processes), ("queues", queues),
        ]
        var object = JSONObject()
        object["time"] = .double(time)
        for (name, value) in counters { object[name] = .int(Int64(value)) }
        object["partial"] = .bool(partial)
        object["minutes"] = .array(buckets.map { bucket in
            .object(["start": .int(Int64(bucket.start)), "processed": .int(Int64(bucket.processed)),
                     "failed": .int(Int64(bucket.failed))])
        })
        return JSONValue.object(object).serialized()
    }
}
