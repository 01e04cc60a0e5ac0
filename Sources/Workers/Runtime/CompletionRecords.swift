import Foundation
import WorkersQueue

// The completion record a job leaves when it settles for good (`JobOptions.completionRecord`, `JobCompletion`): made
// here from the run's settlement, written by the settle script in the call that takes the job off its in-flight list.

extension JobRunner {
    /// `item` with the completion record its settlement writes (`FetchedJob.completion`), when the job settles for good
    /// (done, dead, cancelled: not a retry, a give-back or a reschedule) and its class keeps a record; else `item`
    /// unchanged. One dictionary lookup per job while some class keeps records, none otherwise. `payload` is the job's
    /// parsed payload (nil: unreadable, no record). Called by the thread that made the settlement (a pool thread, the
    /// watchdog) before it queues it.
    func withCompletionRecord(_ item: SettlementQueue.Item, payload: JobPayload?, now: Double = Clock.now()) -> SettlementQueue.Item {
        guard registry.keepsCompletionRecords, let payload, let ttl = registry.completionTTL(for: payload.className),
              let jid = payload.jid,
              let state = Self.completionState(item.settlement, counts: item.counts,
                                               cancelled: { steering?.isCancelled(payload, job: item.job) ?? false })
        else { return item }
        // Runs so far: the payload's earlier runs (`retry_count + 1`) and this one, if the job ran.
        let earlier = (payload.retryCount ?? -1) + 1
        let record = JobCompletion(state: state, className: payload.className, queue: item.job.queue,
                                   finishedAt: Date(timeIntervalSince1970: now),
                                   attempts: earlier + (item.counts.contains(.processed) ? 1 : 0))
        var job = item.job
        job.completion = CompletionWrite(jid: jid, record: record, ttl: ttl)
        return SettlementQueue.Item(job: job, settlement: item.settlement, counts: item.counts)
    }

    /// How a settlement ends a job, nil when it does not end it. A dead entry that records a cancel
    /// (`error_class` `Cancelled`) is cancelled; a drop is cancelled when the job did not run (the pre-run check's
    /// drop of a `dead: false` payload) or `cancelled()` says its jid is cancelled (a run stopped by its cancel),
    /// else dead (a failure with `retry: false`).
    static func completionState(_ settlement: Settlement, counts: RunCounts, cancelled: () -> Bool) -> JobCompletion.State? {
        switch settlement {
        case .ack:
            return .done
        case .dead(let json):
            return (try? JobPayload(parsing: json))?.errorClass == JobCancels.errorClass ? .cancelled : .dead
        case .drop:
            return counts.isEmpty || cancelled() ? .cancelled : .dead
        case .retry, .requeue, .schedule:
            return nil
        }
    }
}
