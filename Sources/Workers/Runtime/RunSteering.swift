import Foundation
import Logging
import WorkersQueue
import Synchronization

/// The runtime's side of progress and cancellation (docs/workerctl.md "Cancel a job"; the job's side is
/// Jobs/JobSteering.swift): which fetched or running jobs carry a cancel mark (`JobCancels`, their shard's `cancels`
/// sorted set), the runner's pre-run check, the removal of the marks of jobs settled for good, and the heartbeat's
/// progress writes.
///
/// No cap decides whether a cancel works, and no process reads the whole `cancels` set: Redis is asked only about the
/// jids this process holds.
/// - Each heartbeat (`beat`, per shard) prunes the expired marks, counts the live ones (`ZCARD`: the shard's
///   "cancels exist" flag) and looks up the jids of the runs it serves and of the jobs waiting in the buffer
///   (`ZMSCORE`): a running job found marked is told, a buffered one never starts.
/// - While its shard's flag is set, the fetcher looks up each fetched batch's jids (`markFetched`, one `ZMSCORE` per
///   batch): a job found marked carries its request time (`FetchedJob.cancelRequestedAt`), and the pre-run check
///   (`isCancelled`) settles it without running it. While no mark is live: no command, one atomic load.
/// - A job this process settles for good (dead, dropped, done) while it knew it marked has its mark removed
///   (`ZREM cancels jid`) by the second heartbeat after (`noteSettled`): by then its settlement is written (the
///   settler writes within milliseconds; a beat is seconds apart), so a crash in between never frees a job whose mark
///   is gone. `cancelled-<jid>` keeps its TTL (Sidekiq's `cancelled?` pattern); marks of jids never seen expire.
///
/// Thread rules: `beat` runs on a heartbeat thread (one per served shard, each passing its own shard); `markFetched`
/// on the fetcher and its waiters (with one of their connections); `isCancelled` and `noteSettled` on any pool
/// thread. Shared state is behind one `Mutex` per concern; a pool thread takes none while no mark is known (one
/// atomic load), nor does a fetcher while no shard has a live mark.
///
/// Invariants: no Redis command per job on the pool threads — they never touch Redis for steering; each heartbeat
/// sends one pipeline per beat (prune, remove the marks of settled jobs, count, look up its running and buffered jids, write
/// changed progress, delete the progress of runs that ended); a fetcher adds one `ZMSCORE` per fetched batch, only
/// while its shard has a live mark. A jid is looked up only on the shard its job was fetched from (the shard a retry
/// withdraws the cancel on, `JobCancels.forget`). A mark is removed only after the second beat that follows the
/// settlement of its job for good; never for a job that will run again (retry, requeue, schedule).
final class RunSteering: Sendable {
    /// A mark a beat found on the jid of a running or buffered job: the time of its request (epoch seconds: its
    /// `cancels` score less `JobCancels.ttl`), and whether the last beat looked its jid up (an entry not looked up at
    /// two beats in a row is dropped; the one in between keeps it for a group-commit redo, which runs the job again).
    private struct Found { var requestedAt: Double; var seen: Bool }
    /// Per shard index, the marks found on the jids of its running and buffered jobs.
    private let found = Mutex<[Int: [String: Found]]>([:])
    /// True while `found` holds some mark: all the pre-run check costs while no mark is known.
    private let anyFound = Atomic<Bool>(false)
    /// The shards whose `cancels` set had live members at their last beat, and whether there is any.
    private let withCancels = Mutex<Set<Int>>([])
    private let anyWithCancels = Atomic<Bool>(false)
    /// Per shard index, jids of jobs settled for good while known marked: `noted` since the last beat, `ripe` (noted
    /// before it) go with the next beat's `ZREM`.
    private let settled = Mutex<[Int: (noted: Set<String>, ripe: Set<String>)]>([:])
    /// Per shard index, the jids whose `progress:` key this process wrote and whose run was still running at the
    /// last beat: the next beat that finds one no longer running deletes its key.
    private let written = Mutex<[Int: Set<String>]>([:])

    /// True while `shard`'s `cancels` set had a live mark at its last beat (the fetcher then checks its batches).
    func cancelsExist(shard: Int) -> Bool {
        anyWithCancels.load(ordering: .acquiring) && withCancels.withLock { $0.contains(shard) }
    }

    /// The time of the cancel request that applies to `payload` (fetched as `job`), if its jid is known marked:
    /// found at fetch, or by a beat while it ran.
    func cancelRequest(_ payload: JobPayload?, job: FetchedJob) -> Double? {
        if let at = job.cancelRequestedAt { return at }
        guard anyFound.load(ordering: .acquiring), let jid = payload?.jid else { return nil }
        return found.withLock { $0[job.shard]?[jid]?.requestedAt }
    }

    /// True when `payload` (fetched as `job`) is cancelled: it must not start, or must stop.
    func isCancelled(_ payload: JobPayload?, job: FetchedJob) -> Bool {
        guard let payload, let requestedAt = cancelRequest(payload, job: job) else { return false }
        return !Self.isRetriedAfterCancel(payload, requestedAt: requestedAt)
    }

    /// True for the copy an operator retried out of the dead set after the cancel requested at `requestedAt`: it
    /// records that cancel (`error_class` `Cancelled`) and was pushed after it. The retry withdraws the mark in Redis
    /// (`JobCancels.forget`), but a process may hold the mark for up to one more heartbeat: this keeps it from
    /// cancelling the retried copy again meanwhile. A later cancel (requested after that push) applies again.
    static func isRetriedAfterCancel(_ payload: JobPayload, requestedAt: Double) -> Bool {
        payload.errorClass == JobCancels.errorClass && (payload.enqueuedAt ?? 0) > requestedAt
    }

    /// The job `jid`, fetched from `shard` and known marked, is settled for good (dead, dropped or done): its mark
    /// goes with the second beat from now. Pool threads.
    func noteSettled(jid: String, shard: Int) {
        _ = settled.withLock { $0[shard, default: ([], [])].noted.insert(jid) }
    }

    /// The fetch-time check (fetcher and waiter threads): while `shard`'s `cancels` set has live marks, one `ZMSCORE`
    /// of the jids of `jobs` on `connection` (opened only then); each job found marked gets `cancelRequestedAt`.
    /// Jids are found by a byte search (`jidCandidates`); a payload is parsed only when its bytes are found marked
    /// (to confirm its own jid) or the search is unsure. No command while the set is empty.
    func markFetched(_ jobs: inout [FetchedJob], shard: Int,
                     connection: () throws(RedisError) -> RedisConnection) throws(RedisError) {
        guard !jobs.isEmpty, cancelsExist(shard: shard) else { return }
        var candidates: [[String]] = []
        var unique: [String] = []
        var seen = Set<String>()
        for job in jobs {
            let jids = Self.jidCandidates(job.raw) ?? [(try? JobPayload(parsing: job.raw))?.jid].compactMap { $0 }
            candidates.append(jids)
            for jid in jids where seen.insert(jid).inserted { unique.append(jid) }
        }
        guard !unique.isEmpty else { return }
        // An error reply (a Redis older than 6.2 has no ZMSCORE) reads as no mark; a failed link throws.
        let reply = try connection().send(["ZMSCORE", JobCancels.set] + unique.map { $0 as any RedisArgument })
        var scores: [String: Double] = [:]
        for (jid, score) in zip(unique, reply.array ?? []) { if let score = score.double { scores[jid] = score } }
        guard !scores.isEmpty else { return }
        for index in jobs.indices where candidates[index].contains(where: { scores[$0] != nil }) {
            guard let jid = (try? JobPayload(parsing: jobs[index].raw))?.jid, let expires = scores[jid] else { continue }
            jobs[index].cancelRequestedAt = expires - Double(JobCancels.ttl.components.seconds)
        }
    }

    /// Every string value of a `"jid"` key in the payload's bytes (at any depth: a superset of its own jid), or nil
    /// when the bytes hold none in plain form (or one with an escape): the caller parses the payload instead.
    static func jidCandidates(_ raw: [UInt8]) -> [String]? {
        let key: [UInt8] = Array("\"jid\"".utf8)
        var found: [String] = []
        var index = 0
        let end = raw.count
        func skipSpace(_ i: inout Int) { while i < end, raw[i] == 0x20 || raw[i] == 0x09 || raw[i] == 0x0A || raw[i] == 0x0D { i += 1 } }
        while index + key.count <= end {
            guard raw[index] == 0x22, raw[index + 1] == 0x6A, raw[index + 2] == 0x69, raw[index + 3] == 0x64,
                  raw[index + 4] == 0x22 else { index += 1; continue }
            var i = index + key.count
            index += 1
            skipSpace(&i)
            guard i < end, raw[i] == 0x3A else { continue }  // ':'
            i += 1
            skipSpace(&i)
            guard i < end, raw[i] == 0x22 else { continue }
            let start = i + 1
            var stop = start
            while stop < end, raw[stop] != 0x22 {
                if raw[stop] == 0x5C { return nil }  // an escape: let the parser decide
                stop += 1
            }
            guard stop < end else { return nil }
            found.append(String(decoding: raw[start..<stop], as: UTF8.self))
            index = stop
        }
        return found.isEmpty ? nil : found
    }

    /// One heartbeat's steering on `shard` (index in the shard map; 0 with one Redis), in one pipeline on
    /// `connection`: drops the expired members of `cancels`, removes the marks of jobs settled for good before the
    /// last beat, counts the live ones (the shard's "cancels exist" flag), looks up the jids of the running
    /// `executions` and of the `buffered` jobs (those fetched from `shard`), writes the progress they reported since the last beat, and deletes
    /// the progress keys of runs that ended. Then tells every running execution whose jid is marked
    /// (`CancellationFlag.cancelByOperator`). Throws only when the link fails (an error reply reads as no cancel).
    func beat(_ connection: RedisConnection, shard: Int, executions: [Execution], buffered: [FetchedJob] = [],
              now: Double) throws(RedisError) {
        let removing = settled.withLock { all -> [String] in
            guard let entry = all[shard] else { return [] }
            all[shard] = entry.noted.isEmpty ? nil : (noted: [], ripe: entry.noted)
            return Array(entry.ripe)
        }
        var commands: [[any RedisArgument]] = [["ZREMRANGEBYSCORE", JobCancels.set, "-inf", "(" + String(now)]]
        if !removing.isEmpty { commands.append(["ZREM", JobCancels.set] + removing.map { $0 as any RedisArgument }) }
        let countIndex = commands.count
        commands.append(["ZCARD", JobCancels.set])
        var running: [String] = []
        var runningSet = Set<String>()
        var reported = Set<String>()
        var progress: [[any RedisArgument]] = []
        let ttl = Int(JobProgress.ttl.components.seconds)
        for execution in executions {
            guard let jid = execution.payload?.jid else { continue }
            if runningSet.insert(jid).inserted { running.append(jid) }
            if let report = execution.cancellation.reported.withLock({ $0.takeUnwritten() }) {
                progress.append(["SET", JobProgress.key(jid: jid), report.json, "EX", ttl])
                reported.insert(jid)
            }
        }
        // The buffered jobs' jids too (a superset, `jidCandidates`): a job fetched before its cancel never starts.
        var looked = running
        var lookedSet = runningSet
        for job in buffered where job.cancelRequestedAt == nil {
            for jid in Self.jidCandidates(job.raw) ?? [(try? JobPayload(parsing: job.raw))?.jid].compactMap({ $0 })
            where lookedSet.insert(jid).inserted { looked.append(jid) }
        }
        let scoresIndex = commands.count
        if !looked.isEmpty { commands.append(["ZMSCORE", JobCancels.set] + looked.map { $0 as any RedisArgument }) }
        commands += progress
        let previously = written.withLock { $0[shard] ?? [] }
        for jid in previously.subtracting(runningSet) { commands.append(["DEL", JobProgress.key(jid: jid)]) }
        let replies: [RedisReply]
        do {
            replies = try connection.pipeline(commands)
        } catch {
            // Not sent (or not known to be): those marks go with a later beat.
            if !removing.isEmpty { settled.withLock { $0[shard, default: ([], [])].ripe.formUnion(removing) } }
            throw error
        }
        written.withLock { $0[shard] = previously.intersection(runningSet).union(reported) }

        let live = (replies[countIndex].integer ?? 0) > 0
        let anyShard = withCancels.withLock { shards in
            if live { shards.insert(shard) } else { shards.remove(shard) }
            return !shards.isEmpty
        }
        anyWithCancels.store(anyShard, ordering: .releasing)

        var marks: [String: Double] = [:]
        if !looked.isEmpty, let scores = replies[scoresIndex].array {
            let ttlSeconds = Double(JobCancels.ttl.components.seconds)
            for (jid, score) in zip(looked, scores) { if let expires = score.double { marks[jid] = expires - ttlSeconds } }
        }
        let anyMark = found.withLock { all in
            var next: [String: Found] = [:]
            for (jid, entry) in all[shard] ?? [:] where entry.seen && !lookedSet.contains(jid) {
                next[jid] = Found(requestedAt: entry.requestedAt, seen: false)  // kept one beat (a redo)
            }
            for (jid, requestedAt) in marks { next[jid] = Found(requestedAt: requestedAt, seen: true) }
            all[shard] = next.isEmpty ? nil : next
            return !all.isEmpty
        }
        anyFound.store(anyMark, ordering: .releasing)
        guard !marks.isEmpty else { return }
        for execution in executions {
            guard let payload = execution.payload, let jid = payload.jid, let requestedAt = marks[jid],
                  !Self.isRetriedAfterCancel(payload, requestedAt: requestedAt) else { continue }
            execution.cancellation.cancelByOperator()
        }
    }
}

extension JobRunner {
    /// The pre-run check: the settlement of a job whose jid is cancelled (`RunSteering`), which then does not run;
    /// nil for every other job (one atomic load while no cancel exists). Dead with `Cancelled` (or dropped, for a
    /// payload with `dead: false`); counted as no run (no `stat:processed`), like a job over a limit.
    func cancelledBeforeRun(_ payload: JobPayload, job: FetchedJob, logger: () -> Logger) -> RunResult? {
        guard let steering, steering.isCancelled(payload, job: job) else { return nil }
        logger().notice("cancelled before it started; sent to dead")
        noteSettledMarked(payload, job: job)
        return .settled(cancelledSettlement(payload, job: job), counts: [])
    }

    /// A job known marked is settled for good (dead, dropped, done): its mark leaves `cancels` two beats from now
    /// (`RunSteering.noteSettled`).
    func noteSettledMarked(_ payload: JobPayload, job: FetchedJob) {
        guard let steering, let jid = payload.jid else { return }
        steering.noteSettled(jid: jid, shard: job.shard)
    }

    /// The settlement of a run that ended (threw) after an operator cancelled it: `Cancelled` in the dead set, never
    /// retried — unless the job's ledger transaction committed, which makes the job done (acknowledged). On group
    /// commit's fast path, a redo: its group runs again with savepoints, where the pre-run check settles it.
    func cancelledRun(_ payload: JobPayload, job: FetchedJob, options: JobOptions,
                      sharedTransaction: SharedTransaction?, logger: Logger) -> RunResult {
        if sharedTransaction?.claimedRow != nil { return .redo }
        defer { noteSettledMarked(payload, job: job) }
        if options.usesLedger, let database, let jid = payload.jid {
            do {
                let applied = try sharedTransaction.map { try database.isApplied(jid: jid, on: $0.connection) }
                    ?? database.isApplied(jid: jid)
                if applied {
                    logger.info("cancelled after its ledger transaction committed; done")
                    return .acknowledged
                }
            } catch {
                // Unknown: dead is the safe side (an operator's retry runs it once more; the ledger skips it if applied).
                logger.warning("cancelled; its ledger could not be read", metadata: ["error": "\(error)"])
            }
        }
        logger.notice("cancelled while running; sent to dead")
        return .failed(cancelledSettlement(payload, job: job))
    }

    private func cancelledSettlement(_ payload: JobPayload, job: FetchedJob) -> Settlement {
        guard payload.allowsDead else { return .drop }
        return .dead(payload: payload.recordingFailure(queue: job.queue, errorClass: JobCancels.errorClass,
                                                       message: JobCancels.message))
    }
}
