/// The key of a finished job's completion record (`JobCompletion`, opted in per class). Immutable; any thread.
package enum CompletionKeys {
    /// STRING `completion:<jid>`: the JSON of `JobCompletion`, written with a TTL by the settle script
    /// (`Scripts.complete`) of the run that settled the job for good.
    package static func record(jid: String) -> String { "completion:" + jid }
}
