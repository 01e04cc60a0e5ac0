import WorkersQueue

/// The fetch size limit for jobs a blocking wait (`BLMOVE`) brought: the fetch script buries its own oversized
/// payloads in Redis (`OversizedScripts`), but a wait hands its job over whole. `split` sorts such jobs out before
/// the pool sees them: each becomes a dead settlement with the same stub (`OversizedJob`), counted processed and
/// failed as a death, written by the settler (the one writer of our in-flight lists' tails). Pure; fetcher and
/// waiter threads.
enum OversizedWaits {
    /// `jobs` within `limit` bytes, in order, and the settlements (with the stub's jid, for the log) of the others.
    static func split(_ jobs: [FetchedJob], limit: Int,
                      now: Double = Clock.now()) -> (run: [FetchedJob], buried: [(item: SettlementQueue.Item, jid: String)]) {
        guard jobs.contains(where: { $0.raw.count > limit }) else { return (jobs, []) }
        var run: [FetchedJob] = []
        var buried: [(item: SettlementQueue.Item, jid: String)] = []
        for var job in jobs {
            guard job.raw.count > limit else {
                run.append(job)
                continue
            }
            let stub = OversizedJob.deadEntry(raw: job.raw, queue: job.queue, limit: limit, now: now)
            // The settle script releases a unique lock only while it still names this jid, as the orphan sweep does.
            job.uniqueJid = OversizedJob.jid(in: job.raw)
            buried.append((.init(job: job, settlement: .dead(payload: stub.entry), counts: [.processed, .failed]), stub.jid))
        }
        return (run, buried)
    }
}
