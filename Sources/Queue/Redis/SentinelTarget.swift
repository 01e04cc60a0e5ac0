import Foundation

/// A Redis master found through Redis Sentinel: the Sentinels to ask and the master's name.
///
/// Parsed from `redis+sentinel://[user:password@]host1[:port1],host2[:port2],…/master-name[/db]`
/// (Sentinel port 26379 when omitted); `rediss+sentinel://` speaks TLS to the Sentinels and to the master, each
/// certificate checked against the name dialled (the master's as the Sentinel gives it) unless `server_name` says. The user and password are the master's (`AUTH` after
/// connecting to it); Sentinels are asked without a password.
///
/// Discovery follows Redis' Sentinel client spec
/// (https://redis.io/docs/latest/develop/reference/sentinel-clients/): ask each Sentinel in turn,
/// with a short timeout, `SENTINEL get-master-addr-by-name <name>`; the first that answers with an
/// address wins (a null answer or an error means "ask the next one"); then `RedisConnection`
/// checks with `ROLE` that the server named really is a master. It runs on every (re)connect, so a
/// link lost in a failover, or closed after a `READONLY` reply, finds the new master by itself.
/// Immutable and `Sendable`; any thread may resolve.
package struct SentinelTarget: Sendable, Equatable {
    public static let defaultSentinelPort = 26379

    /// One Sentinel's address.
    public struct Address: Sendable, Equatable, CustomStringConvertible {
        public var host: String
        public var port: Int
        public init(host: String, port: Int) { self.host = host; self.port = port }
        public var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
    }

    public var sentinels: [Address]
    public var masterName: String

    public init(sentinels: [Address], masterName: String) {
        self.sentinels = sentinels
        self.masterName = masterName
    }

    /// How long to wait for one Sentinel (connect and reply) before asking the next.
    public static let sentinelTimeout: Duration = .milliseconds(500)

    /// Parses a `redis+sentinel://` (or `rediss+sentinel://`) URL into an endpoint whose `sentinel` is set: `body`
    /// is the URL without its query (`RedisURLOptions`), `url` the whole of it, for messages.
    static func endpoint(url: String, body: Substring) throws(RedisError) -> RedisEndpoint {
        var rest = body[(body.range(of: "://")?.upperBound ?? body.startIndex)...]
        var username: String?
        var password: String?
        let slash = rest.firstIndex(of: "/") ?? rest.endIndex
        if let at = rest[..<slash].lastIndex(of: "@") {
            let userInfo = rest[..<at]
            rest = rest[rest.index(after: at)...]
            let parts = userInfo.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
            let user = parts[0].removingPercentEncoding ?? String(parts[0])
            username = user.isEmpty ? nil : user
            if parts.count == 2 { password = parts[1].removingPercentEncoding ?? String(parts[1]) }
        }
        let authorityEnd = rest.firstIndex(of: "/") ?? rest.endIndex
        var sentinels: [Address] = []
        for item in rest[..<authorityEnd].split(separator: ",", omittingEmptySubsequences: false) {
            sentinels.append(try address(String(item), in: url))
        }
        guard !sentinels.isEmpty else { throw .invalidURL("no Sentinel in '\(RedisEndpoint.redacted(url))'") }
        let path = rest[authorityEnd...].split(separator: "/", omittingEmptySubsequences: false).dropFirst()
        guard let name = path.first, !name.isEmpty else {
            throw .invalidURL("no master name in '\(RedisEndpoint.redacted(url))' (redis+sentinel://host:port,…/master-name/db)")
        }
        var database = 0
        if path.count >= 2, !path[path.startIndex + 1].isEmpty {
            guard let db = Int(path[path.startIndex + 1]), db >= 0 else {
                throw .invalidURL("database \(RedisEndpoint.quoted(path[path.startIndex + 1], from: url)) is not a number")
            }
            database = db
        }
        guard path.count <= 2 || path.dropFirst(2).allSatisfy(\.isEmpty) else {
            throw .invalidURL("unexpected path after the database in '\(RedisEndpoint.redacted(url))'")
        }
        let masterName = name.removingPercentEncoding ?? String(name)
        return RedisEndpoint(host: sentinels[0].host, port: sentinels[0].port, database: database,
                             username: username, password: password,
                             sentinel: SentinelTarget(sentinels: sentinels, masterName: masterName))
    }

    private static func address(_ text: String, in url: String) throws(RedisError) -> Address {
        var host = Substring(text)
        var portText: Substring?
        if host.hasPrefix("[") {  // [IPv6]:port
            guard let close = host.firstIndex(of: "]") else {
                throw .invalidURL("bad Sentinel address \(RedisEndpoint.quoted(text, from: url))")
            }
            let after = host[host.index(after: close)...]
            host = host[host.index(after: host.startIndex)..<close]
            if after.hasPrefix(":") { portText = after.dropFirst() } else if !after.isEmpty {
                throw .invalidURL("bad Sentinel address \(RedisEndpoint.quoted(text, from: url))")
            }
        } else if let colon = host.lastIndex(of: ":") {
            portText = host[host.index(after: colon)...]
            host = host[..<colon]
        }
        guard !host.isEmpty else { throw .invalidURL("empty Sentinel host in '\(RedisEndpoint.redacted(url))'") }
        var port = defaultSentinelPort
        if let portText {
            guard let value = Int(portText), (1...65535).contains(value) else {
                throw .invalidURL("Sentinel port \(RedisEndpoint.quoted(portText, from: url)) is not a port number")
            }
            port = value
        }
        return Address(host: String(host), port: port)
    }

    /// Asks the Sentinels, in order, for the master's address (over TLS when `tls` is set, as `rediss+sentinel://`
    /// asks). Throws `.connectionFailed` naming every Sentinel and why it did not answer when none knows the master.
    public func masterAddress(tls: RedisTLSSettings? = nil) throws(RedisError) -> Address {
        var reasons: [String] = []
        for sentinel in sentinels {
            do {
                let connection = try RedisConnection(endpoint: RedisEndpoint(host: sentinel.host, port: sentinel.port, tls: tls),
                                                     commandTimeout: Self.sentinelTimeout)
                defer { connection.close() }
                let reply = try connection.command("SENTINEL", "get-master-addr-by-name", masterName)
                let parts = reply.strings
                if parts.count == 2, let port = Int(parts[1]), (1...65535).contains(port) {
                    return Address(host: parts[0], port: port)
                }
                reasons.append("\(sentinel): does not know master '\(masterName)'")
            } catch {
                reasons.append("\(sentinel): \(error)")
            }
        }
        throw .connectionFailed(address: "sentinel:\(masterName)",
                                reason: "no Sentinel named the master (" + reasons.joined(separator: "; ") + ")")
    }
}
