import Foundation
import Logging
import Queue
import Synchronization

/// The runtime's side of progress and cancellation (docs/workerctl.md "Cancel a job"; the job's side is
/// Jobs/JobSteering.swift): the process-local set of cancelled jids, which each heartbeat refreshes from its shard's
/// `cancels` sorted set (`JobCancels`) and the runner checks before a run; and the heartbeat's progress writes.
///
/// Thread rules: `beat` runs on a heartbeat thread (one per served shard, each passing its own shard); `isCancelled`
/// on any pool thread. Shared state is behind one `Mutex` per concern, taken once per beat by a heartbeat; a pool
/// thread takes none while no cancel exists (one atomic load).
///
/// Invariants: no Redis command per job — the pool threads never touch Redis for steering; each heartbeat sends one
/// pipeline per beat (prune and read `cancels`, write changed progress, delete the progress of runs that ended). A
/// jid is looked up only in the set read from the shard its job was fetched from (the shard a retry withdraws the
/// cancel on, `JobCancels.forget`).
final class RunSteering: Sendable {
    /// Per shard index, the live cancelled jids read at its heartbeat's last beat, each with the time of its request
    /// (epoch seconds: its `cancels` score less `JobCancels.ttl`).
    private let cancelled = Mutex<[Int: [String: Double]]>([:])
    /// True while some shard's set is not empty: all the pre-run check costs while no cancel exists.
    private let anyCancelled = Atomic<Bool>(false)
    /// Per shard index, the jids whose `progress:` key this process wrote and whose run was still running at the
    /// last beat: the next beat that finds one no longer running deletes its key.
    private let written = Mutex<[Int: Set<String>]>([:])

    /// Most live cancels a beat reads (the oldest-expiring first); cancels are rare, marks live 7 days.
    static let maxCancels = 10_000

    /// True when `payload` (a job fetched from `shard`) is cancelled: it must not start, or must stop.
    func isCancelled(_ payload: JobPayload?, shard: Int) -> Bool {
        guard anyCancelled.load(ordering: .acquiring), let payload, let jid = payload.jid,
              let requestedAt = cancelled.withLock({ $0[shard]?[jid] }) else { return false }
        return !Self.isRetriedAfterCancel(payload, requestedAt: requestedAt)
    }

    /// True for the copy an operator retried out of the dead set after the cancel requested at `requestedAt`: it
    /// records that cancel (`error_class` `Cancelled`) and was pushed after it. The retry withdraws the mark in Redis
    /// (`JobCancels.forget`), but a process may hold the mark for up to one more heartbeat: this keeps it from
    /// cancelling the retried copy again meanwhile. A later cancel (requested after that push) applies again.
    static func isRetriedAfterCancel(_ payload: JobPayload, requestedAt: Double) -> Bool {
        payload.errorClass == JobCancels.errorClass && (payload.enqueuedAt ?? 0) > requestedAt
    }

    /// One heartbeat's steering on `shard` (index in the shard map; 0 with one Redis), in one pipeline on
    /// `connection`: drops the expired members of `cancels` and reads the live ones into the process-local set,
    /// writes the progress the running `executions` (those fetched from `shard`) reported since the last beat, and
    /// deletes the progress keys of runs that ended. Then tells every running execution whose jid is cancelled
    /// (`CancellationFlag.cancelByOperator`). Throws only when the link fails (an error reply reads as no cancel).
    func beat(_ connection: RedisConnection, shard: Int, executions: [Execution], now: Double) throws(RedisError) {
        var commands: [[any RedisArgument]] = [
            ["ZREMRANGEBYSCORE", JobCancels.set, "-inf", "(" + String(now)],
            ["ZRANGEBYSCORE", JobCancels.set, now, "+inf", "WITHSCORES", "LIMIT", 0, Self.maxCancels],
        ]
        var running = Set<String>()
        var reported = Set<String>()
        let ttl = Int(JobProgress.ttl.components.seconds)
        for execution in executions {
            guard let jid = execution.payload?.jid else { continue }
            running.insert(jid)
            if let progress = execution.cancellation.reported.withLock({ $0.takeUnwritten() }) {
                commands.append(["SET", JobProgress.key(jid: jid), progress.json, "EX", ttl])
                reported.insert(jid)
            }
        }
        let previously = written.withLock { $0[shard] ?? [] }
        for jid in previously.subtracting(running) { commands.append(["DEL", JobProgress.key(jid: jid)]) }
        let replies = try connection.pipeline(commands)
        written.withLock { $0[shard] = previously.intersection(running).union(reported) }
        var live: [String: Double] = [:]
        let members = replies[1].array ?? []
        var index = 0
        while index + 1 < members.count {  // WITHSCORES: member, score
            if let jid = members[index].string, let expires = members[index + 1].double {
                live[jid] = expires - Double(JobCancels.ttl.components.seconds)
            }
            index += 2
        }
        let any = cancelled.withLock { sets in
            sets[shard] = live.isEmpty ? nil : live
            return !sets.isEmpty
        }
        anyCancelled.store(any, ordering: .releasing)
        guard !live.isEmpty else { return }
        for execution in executions where isCancelled(execution.payload, shard: shard) {
            execution.cancellation.cancelByOperator()
        }
    }
}

extension JobRunner {
    /// The pre-run check: the settlement of a job whose jid is cancelled (`RunSteering`), which then does not run;
    /// nil for every other job (one atomic load while no cancel exists). Dead with `Cancelled` (or dropped, for a
    /// payload with `dead: false`); counted as no run (no `stat:processed`), like a job over a limit.
    func cancelledBeforeRun(_ payload: JobPayload, job: FetchedJob, logger: () -> Logger) -> RunResult? {
        guard let steering, steering.isCancelled(payload, shard: job.shard) else { return nil }
        logger().notice("cancelled before it started; sent to dead")
        return .settled(cancelledSettlement(payload, job: job), counts: [])
    }

    /// The settlement of a run that ended (threw) after an operator cancelled it: `Cancelled` in the dead set, never
    /// retried — unless the job's ledger transaction committed, which makes the job done (acknowledged). On group
    /// commit's fast path, a redo: its group runs again with savepoints, where the pre-run check settles it.
    func cancelledRun(_ payload: JobPayload, job: FetchedJob, options: JobOptions,
                      sharedTransaction: SharedTransaction?, logger: Logger) -> RunResult {
        if sharedTransaction?.claimedRow != nil { return .redo }
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
