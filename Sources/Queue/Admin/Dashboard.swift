/// What `workerctl top` shows in one frame: the stats, the running jobs and the latest failures.
public struct DashboardSnapshot: Sendable {
    public var time: Double
    public var stats: Stats
    public var busy: [JobRecord]
    /// The most recent failures from `retry` and `dead`, newest first (by `retried_at`,
    /// `failed_at`, or the dead score).
    public var recentFailures: [JobRecord]

    /// Bounded whatever producers added (review M5): `Stats.load`'s samples, the running jobs of at most
    /// `Stats.sampleProcesses` processes (none when `busyJobs` is false: the dashboard's `/` does not show them).
    public static func load(_ connection: RedisConnection, now: Double = Clock.now(),
                            failures: Int = 5, busyJobs: Bool = true) throws(RedisError) -> DashboardSnapshot {
        let stats = try Stats.load(connection, now: now)
        let busy = busyJobs ? try WorkSet.all(connection, budget: ScanBudget(maxEntries: Stats.sampleProcesses)) : []
        let candidates = try SortedJobSet(.retry).latest(connection, limit: failures * 4)
            + SortedJobSet(.dead).latest(connection, limit: failures * 4)
        let recent = candidates.sorted { failureTime($0) > failureTime($1) }.prefix(failures)
        return DashboardSnapshot(time: now, stats: stats, busy: busy, recentFailures: Array(recent))
    }

    /// When the job last failed; for dead jobs without failure fields, the time of death.
    public static func failureTime(_ record: JobRecord) -> Double {
        record.lastFailureAt ?? (record.state == .dead ? record.score ?? 0 : 0)
    }
}
