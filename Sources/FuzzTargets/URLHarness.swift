import Foundation
import WorkersQueue
import WorkersStorage

/// The passwords a URL carries, for the "never in a message" checks: the userinfo's password (between the first
/// `:` after `scheme://` and the last `@`), every `password=` query value, and, in a text that is not a URL (a
/// libpq keyword/value string given by mistake), every `password=` word; raw and percent-decoded.
///
/// Only passwords of 8 characters or more count, and not one also found in the URL with every password cut out
/// (`redis://:hostname@hostname/0`: a message may name the host) or in the fixed words of the messages: a short
/// or common text would match a message by chance.
struct URLSecrets {
    static let minimumLength = 8
    /// The fixed text of the messages checked (RedisError, ShardMapError, PostgresURL).
    static let vocabulary = """
        invalid Redis URL: does not start with redis:// cannot parse no host in port is out of range database \
        is not a number no Sentinel in no master name in (redis+sentinel://host:port,…/master-name/db) unexpected \
        path after the database in bad Sentinel address empty Sentinel host in Sentinel port is not a port number \
        default shard: shard must be letters, digits, or named twice (the default shard is REDIS_URL) queue is \
        mapped to shard which is not configured postgres://postgresql://*** rediss:// or rediss+sentinel:// a password \
        in the query is not read: put it in the login (redis://user:password@host) or in a password_file parameter \
        of the query is unknown (known: ca_file, cert_file, insecure, key_file, password_file, server_name) given twice \
        is a TLS parameter: the URL must start with rediss:// (or rediss+sentinel://) is empty key_file without \
        cert_file parameter insecure takes no value (or true/false) a password in the URL and a password_file: give \
        one of them
        """

    let secrets: [String]

    /// `keywordValue`: also read `password=` words of a text that is not a URL (libpq's keyword/value form; only
    /// PostgreSQL has one).
    init(_ url: String, keywordValue: Bool = false) {
        var found: [String] = []
        var remainder = url
        let afterScheme = url.range(of: "://").map { url[$0.upperBound...] } ?? url[...]
        if let at = afterScheme.lastIndex(of: "@") {
            let userInfo = afterScheme[..<at]
            if let colon = userInfo.firstIndex(of: ":") {
                let password = String(userInfo[userInfo.index(after: colon)...])
                found.append(password)
                remainder = String(url[..<colon]) + String(url[at...])
            }
        }
        // The query starts at the first `?` after the login (a `?` before the last `@` belongs to the password).
        let loginEnd = remainder.lastIndex(of: "@") ?? remainder.startIndex
        if let question = remainder[loginEnd...].firstIndex(of: "?") {
            for pair in remainder[remainder.index(after: question)...].split(separator: "&") {
                let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                guard parts.count == 2, parts[0].lowercased() == "password" else { continue }
                found.append(String(parts[1]))
                remainder = Self.replacing(String(pair), with: "password=", in: remainder)
            }
        }
        if keywordValue, !Self.contains(url, "://") {  // a libpq keyword/value string: `host=db password=secret dbname=app`
            for word in url.split(whereSeparator: \.isWhitespace) where word.lowercased().hasPrefix("password=") {
                found.append(String(word.dropFirst("password=".count)))
                remainder = Self.replacing(String(word), with: "password=", in: remainder)
            }
        }
        found += found.compactMap { $0.removingPercentEncoding }
        let cut = remainder
        secrets = found.filter {
            $0.count >= Self.minimumLength && !Self.contains(cut, $0) && !Self.contains(Self.vocabulary, $0)
        }
    }

    /// The first password `text` shows, or nil.
    func leaked(in text: String) -> String? { secrets.first { Self.contains(text, $0) } }

    /// Substring search on UTF-8 bytes. (Not Foundation's `contains`: on Linux it traps, "String index is out of
    /// bounds", for some texts holding NUL bytes — found by this harness.)
    static func contains(_ text: String, _ part: String) -> Bool {
        let haystack = Array(text.utf8), needle = Array(part.utf8)
        guard !needle.isEmpty else { return true }
        guard needle.count <= haystack.count else { return false }
        return (0...(haystack.count - needle.count)).contains { start in haystack[start..<(start + needle.count)].elementsEqual(needle) }
    }

    /// `text` with every occurrence of `part` replaced by `replacement` (UTF-8 bytes, see `contains`).
    static func replacing(_ part: String, with replacement: String, in text: String) -> String {
        let haystack = Array(text.utf8), needle = Array(part.utf8)
        guard !needle.isEmpty else { return text }
        var out: [UInt8] = []
        var index = 0
        while index < haystack.count {
            if index + needle.count <= haystack.count, haystack[index..<(index + needle.count)].elementsEqual(needle) {
                out += replacement.utf8
                index += needle.count
            } else {
                out.append(haystack[index])
                index += 1
            }
        }
        return String(decoding: out, as: UTF8.self)
    }
}

/// A Redis URL as an operator or a deployment writes it (`REDIS_URL`, `--redis-url`, `QUEUE_SHARDS`):
/// `RedisEndpoint(url:)` for `redis://`, `rediss://`, `redis+sentinel://` and `rediss+sentinel://` with their query
/// (`RedisURLOptions`), and a `ShardMap` built from it.
/// Contract checked: no error message (and no endpoint description) shows the password (issue 32, L2).
public enum RedisURLHarness {
    public static func run(_ data: [UInt8]) {
        let url = String(decoding: data, as: UTF8.self)
        let secrets = URLSecrets(url)
        do {
            // The description is checked against the password the parser found: what the URL's other parts hold
            // (a master name `:x@y` after a `/`) is not a password once the URL has parsed.
            let endpoint = try RedisEndpoint(url: url)
            if let password = endpoint.password, password.count >= URLSecrets.minimumLength,
               URLSecrets.contains(endpoint.description, password) {
                FuzzHarness.violated("RedisEndpoint.description shows the password (\(password.count) characters)")
            }
        } catch {
            if let leak = secrets.leaked(in: error.description) {
                FuzzHarness.violated("a RedisEndpoint error shows a password (\(leak.count) characters)")
            }
        }
        do {
            FuzzSink.keep(try ShardMap(defaultURL: "redis://127.0.0.1:6379/0", shards: [(name: "b", url: url)],
                                       queues: [(queue: "q", shard: "b")]))
        } catch {
            if let leak = secrets.leaked(in: "\(error)") {
                FuzzHarness.violated("a ShardMap error shows a password (\(leak.count) characters)")
            }
        }
    }
}

/// A PostgreSQL URL (`DATABASE_URL`, `--database-url`), as the messages and logs show it: `PostgresURL.redacted`.
/// Contract checked: the redacted text holds no password, neither the userinfo's nor a `?password=` parameter's
/// (issue 32, L2). (Connecting is not fuzzed: libpq parses the URL itself.)
public enum PostgresURLHarness {
    public static func run(_ data: [UInt8]) {
        let url = String(decoding: data, as: UTF8.self)
        let redacted = PostgresURL.redacted(url)
        if let leak = URLSecrets(url, keywordValue: true).leaked(in: redacted) {
            FuzzHarness.violated("PostgresURL.redacted leaves a password (\(leak.count) characters)")
        }
    }
}
