/// The keys of a cancel (`JobCancels`, docs/workerctl.md "Cancel a job"). Immutable; any thread.
package enum CancelKeys {
    /// ZSET of live marks: member the jid, score the epoch seconds at which the mark expires.
    package static let set = "cancels"
    /// STRING `cancelled-<jid>`, value the epoch seconds of the request (Sidekiq's documented `cancelled?` key).
    package static func mark(jid: String) -> String { "cancelled-" + jid }
}
