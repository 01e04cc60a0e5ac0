import Foundation

/// Where a Redis server is and how to log in: parsed from `redis://[user:password@]host[:port][/db]`
/// (`rediss://` for TLS), or, for a master watched by Redis Sentinel,
/// `redis+sentinel://[user:password@]host1[:port1],host2[:port2]/master-name[/db]` (`rediss+sentinel://`: TLS to the
/// Sentinels and to the master; see `SentinelTarget`). Either may end in a query of `RedisURLOptions`
/// (`?ca_file=…&password_file=…`).
///
/// With Sentinels, `host`/`port` are the first Sentinel's (only a fallback label): every
/// `RedisConnection` asks the Sentinels for the master each time it (re)connects (docs/redis-ha.md).
public struct RedisEndpoint: Sendable, Equatable, CustomStringConvertible {
    public var host: String
    public var port: Int
    public var database: Int
    public var username: String?
    public var password: String?
    /// A file holding the password instead of `password` (`?password_file=`): read at every connect, so a rotated
    /// secret is used from the next reconnect on. Never both.
    public var passwordFile: String?
    /// TLS for `rediss://` (with Sentinels: to the Sentinels and to the master); nil: plain TCP.
    public var tls: RedisTLSSettings?
    /// The Sentinels and master name when the URL was `redis+sentinel://`; nil for a plain server.
    package var sentinel: SentinelTarget?

    /// A plain Redis server (for Sentinel, `init(url:)` with a `redis+sentinel://` URL).
    public init(host: String = "127.0.0.1", port: Int = 6379, database: Int = 0,
                username: String? = nil, password: String? = nil, passwordFile: String? = nil,
                tls: RedisTLSSettings? = nil) {
        self.init(host: host, port: port, database: database, username: username, password: password,
                  passwordFile: passwordFile, tls: tls, sentinel: nil)
    }

    package init(host: String, port: Int, database: Int, username: String?, password: String?,
                 passwordFile: String? = nil, tls: RedisTLSSettings? = nil, sentinel: SentinelTarget?) {
        self.host = host
        self.port = port
        self.database = database
        self.username = username
        self.password = password
        self.passwordFile = passwordFile
        self.tls = tls
        self.sentinel = sentinel
    }

    /// The default when neither a flag nor `REDIS_URL` says otherwise: the private instance
    /// `scripts/services start` runs.
    public static let defaultURL = "redis://127.0.0.1:6390/0"

    public init(url: String) throws(RedisError) {
        let options = try RedisURLOptions(url: url)
        if options.isSentinel {
            self = try SentinelTarget.endpoint(url: url, body: options.body)
        } else {
            try self.init(serverURL: url, body: options.body)
        }
        tls = options.tls
        passwordFile = options.passwordFile
        if passwordFile != nil && password != nil {
            throw .invalidURL("a password in the URL and a password_file: give one of them")
        }
    }

    /// `redis://` or `rediss://` without its query (`body`); `url` is the whole URL, for messages.
    private init(serverURL url: String, body: Substring) throws(RedisError) {
        // Every message shows the URL redacted, or a part of it only when the redacted URL shows that part too:
        // a password may hold any character (`#`, `/`, `?`), and an unparseable URL may put it anywhere.
        let redacted = Self.redacted(url)
        guard let components = URLComponents(string: String(body)) else { throw .invalidURL("cannot parse '\(redacted)'") }
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

    /// What an operator should hear about this endpoint when a process starts with it (the worker logs each at
    /// warning level, `workerctl` prints them): today, a TLS link whose server is not authenticated.
    public var warnings: [String] {
        guard let tls, !tls.verifiesPeer else { return [] }
        return ["the Redis URL for \(description) has ?insecure: the server's certificate is not checked, so the link "
                + "is encrypted but whoever sits on the path can read and change every job (give ca_file instead)"]
    }

    /// The password to send with `AUTH`: `password`, or the content of `passwordFile` read now (one trailing line
    /// break dropped). Throws `.connectionFailed` naming the file (never its content) when it cannot be read or is empty.
    func currentPassword(address: String) throws(RedisError) -> String? {
        guard let passwordFile else { return password }
        guard let data = FileManager.default.contents(atPath: passwordFile) else {
            throw .connectionFailed(address: address, reason: "cannot read the password file \(passwordFile)")
        }
        var text = String(decoding: data, as: UTF8.self)
        if text.hasSuffix("\r\n") { text.removeLast(2) } else if text.hasSuffix("\n") { text.removeLast() }
        guard !text.isEmpty else {
            throw .connectionFailed(address: address, reason: "the password file \(passwordFile) is empty")
        }
        return text
    }

    /// `url` as messages and logs may show it: the scheme, `…@` for any login, then only the leading part that
    /// reads like `host:port/db` (letters, digits, `-._:[]/,`), and `…` for whatever follows
    /// (`rediss://:pw@h:1/0` → `rediss://…@h:1/0`, `redis://h/0?password=pw` → `redis://h/0…`).
    ///
    /// The login ends at the **last** `@`, so a password holding `@`, `#`, `/` or `?` is hidden whole; a query is
    /// hidden because other clients (redis-py) read `?password=` there. Total (any text), pure.
    public static func redacted(_ url: String) -> String {
        var shown = ""
        var rest = Substring(url)
        if let schemeEnd = url.range(of: "://"),
           url[..<schemeEnd.lowerBound].allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "+.-".contains($0)) }) {
            shown = String(url[..<schemeEnd.upperBound])
            rest = url[schemeEnd.upperBound...]
        }
        if let at = rest.lastIndex(of: "@") {
            shown += "…@"
            rest = rest[rest.index(after: at)...]
        }
        let address = rest.prefix { $0.isASCII && ($0.isLetter || $0.isNumber || "-._:[]/,".contains($0)) }
        return shown + address + (address.endIndex < rest.endIndex ? "…" : "")
    }

    /// `'part'` when the redacted `url` shows `part` too (so it holds no secret), else `(hidden)`.
    static func quoted(_ part: some StringProtocol, from url: String) -> String {
        // Bytes, not Foundation's `contains` (which traps on some texts holding NUL bytes on Linux).
        let shown = Array(redacted(url).utf8), needle = Array(part.utf8)
        let visible = !needle.isEmpty && needle.count <= shown.count
            && (0...(shown.count - needle.count)).contains { shown[$0..<($0 + needle.count)].elementsEqual(needle) }
        return visible ? "'\(part)'" : "(hidden)"
    }

    /// `host:port/db` (`sentinel:master-name/db` with Sentinels), never the password.
    public var description: String {
        if let sentinel { return "sentinel:\(sentinel.masterName)/\(database)" }
        return "\(host):\(port)/\(database)"
    }

    /// Which server (and database) this is, for `ConnectThrottle`: `host:port/db`, or the master name, every
    /// Sentinel's address and the database. Never the login.
    var throttleKey: String {
        if let sentinel { return "sentinel:\(sentinel.masterName)@\(sentinel.sentinels.map(\.description).joined(separator: ","))/\(database)" }
        return "\(host):\(port)/\(database)"
    }

    /// The same login and database on another server: the master a Sentinel named.
    func master(host: String, port: Int) -> RedisEndpoint {
        RedisEndpoint(host: host, port: port, database: database, username: username, password: password,
                      passwordFile: passwordFile, tls: tls)
    }
}
