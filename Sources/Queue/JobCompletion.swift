import Foundation

/// What became of a finished job, as its completion record says (`WorkersClient.status(jid:)` without a ledger).
///
/// Redis layout: the string key `completion:<jid>` (`CompletionKeys.record`) on the shard of the job's queue holds
/// `{"state":"done"|"dead"|"cancelled","class":"…","queue":"…","finished_at":<epoch seconds>,"attempts":N}` with a
/// TTL the job's class chose (`JobOptions.completionRecord`, clamped into `ttlRange`). Written only for classes that opt
/// in, by the settle script of the run that settled the job for good, in the same Lua call that takes it off the
/// in-flight list (so a record exists only for a settlement that took effect). It holds no arguments and no error
/// text: only ids, the class and queue names (each cut to `maxNameBytes`), a time and a count.
///
/// Invariant (of every value this type holds, however the key was written): `className` and `queue` are at most
/// `maxNameBytes` bytes without control characters, `attempts` is in `0...Bounded.maxCount`, `finishedAt` is a time
/// `Bounded.epochSeconds` accepts. Pure value; any thread.
public struct JobCompletion: Sendable, Equatable {
    /// How the job settled for good.
    public enum State: String, Sendable, CaseIterable {
        /// Its run succeeded (or a redelivery found it already applied).
        case done
        /// It failed for good: sent to `dead` (retries used up, bad input, a timeout on its last attempt), or dropped
        /// after a failure (`retry: false`).
        case dead
        /// An operator cancelled it (`jobs cancel`, `WorkersClient.cancel`) and a worker settled it as cancelled.
        case cancelled
    }

    public let state: State
    public let className: String
    public let queue: String
    public let finishedAt: Date
    /// Runs it took (0: cancelled before its first run).
    public let attempts: Int

    /// Most bytes (UTF-8) of `className` and `queue` in a record; longer ones are cut at a character boundary.
    public static let maxNameBytes = 200
    /// Most bytes a readable record has (two names at `maxNameBytes`, escaped, and a few numbers); a longer value is
    /// not parsed.
    public static let maxRecordBytes = 4096
    /// The TTLs a record may have: a longer one is clamped to 30 days, a shorter one to a minute (a record that
    /// expires before anyone can read it says nothing).
    public static let ttlRange: ClosedRange<Int> = 60...(30 * 86_400)

    public init(state: State, className: String, queue: String, finishedAt: Date, attempts: Int) {
        self.state = state
        self.className = DisplayText.bounded(className, maxBytes: Self.maxNameBytes) ?? ""
        self.queue = DisplayText.bounded(queue, maxBytes: Self.maxNameBytes) ?? ""
        self.finishedAt = Date(timeIntervalSince1970: Bounded.epochSeconds(finishedAt.timeIntervalSince1970) ?? 0)
        self.attempts = Bounded.int(attempts, in: 0...Bounded.maxCount)
    }

    /// `completion:<jid>`.
    public static func key(jid: String) -> String { CompletionKeys.record(jid: jid) }

    /// A TTL in whole seconds inside `ttlRange` (NaN, negative and huge durations clamped, never a trap).
    public static func ttlSeconds(_ ttl: Duration) -> Int {
        Bounded.int(Bounded.seconds(ttl.inSeconds, max: Double(ttlRange.upperBound)).rounded(.up), in: ttlRange)
    }

    /// The JSON stored in the key.
    public var json: String {
        let object: JSONObject = ["state": .string(state.rawValue), "class": .string(className), "queue": .string(queue),
                                  "finished_at": .double(finishedAt.timeIntervalSince1970), "attempts": .int(Int64(attempts))]
        return JSONValue.object(object).serialized()
    }

    /// What the key holds, read from its `GET` reply: nothing, a record, or a value that is not one (wrong type,
    /// garbage, a state this release does not know), with why.
    public enum Reading: Sendable, Equatable {
        case none
        case record(JobCompletion)
        case unreadable(String)
    }

    /// Reads the reply of `GET completion:<jid>` (any reply: a hostile key may be a hash, a list, garbage).
    /// Never traps; the reason names the problem, never the value.
    public static func read(_ reply: RedisReply) -> Reading {
        if reply.isNull { return .none }
        if let bytes = reply.bytes, bytes.count > maxRecordBytes {
            return .unreadable("the completion record is \(bytes.count) bytes, more than a record's \(maxRecordBytes)")
        }
        guard let text = reply.string else {
            return .unreadable("the completion record is not a string (another type, or an error reply)")
        }
        guard let object = try? JSONValue.parse(text).objectValue else {
            return .unreadable("the completion record is not a JSON object (\(text.utf8.count) bytes)")
        }
        guard let state = object["state"]?.stringValue.flatMap(State.init(rawValue:)) else {
            return .unreadable("the completion record has no known state")
        }
        guard let className = object["class"]?.stringValue, let at = object["finished_at"]?.doubleValue,
              let finished = Bounded.epochSeconds(at) else {
            return .unreadable("the completion record lacks its class or a finish time")
        }
        let attempts = object["attempts"]?.intValue.map { Bounded.int($0, in: 0...Bounded.maxCount) } ?? 0
        return .record(JobCompletion(state: state, className: className, queue: object["queue"]?.stringValue ?? "",
                                     finishedAt: Date(timeIntervalSince1970: finished), attempts: attempts))
    }
}

/// A completion record to write with a job's settlement (`FetchedJob.completion`): the jid whose key it goes to, the
/// JSON (`JobCompletion.json`) and its TTL in seconds (inside `JobCompletion.ttlRange`). Pure value; any thread.
package struct CompletionWrite: Sendable, Equatable {
    package let jid: String
    package let json: String
    package let ttlSeconds: Int

    package init(jid: String, record: JobCompletion, ttl: Duration) {
        self.jid = jid
        self.json = record.json
        self.ttlSeconds = JobCompletion.ttlSeconds(ttl)
    }
}
