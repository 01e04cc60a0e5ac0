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
            "jid": .string(producerJid(in: raw) ?? Identifiers.jid()), "created_at": .double(now), "enqueued_at": .double(now),
            "error_message": .string(reason), "error_class": .string(className), "failed_at": .double(now),
            "retry_count": 0,
            "raw_payload": .string(String(decoding: raw.prefix(100_000), as: UTF8.self)),
        ]
        return JSONValue.object(fields).serialized()
    }

    /// The producer's jid in bytes that do not parse as a job, when it can be read: the string value of a `"jid"`
    /// key of the outermost object (a scan that tracks strings, escapes and nesting, so a `"jid"` inside `args` is
    /// not taken), made of 1…128 printable ASCII characters without `"` or `\` (nothing an operator's terminal would
    /// act on). Nil otherwise: the dead entry then gets a new jid. `jobs show JID` finds the dead entry by the jid
    /// its producer logged.
    public static func producerJid(in raw: [UInt8]) -> String? {
        var depth = 0
        var index = 0
        var expectingKey = false
        let count = raw.count
        /// The end (index of the closing quote) of the string starting at `start` (a quote), or nil.
        func stringEnd(from start: Int) -> Int? {
            var at = start + 1
            while at < count {
                switch raw[at] {
                case UInt8(ascii: "\\"): at += 2
                case UInt8(ascii: "\""): return at
                default: at += 1
                }
            }
            return nil
        }
        func skipSpace(_ at: inout Int) {
            while at < count, raw[at] == 0x20 || raw[at] == 0x09 || raw[at] == 0x0A || raw[at] == 0x0D { at += 1 }
        }
        while index < count {
            let byte = raw[index]
            switch byte {
            case UInt8(ascii: "{"):
                depth += 1
                expectingKey = depth == 1
                index += 1
            case UInt8(ascii: "["):
                depth += 1
                index += 1
            case UInt8(ascii: "}"), UInt8(ascii: "]"):
                depth -= 1
                index += 1
            case UInt8(ascii: ","):
                expectingKey = depth == 1
                index += 1
            case UInt8(ascii: "\""):
                guard let end = stringEnd(from: index) else { return nil }
                if depth == 1 && expectingKey && raw[(index + 1)..<end].elementsEqual("jid".utf8) {
                    var at = end + 1
                    skipSpace(&at)
                    guard at < count, raw[at] == UInt8(ascii: ":") else { return nil }
                    at += 1
                    skipSpace(&at)
                    guard at < count, raw[at] == UInt8(ascii: "\""), let valueEnd = stringEnd(from: at) else { return nil }
                    let value = raw[(at + 1)..<valueEnd]
                    guard (1...128).contains(value.count),
                          value.allSatisfy({ $0 >= 0x21 && $0 <= 0x7E && $0 != UInt8(ascii: "\"") && $0 != UInt8(ascii: "\\") })
                    else { return nil }
                    return String(decoding: value, as: UTF8.self)
                }
                expectingKey = false
                index = end + 1
            default:
                index += 1
            }
        }
        return nil
    }

    /// Why `raw` cannot be read as a job, or nil when it can.
    public static func reason(_ raw: [UInt8]) -> String? {
        do { _ = try JobPayload(parsing: raw); return nil } catch { return error.description }
    }
}
