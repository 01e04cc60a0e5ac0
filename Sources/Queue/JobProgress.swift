import Foundation

/// The progress a running job last reported (`JobContext.progress(_:note:)`), as operators and services read it by jid
/// (`WorkersClient.progress(jid:)`, `workerctl jobs show`).
///
/// Redis layout (shared with the dashboard and `jobs show`): the string key `progress:<jid>` on the shard of the job's
/// queue holds `{"fraction":0.0…1.0,"note":"≤200 characters","at":<epoch seconds, float>}` with a TTL of
/// `JobProgress.ttl` (24 h). Written only by the heartbeat of the process running the job, at most once per heartbeat
/// interval and only when the value changed; deleted by that heartbeat at its first beat after the run ended (the TTL
/// removes what a crashed process left). A job that never reports leaves no key.
///
/// Invariant (of every value this type holds, however the key was written): `fraction` is finite, in `0...1`; `note`
/// is nil or 1…`maxNoteCharacters` characters without control characters. Pure value; any thread.
public struct JobProgress: Sendable, Equatable {
    /// Done so far, from 0 (nothing) to 1 (all).
    public let fraction: Double
    /// A short text for operators (`"batch 3 of 10"`), or nil.
    public let note: String?
    /// When the job reported it.
    public let at: Date

    /// Most characters (grapheme clusters) of `note`; a longer note is cut there.
    public static let maxNoteCharacters = 200
    /// How long a progress key lives without being rewritten.
    public static let ttl: Duration = .seconds(86_400)

    /// A bounded value: `fraction` clamped to `0...1`, `note` stripped of control characters and cut to
    /// `maxNoteCharacters` (an empty note is nil). Nil when `fraction` is NaN (refused: it says nothing).
    public init?(fraction: Double, note: String?, at: Date) {
        guard !fraction.isNaN else { return nil }
        self.fraction = min(1, max(0, fraction))
        self.note = note.flatMap(Self.boundedNote)
        self.at = at
    }

    /// `progress:<jid>`.
    public static func key(jid: String) -> String { "progress:" + jid }

    /// `note` without control characters (C0, DEL, C1, and the Unicode line and paragraph separators), cut to
    /// `maxNoteCharacters` whole characters (never inside a UTF-8 sequence or a grapheme cluster); nil when empty.
    static func boundedNote(_ note: String) -> String? {
        var out = ""
        var count = 0
        for character in note {
            if count == maxNoteCharacters { break }
            if character.unicodeScalars.contains(where: { isControl($0) }) { continue }
            out.append(character)
            count += 1
        }
        return out.isEmpty ? nil : out
    }

    private static func isControl(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x00...0x1F, 0x7F...0x9F, 0x2028, 0x2029: return true
        default: return scalar.properties.generalCategory == .control
        }
    }

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
