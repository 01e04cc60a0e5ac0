/// Every key pattern Queue's key types can build (`Keys`, `LimitKeys`, `CancelKeys`, `ProgressKeys`,
/// `CompletionKeys`, `ClassMetricsLayout`), each through its builder. A key added to a key type is added here in the
/// same change: `KeyCatalogueTests` fails on a key a real run creates that no pattern matches. The other modules'
/// catalogues: `CronKeys.catalogue` (Scheduler), `ErasureKeys.catalogue` (SubjectKeys), `GeoKeys.catalogue`
/// (Jobs), `BenchKeys.catalogue` (BenchJobs); their union: `Tests/JobsTests/KeyCatalogue+All.swift`.
/// Immutable; any thread.
package enum QueueKeyCatalogue {
    typealias P = KeyPattern.Part

    package static let all: [KeyPattern] = queues + runtime + sets + stats + batches + unique + limits + steering
        + classMetrics + [KeyPattern("shard-maps", .hash, owner: "sharding", key: Keys.shardMaps)]

    static let queues: [KeyPattern] = [
        KeyPattern("queues", .set, owner: "queues", key: Keys.queues),
        KeyPattern("queue", [.list], owner: "queues", parts: [P("queue", sample: "default")]) { Keys.queue($0[0]) },
        KeyPattern("paused", .set, owner: "queues", key: Keys.paused),
    ]

    static let runtime: [KeyPattern] = [
        KeyPattern("working", [.list], owner: "runtime: reliable fetch",
                   parts: [P("queue", sample: "default"), .identity()]) { Keys.working(queue: $0[0], identity: $0[1]) },
        KeyPattern("fetcher-heartbeat", [.string], owner: "runtime: heartbeat",
                   parts: [P("identity with - for :", sample: "host-4242-0123456789ab")]) { Keys.fetcherHeartbeat(identity: $0[0]) },
        KeyPattern("processes", .set, owner: "runtime: heartbeat", key: Keys.processes),
        KeyPattern("process", [.hash], owner: "runtime: heartbeat", parts: [.identity()]) { Keys.process($0[0]) },
        KeyPattern("process-workers", [.hash], owner: "runtime: heartbeat", parts: [.identity()]) { Keys.workers($0[0]) },
        KeyPattern("process-work", [.hash], owner: "runtime: heartbeat", parts: [.identity()]) { Keys.work($0[0]) },
        KeyPattern("process-signals", [.list], owner: "runtime: heartbeat", parts: [.identity()]) { Keys.signals($0[0]) },
        KeyPattern("orphan-sweep-lock", .string, owner: "runtime: housekeeper", key: Keys.orphanSweepLock),
    ]

    static let sets: [KeyPattern] = [
        KeyPattern("schedule", .zset, owner: "sets", key: Keys.schedule),
        KeyPattern("retry", .zset, owner: "sets", key: Keys.retry),
        KeyPattern("dead", .zset, owner: "sets", key: Keys.dead),
    ]

    static let stats: [KeyPattern] = [
        KeyPattern("stat-processed", .string, owner: "stats", key: Keys.statProcessed),
        KeyPattern("stat-failed", .string, owner: "stats", key: Keys.statFailed),
        KeyPattern("stat-processed-day", [.string], owner: "stats", parts: [.day()]) { Keys.statProcessed(day: $0[0]) },
        KeyPattern("stat-failed-day", [.string], owner: "stats", parts: [.day()]) { Keys.statFailed(day: $0[0]) },
        KeyPattern("stat-minutely-processed", [.hash], owner: "stats", parts: [.day()]) { Keys.statMinutelyProcessed(day: $0[0]) },
        KeyPattern("stat-minutely-failed", [.hash], owner: "stats", parts: [.day()]) { Keys.statMinutelyFailed(day: $0[0]) },
    ]

    static let batches: [KeyPattern] = {
        let bid = [P("bid", sample: "0123456789abcdef")]
        return [
            KeyPattern("batches", .zset, owner: "batches", key: Keys.batches),
            KeyPattern("batch", [.hash], owner: "batches", parts: bid) { Keys.batch($0[0]) },
            KeyPattern("batch-jids", [.set], owner: "batches", parts: bid) { Keys.batchJids($0[0]) },
            KeyPattern("batch-done", [.set], owner: "batches", parts: bid) { Keys.batchDone($0[0]) },
            KeyPattern("batch-failed", [.set], owner: "batches", parts: bid) { Keys.batchFailed($0[0]) },
            KeyPattern("batch-died", [.set], owner: "batches", parts: bid) { Keys.batchDied($0[0]) },
        ]
    }()

    static let unique: [KeyPattern] = [
        KeyPattern("unique-lock", [.string], owner: "unique jobs",
                   parts: [P("digest", sample: String(repeating: "ab", count: 32))]) { Keys.uniqueLock($0[0]) },
        KeyPattern("unique-owner", [.hash], owner: "unique jobs", parts: [P("jid", sample: "0123456789abcdef01234567")]) {
            Keys.uniqueOwner($0[0])
        },
        KeyPattern("unique-dropped", .string, owner: "unique jobs", key: Keys.uniqueDropped),
        KeyPattern("unique-purge", [.list], owner: "unique jobs", parts: [P("token", sample: "0123456789abcdef01234567")]) {
            Keys.uniquePurge($0[0])
        },
    ]

    static let limits: [KeyPattern] = [
        KeyPattern("limits", .hash, owner: "limiters", key: LimitKeys.declared),
        // A concurrent limiter's instance is a ZSET of leases; a window or bucket limiter's a HASH.
        KeyPattern("limit", [.zset, .hash], owner: "limiters", parts: [P("name", sample: "store-calls")]) {
            LimitKeys.instance(name: $0[0], key: nil)
        },
        KeyPattern("limit-keyed", [.zset, .hash], owner: "limiters",
                   parts: [P("name", sample: "store-calls"), P("key", sample: "user-1")]) {
            LimitKeys.instance(name: $0[0], key: $0[1])
        },
    ]

    static let steering: [KeyPattern] = [
        KeyPattern("progress", [.string], owner: "progress", parts: [P("jid", sample: "0123456789abcdef01234567")]) {
            ProgressKeys.progress(jid: $0[0])
        },
        KeyPattern("cancels", .zset, owner: "cancel", key: CancelKeys.set),
        KeyPattern("cancel-mark", [.string], owner: "cancel", parts: [P("jid", sample: "0123456789abcdef01234567")]) {
            CancelKeys.mark(jid: $0[0])
        },
        KeyPattern("completion", [.string], owner: "completion records", parts: [P("jid", sample: "0123456789abcdef01234567")]) {
            CompletionKeys.record(jid: $0[0])
        },
    ]

    static let classMetrics: [KeyPattern] = [
        // `YYMMDD|H:MM` (a minute) or `YYMMDD|H:M` (ten minutes): `ClassMetricsLayout.Minute`.
        KeyPattern("class-metrics-counters", [.hash], owner: "class metrics", parts: [P("bucket", sample: "261207|8:05")]) {
            ClassMetricsLayout.counters($0[0])
        },
        KeyPattern("class-metrics-sidekiq-histogram", [.string], owner: "class metrics",
                   parts: [P("class", sample: "HardJob"), P("window", sample: "7-8:5")]) {
            ClassMetricsLayout.sidekiqHistogram(className: $0[0], window: $0[1])
        },
        KeyPattern("class-metrics-histogram", [.string], owner: "class metrics",
                   parts: [P("class", sample: "HardJob"), P("bucket", sample: "261207|8:05")]) {
            ClassMetricsLayout.histogram(className: $0[0], bucket: $0[1])
        },
    ]
}
