/// The `dead` entry for a payload the runtime cannot read as a job (not JSON, no class, a runtime counter out of
/// range, …): a readable envelope that any Sidekiq reader can show, with the reason in `error_message` and the
/// original text (its first 100,000 bytes) in `raw_payload`.
///
/// Every path that finds such a payload — the runner, the orphan sweep, the move of due `retry`/`schedule`
/// entries — writes this same envelope, so an operator sees why in `workerctl jobs dead` and on the dashboard.
/// Pure; any thread.
package enum UnreadableJob {
    /// The envelope's `class`.
    public static let className = "BadPayload"

    public static func deadEntry(raw: [UInt8], queue: String, reason: String, now: Double = Clock.now()) -> String {
        let fields: JSONObject = [
            "retry": false, "queue": .string(queue), "class": .string(className), "args": [],
            "jid": .string(Identifiers.jid()), "created_at": .double(now), "enqueued_at": .double(now),
            "error_message": .string(reason), "error_class": .string(className), "failed_at": .double(now),
            "retry_count": 0,
            "raw_payload": .string(String(decoding: raw.prefix(100_000), as: UTF8.self)),
        ]
        return JSONValue.object(fields).serialized()
    }

    /// Why `raw` cannot be read as a job, or nil when it can.
    public static func reason(_ raw: [UInt8]) -> String? {
        do { _ = try JobPayload(parsing: raw); return nil } catch { return error.description }
    }
}
