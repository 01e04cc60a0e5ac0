/// The key of a running job's progress (`JobProgress`). Immutable; any thread.
package enum ProgressKeys {
    /// STRING `progress:<jid>`: the JSON of `JobProgress`, written by the heartbeat of the process running the job.
    package static func progress(jid: String) -> String { "progress:" + jid }
}
