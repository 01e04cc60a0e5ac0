/// The `dead` stub of a payload over the fetch size limit (issue 51, review L7), built in Swift for a payload that a
/// blocking wait (`BLMOVE`) brought whole: the worker settles it as dead with this stub instead of running it. The
/// fetch script builds the same stub in Lua for the payloads it takes (`OversizedScripts`, which states the shape);
/// `OversizedJobTests` holds the two to the same fields.
///
/// Nothing here decodes the payload: `class`, `jid` and `bid` are read by the same bounded pattern as the Lua's,
/// over the first and last `searchBytes` bytes. Pure; any thread.
package enum OversizedJob {
    /// The stub's `error_class`.
    public static let errorClass = "PayloadTooLarge"
    /// How many leading bytes of the payload the stub keeps (`payload_head`).
    public static let headBytes = 1024
    /// How far from each end of the payload `class`, `jid` and `bid` are looked for.
    public static let searchBytes = 4096

    /// The stub of `raw`, fetched from `queue`, over `limit` bytes, dead at `now`, and its jid (the producer's, or a
    /// new one when none can be read).
    public static func deadEntry(raw: [UInt8], queue: String, limit: Int,
                                 now: Double = Clock.now()) -> (jid: String, entry: String) {
        let stubJid = jid(in: raw) ?? Identifiers.jid()
        let fields: JSONObject = [
            "retry": false, "queue": .string(queue), "class": .string(field("class", in: raw, longest: 256) ?? UnreadableJob.className),
            "jid": .string(stubJid),
            "error_class": .string(errorClass), "error_message": .string(message(bytes: raw.count, limit: limit)),
            "failed_at": .double(now), "retry_count": 0, "payload_bytes": .int(Int64(raw.count)),
            "payload_head": .string(String(decoding: raw.prefix(headBytes), as: UTF8.self)),
        ]
        return (stubJid, JSONValue.object(fields).serialized())
    }

    /// The stub's `error_message`: sizes only, never content.
    public static func message(bytes: Int, limit: Int) -> String {
        "payload of \(bytes) bytes is over the fetch limit of \(limit) bytes: not run; its first \(headBytes) bytes are in payload_head"
    }

    /// The producer's jid as the stub reads it, or nil.
    public static func jid(in raw: [UInt8]) -> String? { field("jid", in: raw, longest: 128) }

    /// The string value of `"key"` as Lua's `string.match(s, '"key"%s*:%s*"([^"\\]*)"')` finds it first in the
    /// payload's first `searchBytes` bytes, else in its last: kept when it is 1…`longest` printable ASCII characters.
    static func field(_ key: String, in raw: [UInt8], longest: Int) -> String? {
        let head = raw.prefix(searchBytes)
        let tail = raw.suffix(searchBytes)
        guard let value = firstMatch(key, in: head) ?? firstMatch(key, in: tail),
              (1...longest).contains(value.count), value.allSatisfy({ (0x21...0x7E).contains($0) }) else { return nil }
        return String(decoding: value, as: UTF8.self)
    }

    /// Lua's `%s`: space, \t, \n, \v, \f, \r.
    private static func isSpace(_ byte: UInt8) -> Bool { byte == 0x20 || (0x09...0x0D).contains(byte) }

    private static func firstMatch(_ key: String, in bytes: ArraySlice<UInt8>) -> ArraySlice<UInt8>? {
        let needle = Array("\"\(key)\"".utf8)
        var start = bytes.startIndex
        while start + needle.count <= bytes.endIndex {
            defer { start += 1 }
            guard bytes[start..<(start + needle.count)].elementsEqual(needle) else { continue }
            var at = start + needle.count
            while at < bytes.endIndex, isSpace(bytes[at]) { at += 1 }
            guard at < bytes.endIndex, bytes[at] == UInt8(ascii: ":") else { continue }
            at += 1
            while at < bytes.endIndex, isSpace(bytes[at]) { at += 1 }
            guard at < bytes.endIndex, bytes[at] == UInt8(ascii: "\"") else { continue }
            let valueStart = at + 1
            var end = valueStart
            while end < bytes.endIndex, bytes[end] != UInt8(ascii: "\""), bytes[end] != UInt8(ascii: "\\") { end += 1 }
            guard end < bytes.endIndex, bytes[end] == UInt8(ascii: "\"") else { continue }
            return bytes[valueStart..<end]
        }
        return nil
    }
}
