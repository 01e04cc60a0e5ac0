/// An RFC 8941 `sf-string` (Structured Field Values for HTTP, §3.3.3), serialised as §4.1.6 says: a
/// DQUOTE, the characters with `\` and `"` escaped by a backslash, a DQUOTE.
///
///     sf-string = DQUOTE *chr DQUOTE
///     chr       = unescaped / escaped
///     unescaped = %x20-21 / %x23-5B / %x5D-7E
///     escaped   = "\" ( DQUOTE / "\" )
///
/// Only printable ASCII (%x20-7E) can be a String; anything else fails serialisation (§4.1.6 step 2), so
/// `init` returns nil for it. Headers whose value "MUST be a String" (e.g. `Idempotency-Key`,
/// draft-ietf-httpapi-idempotency-key-header §2.1) are sent as `serialized`. A value, no state; any thread.
public struct StructuredFieldString: Sendable, Equatable, CustomStringConvertible {
    /// The string itself, unquoted.
    public let value: String

    /// nil when `value` holds a character outside %x20-7E.
    public init?(_ value: String) {
        guard value.unicodeScalars.allSatisfy({ (0x20...0x7E).contains($0.value) }) else { return nil }
        self.value = value
    }

    /// The field value: `"…"` with `\` and `"` escaped.
    public var serialized: String {
        var out = "\""
        for character in value {
            if character == "\\" || character == "\"" { out.append("\\") }
            out.append(character)
        }
        out.append("\"")
        return out
    }

    public var description: String { serialized }
}
