import Foundation
import WorkersQueue

extension WorkersClient {
    /// The progress job `jid` last reported while it runs (`JobContext.progress(_:note:)`), or nil: it never reported,
    /// it is not running (its key is deleted one heartbeat after the run ends), or it reported less than a heartbeat
    /// interval ago. Read on every shard (the newest wins); bounded however the key was written (`JobProgress`).
    public func progress(jid: String) async throws -> JobProgress? {
        try await withEachShard { try JobProgress.read($0, jid: jid) }.compactMap(\.value).max { $0.at < $1.at }
    }

    /// Cancels job `jid` on every shard (`JobAdmin.cancel(jid:)`, docs/workerctl.md "Cancel a job"): a job waiting in
    /// the scheduled or retry set or in its queue goes to the dead set with `error_class` `Cancelled`; a running one is
    /// told within one heartbeat interval; one found nowhere is marked, so it never starts for 7 days. Returns what
    /// was done on each shard, default first.
    @discardableResult
    public func cancel(jid: String) async throws -> [OnShard<CancelOutcome>] {
        try JobAdmin.validate(jid: jid)
        return try await withEachShard { try JobAdmin(connection: $0).cancel(jid: jid) }
    }
}
