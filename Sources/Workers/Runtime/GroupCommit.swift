import Foundation
import Logging
import WorkersQueue
import WorkersStorage

/// Group commit: how a pool thread runs the group-commit jobs (`JobOptions.groupCommit`) it takes — in one
/// PostgreSQL transaction and one COMMIT per group, on the fast path (ledger rows claimed in rounds, jobs run
/// without savepoints, writes deferred) or, when that cannot commit, on the savepoint path. `runGroup` states
/// both paths and their invariants. The threads themselves, and the run of one job, are `JobPool`'s.
///
/// Thread rules: one value per pool thread, made by that thread (`JobPool.loop`, when the process has a
/// database) and used only on it; during a group it owns the pooled PostgreSQL connection it checked out. It
/// shares only the pool's hand-offs: takes from `buffer` into the thread's slot (`tryTake(holdingIn:)`), runs
/// each job through `JobPool.runOne` (which publishes it in the slot), and queues every settlement and give-back
/// through `JobPool.settle` / `JobPool.giveBack` (so the slot's `held` order holds).
///
/// Invariant: a job of a group is acknowledged only after its group's COMMIT succeeded, and is listed in the
/// slot's `held` from its take until its settlement or give-back (both paths in full: `runGroup`).
struct GroupCommit {
    typealias TakenJob = JobPool.TakenJob
    typealias RunMetrics = JobPool.RunMetrics

    /// The pool this thread belongs to: runs each job (`runOne`) and queues its settlement (`settle`, `giveBack`).
    let jobPool: JobPool
    let runner: JobRunner
    let configuration: WorkerConfiguration
    let buffer: JobBuffer
    let metrics: RuntimeMetrics
    let logger: Logger
    /// The process's database (`JobRunner.database`); each group checks one connection out of its pool.
    let database: JobDatabase
    /// The thread's slot: its run, and the jobs it holds (`held`) from their take until their settlement.
    let slot: RunningJobs.Slot
    let threadID: String

    /// Group commit: runs `first` and the group-commit jobs already waiting behind it in the buffer (at
    /// most `commitBatch` jobs, taking more while its transaction is open less than `commitWindow`
    /// seconds) in one transaction on one pooled connection, and commits once.
    ///
    /// Fast path (`runClaimed`): the jobs are taken up front; one statement sent with BEGIN inserts all
    /// their ledger rows (`JobLedger.claimStatement`); a job whose row already existed is not run (its
    /// earlier delivery committed, or it is listed twice) and is acknowledged after the COMMIT as
    /// `alreadyApplied`; the others run one after another directly in the transaction, without a
    /// savepoint. If any of them does not succeed (it threw, even if it caught its own error; its run
    /// ended in retry, dead…; it left the transaction aborted), or the claim fails on a live connection
    /// (e.g. a deadlock between two claims), the whole transaction is rolled back and the group runs
    /// again through the savepoint path (`runWithSavepoints`: each job in its own savepoint, so a failing
    /// job undoes only its own work and the others still commit). On the fast path the jobs' `write`s are deferred
    /// (`PostgresConnection.deferringWrites`): they go with the next statement that reads — another job's read, the
    /// next round's claim, the COMMIT — and one that fails there is handled like a job that did not succeed (rolled
    /// back, run again through savepoints, where writes run at once and the failing job fails alone); before a job
    /// that runs in a savepoint of its own they are sent first. `JobOptions.groupCommit`'s contract (a
    /// job's only effects are its ledger transaction) makes that second run safe. Jobs without a jid or
    /// with limits to pass run in a savepoint of their own within the fast path's transaction (a run that
    /// ends without its body, over a limit, must not leave a claimed row behind).
    ///
    /// Invariants, on both paths: a job whose effects are in the open transaction is acknowledged only after
    /// COMMIT succeeded; from its take until its settlement every job of the group is listed in the slot's
    /// `held` (`RunningJobs.Slot`), so a reconciliation never takes it for lost. A job that failed in its own savepoint is
    /// settled at once (its savepoint was rolled back). If the checkout, BEGIN, the COMMIT or the connection
    /// fails (`GroupCommitBroken`), every job of the group not yet settled gets a failure settlement (retry),
    /// whether it ran or not; the ledger makes the retry apply once. Two concurrent deliveries of one jid (on
    /// two threads or processes): the ledger's primary key lets exactly one claim or insert its row; the other
    /// waits for that transaction and then skips the job (or runs it, if that transaction rolled back). When the
    /// watchdog (or shutdown) abandons a run on the fast path, the transaction is rolled back, the group's other
    /// jobs are given back to their queue unchanged, and the thread retires. Only this pool thread touches the
    /// connection and the group.
    ///
    /// Returns a job it took from the buffer that cannot join a group (to run next), and whether the
    /// thread must retire (the watchdog abandoned one of the runs).
    func runGroup(first: TakenJob, metricHandles: inout [String: RuntimeMetrics.JobHandles]) -> (carried: TakenJob?, retire: Bool) {
        var carried: TakenJob?
        var members = [GroupMember(taken: first, claim: claim(for: first))]
        takeWaiting(into: &members, carried: &carried)
        while true {
            switch runClaimed(&members, carried: &carried, metricHandles: &metricHandles) {
            case .settled(let next):
                // The window closed before `next` ran: they form the next transaction.
                guard !next.isEmpty else { return (carried, false) }
                members = next
            case .abandoned:
                return (carried, true)
            case .redo(let jobs, let reason):
                logger.debug("group rolled back; running it again with a savepoint per job",
                             metadata: ["jobs": "\(jobs.count)", "reason": "\(reason)"])
                let retire = runWithSavepoints(jobs, metricHandles: &metricHandles)
                return (carried, retire)
            }
        }
    }

    /// One job of a group, from its take until its settlement. `claim` is its ledger row on the fast path
    /// (`claim(for:)`, made once at the take). `ran` is set once it ran to an acknowledgement (or was found
    /// already applied): that acknowledgement waits for the COMMIT.
    private struct GroupMember {
        let taken: TakenJob
        let claim: JobLedger.Claim?
        var ran: RunMetrics? = nil
    }

    /// How a group's fast path ended.
    private enum FastPathEnd {
        /// Every job of the transaction is settled (committed, or failed with it); `next` were taken but not run
        /// (the window closed first; their claimed rows deleted before the COMMIT): they run in another one.
        case settled(next: [GroupMember])
        /// Rolled back: these jobs (none of them settled) run again through the savepoint path.
        case redo([TakenJob], reason: String)
        /// The watchdog abandoned a run: rolled back, the others given back; the thread must retire.
        case abandoned
    }

    /// Moves group-commit jobs already waiting in the buffer into `members`, up to `commitBatch` in all; a
    /// job that cannot join a group ends the taking and becomes `carried`. Each one is listed in
    /// its slot's `held` from its take (`JobBuffer.tryTake(holdingIn:)`). Returns how many it added.
    @discardableResult
    private func takeWaiting(into members: inout [GroupMember], carried: inout TakenJob?) -> Int {
        var added = 0
        while carried == nil, members.count < configuration.commitBatch,
              let candidate = buffer.tryTake(holdingIn: slot).map(TakenJob.init) {
            guard runner.sharesCommits(candidate.payload) else {
                carried = candidate
                break
            }
            members.append(GroupMember(taken: candidate, claim: claim(for: candidate)))
            added += 1
        }
        return added
    }

    /// The ledger row the fast path claims for a job, or nil when the job must run in a savepoint of its
    /// own: it has no jid, or limits to pass (a run over a limit ends without its body and must not leave
    /// a claimed row behind).
    private func claim(for taken: TakenJob) -> JobLedger.Claim? {
        guard let payload = taken.payload, let jid = payload.jid,
              let options = runner.registry.options(for: payload.className), options.limits.isEmpty else { return nil }
        return JobLedger.Claim(jid: jid, jobClass: payload.className, queue: taken.job.queue)
    }

    /// The fast path of `runGroup` (see there): rounds of claim-then-run in one transaction, then COMMIT.
    private func runClaimed(_ members: inout [GroupMember], carried: inout TakenJob?,
                            metricHandles: inout [String: RuntimeMetrics.JobHandles]) -> FastPathEnd {
        let openedAt = Clock.now()
        var next: [GroupMember] = []  // taken, not run: the window closed first
        do {
            try database.pool.withConnection { connection in
                // The jobs' `write`s wait and go with the next statement that reads (the next job's read, the
                // next round's claim, the COMMIT): a failed one makes the group run again through savepoints,
                // where every write runs at once (below, `runRound`, and `sendDeferredWritesBefore`).
                try connection.deferringWrites {
                    var roundStart = 0
                    repeat {
                        next = try runRound(&members, from: roundStart, begin: roundStart == 0, openedAt: openedAt,
                                            connection: connection, metricHandles: &metricHandles)
                        roundStart = members.count
                    } while next.isEmpty
                        && members.count < configuration.commitBatch
                        && Clock.now() - openedAt < configuration.commitWindow.inSeconds
                        && takeWaiting(into: &members, carried: &carried) > 0
                    let commit: PostgresRows
                    do { commit = try connection.query("COMMIT") } catch let error as PostgresError where error.deferred {
                        // A job's deferred write failed, so the COMMIT was skipped: no job is to blame but that one.
                        guard connection.isOpen, !error.isConnectionFailure else { throw error }
                        rollBack(connection)
                        throw FastPathUndone(reason: "a deferred write failed: \(error)")
                    }
                    if commit.commandTag == "ROLLBACK" { throw GroupCommitBroken() }
                }
            }
        } catch let undone as FastPathUndone {
            return .redo((members + next).map(\.taken), reason: undone.reason)
        } catch is FastPathAbandoned {
            jobPool.giveBack((members + next).map(\.taken.job), heldIn: slot)
            return .abandoned
        } catch {
            failAll((members + next).map { ($0.taken, $0.ran) }, error)
            return .settled(next: [])
        }
        for member in members {
            guard let ran = member.ran else {
                // Every member runs before COMMIT; were one not to, it goes back rather than being lost.
                jobPool.giveBack([member.taken.job], heldIn: slot)
                continue
            }
            ran.record(failed: false)
            jobPool.settle(.init(job: member.taken.job, settlement: .ack, counts: .processed), of: member.taken, heldIn: slot)
        }
        return .settled(next: next)
    }

    /// One round of the fast path: claims the ledger rows of `members[start...]` in one statement (with
    /// BEGIN in the same round trip when `begin`), then runs each of them in the open transaction — until the
    /// transaction has been open `commitWindow` seconds: the members not run by then leave `members`, their
    /// claimed rows are deleted, and they are returned, to run in the next transaction (so a group of slow
    /// jobs holds its transaction, and risks its members' work, about as long as the window, as before the
    /// fast path, when jobs joined a group only while it was younger than the window).
    /// Throws `FastPathUndone` (after ROLLBACK) when the group must run again through savepoints,
    /// `FastPathAbandoned` (after ROLLBACK, the abandoned job removed from `members`) when the watchdog
    /// settled a run, `GroupCommitBroken` or the statement's error when the connection is lost.
    private func runRound(_ members: inout [GroupMember], from start: Int, begin: Bool, openedAt: Double,
                          connection: PostgresConnection,
                          metricHandles: inout [String: RuntimeMetrics.JobHandles]) throws -> [GroupMember] {
        let claims = members[start...].compactMap(\.claim)
        var statements: [PostgresConnection.Statement] = begin ? [.init("BEGIN")] : []
        if !claims.isEmpty { statements.append(JobLedger.claimStatement(claims)) }
        var unused = Set<String>()  // rows this round inserted whose job has not run yet
        if !statements.isEmpty {
            do {
                let results = try connection.pipeline(statements)
                if !claims.isEmpty, let rows = results.last { unused = try JobLedger.claimedJids(rows) }
            } catch {
                guard connection.isOpen, !PostgresError.isConnectionFailure(error) else { throw error }
                rollBack(connection)
                throw FastPathUndone(reason: "the claim of the group's ledger rows failed: \(error)")
            }
        }
        var index = start
        while index < members.count {
            if index > 0, Clock.now() - openedAt >= configuration.commitWindow.inSeconds {
                return try cut(&members, from: index, unused: unused, connection: connection)
            }
            let taken = members[index].taken
            let claim = members[index].claim
            if let claim, unused.remove(claim.jid) == nil {
                // Its row was there before this round's claim: an earlier delivery committed it, a concurrent
                // one did while the claim waited, or another job of this group has the same jid.
                members[index].ran = alreadyApplied(taken, metricHandles: &metricHandles)
                index += 1
                continue
            }
            if claim == nil { try sendDeferredWritesBefore(taken, connection: connection) }
            let row = claim == nil ? nil : ClaimedLedgerRow()
            guard let ran = jobPool.runOne(taken, slot: slot, threadID: threadID, metricHandles: &metricHandles,
                                           sharedTransaction: SharedTransaction(connection: connection, claimedRow: row)) else {
                members.remove(at: index)  // the watchdog settled it
                rollBack(connection)
                throw FastPathAbandoned()
            }
            guard connection.isOpen, connection.isInTransaction else { throw GroupCommitBroken() }
            if let row {
                guard case .settled(.ack, _) = ran.result, !row.bodyFailed, !connection.isTransactionFailed else {
                    rollBack(connection)
                    throw FastPathUndone(reason: "job \(claim?.jid ?? "-") did not succeed")
                }
                members[index].ran = ran.metrics
            } else if case .settled(.ack, _) = ran.result {
                members[index].ran = ran.metrics
            } else {
                // Failed in its own savepoint, which was rolled back: settled now, as on the savepoint path.
                jobPool.settle(taken, after: ran, heldIn: slot)
                members.remove(at: index)
                index -= 1
            }
            if connection.isTransactionFailed {
                rollBack(connection)
                throw FastPathUndone(reason: "a statement failed outside any job's savepoint")
            }
            index += 1
        }
        return []
    }

    /// Ends a round at `index` (the window closed): removes `members[index...]` from the transaction, deletes
    /// the ledger rows this round claimed for them (`unused`), and returns them. If the delete fails, they stay
    /// members and the error is handled as the claim's (`FastPathUndone` on a live connection).
    private func cut(_ members: inout [GroupMember], from index: Int, unused: Set<String>,
                     connection: PostgresConnection) throws -> [GroupMember] {
        let rest = Array(members[index...])
        let claimed = rest.compactMap(\.claim?.jid).filter(unused.contains)
        if !claimed.isEmpty {
            do { _ = try connection.pipeline([JobLedger.unclaimStatement(jids: claimed)]) } catch {
                guard connection.isOpen, !PostgresError.isConnectionFailure(error) else { throw error }
                rollBack(connection)
                throw FastPathUndone(reason: "the unclaim of the rows of jobs left for the next transaction failed: \(error)")
            }
        }
        members.removeSubrange(index...)
        return rest
    }

    /// Sends the writes the group's earlier jobs deferred before `taken`, a job that runs in a savepoint of its
    /// own: were one of them to fail inside that job's statements, the job would be failed (and settled) for it.
    /// A failed write makes the group run again through savepoints (`FastPathUndone`, after ROLLBACK).
    private func sendDeferredWritesBefore(_ taken: TakenJob, connection: PostgresConnection) throws {
        do { try connection.sendDeferredWrites() } catch {
            guard connection.isOpen, !PostgresError.isConnectionFailure(error) else { throw error }
            rollBack(connection)
            throw FastPathUndone(reason: "a deferred write failed before job \(taken.payload?.jid ?? "-"): \(error)")
        }
    }

    /// A job of the fast path whose ledger row already existed: acknowledged after the COMMIT without
    /// running, like `JobRunner`'s redelivery check. Returns its figures (a run of no time).
    private func alreadyApplied(_ taken: TakenJob, metricHandles: inout [String: RuntimeMetrics.JobHandles]) -> RunMetrics {
        let className = taken.payload?.className ?? "_unreadable"
        logger.info("already applied; acknowledged without running",
                    metadata: ["jid": "\(taken.payload?.jid ?? "-")", "class": "\(className)", "queue": "\(taken.job.queue)"])
        return RunMetrics(handles: metrics.job(className: className, queue: taken.job.queue, cache: &metricHandles),
                          seconds: 0)
    }

    /// Rolls the group's transaction back (best effort: if the connection broke, the server rolled it back).
    private func rollBack(_ connection: PostgresConnection) {
        if connection.isOpen { _ = try? connection.execute("ROLLBACK") }
    }

    /// The group's transaction was lost before COMMIT (`error`): every job listed, run or not, is failed
    /// and retried (a job that ran has its figures recorded as failed).
    private func failAll(_ jobs: [(taken: TakenJob, ran: RunMetrics?)], _ error: any Error) {
        if jobs.contains(where: { $0.ran != nil }) {
            logger.warning("group commit failed; its jobs will be retried",
                           metadata: ["jobs": "\(jobs.count)", "error": "\(error)"])
        }
        for (taken, ran) in jobs {
            ran?.record(failed: true)
            guard let payload = taken.payload else { continue }  // only parsed jobs share commits
            let options = runner.registry.options(for: payload.className) ?? JobOptions()
            let settlement = runner.settlement(after: error, payload: payload, job: taken.job, options: options, logger: logger)
            jobPool.settle(.init(job: taken.job, settlement: settlement, counts: [.processed, .failed]), of: taken, heldIn: slot)
        }
    }

    /// The savepoint path: runs `jobs` (group-commit jobs taken from the buffer, none settled) one after
    /// another in one transaction, each in its own savepoint (`JobLedger.runOnce` nested), then commits once.
    /// A job that fails is settled at once (its savepoint undid its work); the others are acknowledged after
    /// the COMMIT; if the transaction is lost, every job not yet settled is retried. When the watchdog
    /// abandons a run, what the others did is committed, the jobs not yet run are given back, and it
    /// returns true: the thread must retire.
    private func runWithSavepoints(_ jobs: [TakenJob], metricHandles: inout [String: RuntimeMetrics.JobHandles]) -> Bool {
        var awaiting: [(taken: TakenJob, ran: RunMetrics?)] = []
        var next = 0
        var retire = false
        do {
            try database.pool.withConnection { connection in
                try connection.execute("BEGIN")
                while next < jobs.count {
                    let taken = jobs[next]
                    next += 1
                    guard let ran = jobPool.runOne(taken, slot: slot, threadID: threadID, metricHandles: &metricHandles,
                                                   sharedTransaction: SharedTransaction(connection: connection, claimedRow: nil)) else {
                        // The watchdog settled this run; commit what the others did, then retire.
                        retire = true
                        break
                    }
                    if case .settled(.ack, _) = ran.result {
                        awaiting.append((taken, ran.metrics))
                    } else {
                        jobPool.settle(taken, after: ran, heldIn: slot)
                    }
                    guard connection.isOpen, connection.isInTransaction, !connection.isTransactionFailed else {
                        throw GroupCommitBroken()
                    }
                }
                let commit = try connection.query("COMMIT")
                if commit.commandTag == "ROLLBACK" { throw GroupCommitBroken() }
            }
        } catch {
            let unrun = retire ? [] : jobs[next...].map { (taken: $0, ran: RunMetrics?.none) }
            failAll(awaiting + unrun, error)
            if retire { jobPool.giveBack(jobs[next...].map(\.job), heldIn: slot) }
            return retire
        }
        for (taken, ran) in awaiting {
            ran?.record(failed: false)
            jobPool.settle(.init(job: taken.job, settlement: .ack, counts: .processed), of: taken, heldIn: slot)
        }
        if retire { jobPool.giveBack(jobs[next...].map(\.job), heldIn: slot) }
        return retire
    }
}

/// The fast path of group commit cannot commit what it has run (a job did not succeed, or the claim
/// failed on a live connection): the transaction was rolled back and the group runs again through
/// savepoints. Internal to `GroupCommit`; never settles a job.
private struct FastPathUndone: Error {
    let reason: String
}

/// The watchdog (or shutdown) abandoned a run on the fast path: the transaction was rolled back.
private struct FastPathAbandoned: Error {}

/// A group-commit transaction can no longer commit: the connection broke, or a statement failed
/// outside any job's savepoint. Every job awaiting its commit is retried.
struct GroupCommitBroken: Error, CustomStringConvertible {
    var description: String { "the shared group-commit transaction was lost before COMMIT; the jobs of the group are retried" }
}
