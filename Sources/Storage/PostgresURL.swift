import Foundation

/// Helpers for postgres:// URLs. Pure functions.
///
/// Thread rules: none (no state).
public enum PostgresURL {
    static func isPostgresURL(_ url: String) -> Bool {
        url.hasPrefix("postgres://") || url.hasPrefix("postgresql://")
    }

    /// `url` with every password replaced by `***`, safe for messages and logs:
    /// * the userinfo's, from its first `:` to the **last** `@` (`postgres://user:***@host/db`), so a password
    ///   holding `?`, `/` or `@` is hidden whole (a URL whose query holds an `@` may lose more than the password);
    /// * every `password=` parameter of the query string (libpq reads one there): `?sslmode=require&password=***`;
    /// * in a libpq keyword/value string (not a URL, refused by `PostgresConnection` with this text in the
    ///   message), every `password=` word, quoted or not: `host=db password=*** dbname=app`; in a URL without its
    ///   scheme, the userinfo's as above (`user:***@db/app`).
    /// Parameter names are matched without regard to case. Pure.
    public static func redacted(_ url: String) -> String {
        let scheme = url.range(of: "://")
        let loginStart = scheme?.upperBound ?? url.startIndex
        var text = url
        if let at = url[loginStart...].lastIndex(of: "@"), let colon = url[loginStart..<at].firstIndex(of: ":") {
            text = String(url[..<colon]) + ":***" + String(url[at...])
        }
        // Not a URL: keyword/value, or a URL whose scheme was forgotten (`user:pw@db/app`, hidden above); the
        // query rule below applies to it too.
        if scheme == nil { text = redactingKeywordPasswords(text) }
        // Every `password=` right after a `?` or a `&`, wherever it is (a `?` may also sit before the query).
        guard let question = text.firstIndex(of: "?") else { return text }
        let parameters = text[text.index(after: question)...].split(separator: "&", omittingEmptySubsequences: false).map { pair in
            pair.split(separator: "?", omittingEmptySubsequences: false).map { part in
                guard let equals = part.firstIndex(of: "="), part[..<equals].lowercased() == "password" else { return String(part) }
                return part[...equals] + "***"
            }.joined(separator: "?")
        }
        return String(text[...question]) + parameters.joined(separator: "&")
    }

    /// `text` (libpq's `key=value key='quoted value'` form) with every `password` value replaced by `***`.
    static func redactingKeywordPasswords(_ text: String) -> String {
        var out = ""
        var rest = Substring(text)
        while let range = rest.range(of: "password", options: .caseInsensitive) {
            out += rest[..<range.lowerBound]
            out += rest[range]
            rest = rest[range.upperBound...]
            let spaces = rest.prefix(while: { $0 == " " })
            guard rest.dropFirst(spaces.count).first == "=" else { continue }
            out += spaces + "="
            rest = rest.dropFirst(spaces.count + 1)
            rest = rest.drop(while: { $0 == " " })
            if rest.first == "'" {  // a quoted value: up to the next quote not escaped by a backslash
                var index = rest.index(after: rest.startIndex)
                while index < rest.endIndex, rest[index] != "'" {
                    index = rest[index] == "\\" ? rest.index(index, offsetBy: 2, limitedBy: rest.endIndex) ?? rest.endIndex
                                                : rest.index(after: index)
                }
                rest = index < rest.endIndex ? rest[rest.index(after: index)...] : rest[rest.endIndex...]
            } else {
                rest = rest.drop(while: { !$0.isWhitespace })
            }
            out += "***"
        }
        return out + rest
    }
}
