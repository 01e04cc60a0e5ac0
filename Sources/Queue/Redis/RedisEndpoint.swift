import Foundation

/// Where a Redis server is and how to log in: parsed from `redis://[user:password@]host[:port][/db]`,
/// or, for a master watched by Redis Sentinel,
/// `redis+sentinel://[user:password@]host1[:port1],host2[:port2]/master-name[/db]` (see `SentinelTarget`).
///
/// With Sentinels, `host`/`port` are the first Sentinel's (only a fallback label): every
/// `RedisConnection` asks the Sentinels for the master each time it (re)connects (docs/redis-ha.md).
public struct RedisEndpoint: Sendable, Equatable, CustomStringConvertible {
    public var host: String
    public var port: Int
    public var database: Int
    public var username: String?
    public var password: String?
    /// The Sentinels and master name when the URL was `redis+sentinel://`; nil for a plain server.
    public var sentinel: SentinelTarget?

    public init(host: String = "127.0.0.1", port: Int = 6379, database: Int = 0,
                username: String? = nil, password: String? = nil, sentinel: SentinelTarget? = nil) {
        self.host = host
        self.port = port
        self.database = database
        self.username = username
        self.password = password
        self.sentinel = sentinel
    }

    /// The default when neither a flag nor `REDIS_URL` says otherwise: the private instance
    /// `scripts/services start` runs.
    public static let defaultURL = "redis://127.0.0.1:6390/0"

    public init(url: String) throws(RedisError) {
        if url.hasPrefix(SentinelTarget.scheme) {
            self = try SentinelTarget.endpoint(url: url)
            return
        }
        // Every message shows the URL redacted, or a part of it only when the redacted URL shows that part too:
        // a password may hold any character (`#`, `/`, `?`), and an unparseable URL may put it anywhere.
        let redacted = Self.redacted(url)
        guard url.hasPrefix("redis://") else { throw .invalidURL("'\(redacted)' does not start with redis://") }
        guard let components = URLComponents(string: url) else { throw .invalidURL("cannot parse '\(redacted)'") }
        guard let host = components.host, !host.isEmpty else { throw .invalidURL("no host in '\(redacted)'") }
        self.host = host
        self.port = components.port ?? 6379
        guard (1...65535).contains(port) else { throw .invalidURL("port \(port) is out of range") }
        let path = components.path.trimmingCharacters(in: CharacterSet(charactersIn: "/"))
        if path.isEmpty {
            database = 0
        } else if let db = Int(path), db >= 0 {
            database = db
        } else {
            throw .invalidURL("database \(Self.quoted(path, from: url)) is not a number")
        }
        let user = components.percentEncodedUser.flatMap { $0.removingPercentEncoding }
        let password = components.percentEncodedPassword.flatMap { $0.removingPercentEncoding }
        // redis://:password@host means "password only" (Redis < 6 AUTH with one argument).
        self.username = (user?.isEmpty ?? true) ? nil : user
        self.password = password
    }

    /// `url` without its login, for messages and logs: everything between `://` (the start, without a scheme) and
    /// the last `@` becomes `…` (`rediss://:pw@h:1/0` → `rediss://…@h:1/0`). The last `@`, not the first one after
    /// the scheme or before the path, so a password holding `@`, `#`, `/` or `?` is hidden whole; a URL with no
    /// `@` is returned as it is. Pure.
    public static func redacted(_ url: String) -> String {
        guard let at = url.lastIndex(of: "@") else { return url }
        guard let schemeEnd = url.range(of: "://")?.upperBound, schemeEnd <= at else { return "…" + url[at...] }
        return url[..<schemeEnd] + "…" + url[at...]
    }

    /// `'part'` when the redacted `url` shows `part` too (so it holds no secret), else `(hidden)`.
    static func quoted(_ part: some StringProtocol, from url: String) -> String {
        redacted(url).contains(part) ? "'\(part)'" : "(hidden)"
    }

    /// `host:port/db` (`sentinel:master-name/db` with Sentinels), never the password.
    public var description: String {
        if let sentinel { return "sentinel:\(sentinel.masterName)/\(database)" }
        return "\(host):\(port)/\(database)"
    }

    /// The same login and database on another server: the master a Sentinel named.
    func master(host: String, port: Int) -> RedisEndpoint {
        RedisEndpoint(host: host, port: port, database: database, username: username, password: password)
    }
}
