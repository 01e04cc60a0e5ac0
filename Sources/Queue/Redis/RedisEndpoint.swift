import Foundation

/// Where a Redis server is and how to log in: parsed from `redis://[user:password@]host[:port][/db]`.
public struct RedisEndpoint: Sendable, Equatable, CustomStringConvertible {
    public var host: String
    public var port: Int
    public var database: Int
    public var username: String?
    public var password: String?

    public init(host: String = "127.0.0.1", port: Int = 6379, database: Int = 0,
                username: String? = nil, password: String? = nil) {
        self.host = host
        self.port = port
        self.database = database
        self.username = username
        self.password = password
    }

    /// The default when neither a flag nor `REDIS_URL` says otherwise: the private instance
    /// `scripts/services start` runs.
    public static let defaultURL = "redis://127.0.0.1:6390/0"

    public init(url: String) throws(RedisError) {
        guard url.hasPrefix("redis://") else { throw .invalidURL("'\(url)' does not start with redis://") }
        guard let components = URLComponents(string: url) else { throw .invalidURL("cannot parse '\(url)'") }
        guard let host = components.host, !host.isEmpty else { throw .invalidURL("no host in '\(url)'") }
        self.host = host
        self.port = components.port ?? 6379
        guard (1...65535).contains(port) else { throw .invalidURL("port \(port) is out of range") }
        let path = components.path.trimmingCharacters(in: CharacterSet(charactersIn: "/"))
        if path.isEmpty {
            database = 0
        } else if let db = Int(path), db >= 0 {
            database = db
        } else {
            throw .invalidURL("database '\(path)' is not a number")
        }
        let user = components.percentEncodedUser.flatMap { $0.removingPercentEncoding }
        let password = components.percentEncodedPassword.flatMap { $0.removingPercentEncoding }
        // redis://:password@host means "password only" (Redis < 6 AUTH with one argument).
        self.username = (user?.isEmpty ?? true) ? nil : user
        self.password = password
    }

    /// `host:port/db`, never the password.
    public var description: String { "\(host):\(port)/\(database)" }
}
