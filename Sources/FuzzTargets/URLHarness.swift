import Foundation
import Queue
import Storage

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
        mapped to shard which is not configured postgres://postgresql://***
        """

    let secrets: [String]

    init(_ url: String) {
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
        if let question = remainder.firstIndex(of: "?") {
            for pair in remainder[remainder.index(after: question)...].split(separator: "&") {
                let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                guard parts.count == 2, parts[0].lowercased() == "password" else { continue }
                found.append(String(parts[1]))
                remainder = remainder.replacingOccurrences(of: String(pair), with: "password=")
            }
        }
        if !url.contains("://") {  // a libpq keyword/value string: `host=db password=secret dbname=app`
            for word in url.split(whereSeparator: \.isWhitespace) where word.lowercased().hasPrefix("password=") {
                found.append(String(word.dropFirst("password=".count)))
                remainder = remainder.replacingOccurrences(of: String(word), with: "password=")
            }
        }
        found += found.compactMap { $0.removingPercentEncoding }
        let cut = remainder
        secrets = found.filter { $0.count >= Self.minimumLength && !cut.contains($0) && !Self.vocabulary.contains($0) }
    }

    /// The first password `text` shows, or nil.
    func leaked(in text: String) -> String? { secrets.first { text.contains($0) } }
}

/// A Redis URL as an operator or a deployment writes it (`REDIS_URL`, `--redis-url`, `QUEUE_SHARDS`):
/// `RedisEndpoint(url:)` for `redis://` and `redis+sentinel://`, and a `ShardMap` built from it.
/// Contract checked: no error message (and no endpoint description) shows the password (issue 32, L2).
public enum RedisURLHarness {
    public static func run(_ data: [UInt8]) {
        let url = String(decoding: data, as: UTF8.self)
        let secrets = URLSecrets(url)
        do {
            let endpoint = try RedisEndpoint(url: url)
            if let leak = secrets.leaked(in: endpoint.description) {
                FuzzHarness.violated("RedisEndpoint.description shows a password (\(leak.count) characters)")
            }
        } catch {
            if let leak = secrets.leaked(in: error.description) {
                FuzzHarness.violated("a RedisEndpoint error shows a password (\(leak.count) characters)")
            }
        }
        do {
            _ = try ShardMap(defaultURL: "redis://127.0.0.1:6379/0", shards: [(name: "b", url: url)],
                             queues: [(queue: "q", shard: "b")])
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
        if let leak = URLSecrets(url).leaked(in: redacted) {
            FuzzHarness.violated("PostgresURL.redacted leaves a password (\(leak.count) characters)")
        }
    }
}
