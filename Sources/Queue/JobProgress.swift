import Foundation

/// The progress a running job last reported (`JobContext.progress(_:note:)`), as operators and services read it by jid
/// (`WorkersClient.progress(jid:)`, `workerctl jobs show`).
///
/// Redis layout (shared with the dashboard and `jobs show`): the string key `progress:<jid>` on the shard of the job's
/// queue holds `{"fraction":0.0…1.0,"note":"≤200 bytes of UTF-8","at":<epoch seconds, float>}` with a TTL of
/// `JobProgress.ttl` (24 h). Written only by the heartbeat of the process running the job, at most once per heartbeat
/// interval and only when the value changed; deleted by that heartbeat at its first beat after the run ended (the TTL
/// removes what a crashed process left). A job that never reports leaves no key.
///
/// Invariant (of every value this type holds, however the key was written): `fraction` is finite, in `0...1`; `note`
/// is nil or 1…`maxNoteBytes` bytes of UTF-8, whole characters, without control or format characters. Pure value;
/// any thread.
public struct JobProgress: Sendable, Equatable {
    /// Done so far, from 0 (nothing) to 1 (all).
    public let fraction: Double
    /// A short text for operators (`"batch 3 of 10"`), or nil.
    public let note: String?
    /// When the job reported it.
    public let at: Date

    /// Most bytes (UTF-8) of `note`; a longer note is cut at the last whole character that fits. Bytes, not
    /// characters: one character may be any number of scalars (a 1 MB "character" of combining marks).
    public static let maxNoteBytes = 200
    /// How long a progress key lives without being rewritten.
    public static let ttl: Duration = .seconds(86_400)

    /// A bounded value: `fraction` clamped to `0...1`, `note` stripped of control and format characters and cut to
    /// `maxNoteBytes` (an empty note is nil). Nil when `fraction` is NaN (refused: it says nothing).
    public init?(fraction: Double, note: String?, at: Date) {
        guard !fraction.isNaN else { return nil }
        self.fraction = min(1, max(0, fraction))
        self.note = note.flatMap(Self.boundedNote)
        self.at = at
    }

    /// `progress:<jid>`.
    public static func key(jid: String) -> String { ProgressKeys.progress(jid: jid) }

    /// `note` without control and format characters (`DisplayText.isUnsafe`: C0, DEL, C1, bidi controls, zero-width
    /// characters, the line and paragraph separators), cut to `maxNoteBytes` bytes of UTF-8 at a character boundary;
    /// nil when empty.
    static func boundedNote(_ note: String) -> String? { DisplayText.bounded(note, maxBytes: maxNoteBytes) }

    /// The JSON stored in the key.
    public var json: String {
        var object: JSONObject = ["fraction": .double(fraction)]
        if let note { object["note"] = .string(note) }
        object["at"] = .double(at.timeIntervalSince1970)
        return JSONValue.object(object).serialized()
    }

    /// Reads a stored value, bounded again (the key may have been written by anyone). Nil when it is not such a
    /// JSON object, or its fraction is missing or NaN.
    public init?(json: String) {
        guard let object = try? JSONValue.parse(json).objectValue,
              let fraction = object["fraction"]?.doubleValue else { return nil }
        let at = object["at"]?.doubleValue.flatMap { $0.isFinite ? $0 : nil } ?? 0
        self.init(fraction: fraction, note: object["note"]?.stringValue, at: Date(timeIntervalSince1970: at))
    }

    /// The progress stored for `jid` on `connection`'s Redis, or nil (never reported, expired, or the run ended).
    public static func read(_ connection: RedisConnection, jid: String) throws(RedisError) -> JobProgress? {
        guard let text = try connection.command("GET", key(jid: jid)).string else { return nil }
        return JobProgress(json: text)
    }
}
