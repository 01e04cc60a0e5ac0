import Foundation
import WorkersQueue

/// A private Redis database for one test case class: `scripts/services` starts Redis with 256
/// databases and each test class claims its own index, so test classes never see each other's keys.
public struct TestRedis: Sendable {
    public let database: Int
    public let url: String
    public let pool: RedisPool

    /// Claims database `database` for the calling file (`TestServices.redisURL(db:claimedBy:)`) and empties it.
    public init(database: Int, claimedBy file: String = #fileID) throws {
        self.database = database
        self.url = TestServices.redisURL(db: database, claimedBy: file)
        self.pool = try RedisPool(url: url, maxConnections: 4)
        try flush()
    }

    public func connection() throws -> RedisConnection { try RedisConnection(url: url) }

    public func flush() throws { _ = try pool.withConnection { try $0.command("FLUSHDB") } }

    public var client: JobClient { JobClient(pool: pool) }

    /// Runs one command on a pooled connection.
    @discardableResult
    public func command(_ arguments: any RedisArgument...) throws -> RedisReply {
        try pool.withConnection { try $0.send(arguments).checked() }
    }

    public func int(_ arguments: any RedisArgument...) throws -> Int {
        Int(try pool.withConnection { try $0.send(arguments).checked() }.integer ?? 0)
    }

    /// Members of a ZSET or LIST as parsed payloads.
    public func payloads(zset key: String) throws -> [JobPayload] {
        try command("ZRANGE", key, 0, -1).strings.map { try JobPayload(parsing: $0) }
    }

    public func payloads(list key: String) throws -> [JobPayload] {
        try command("LRANGE", key, 0, -1).strings.map { try JobPayload(parsing: $0) }
    }

    /// Every in-flight (working) list key.
    public func workingKeys() throws -> [String] { try command("KEYS", "working:*").strings }

    /// Clients of this database blocked in `BLMOVE` now (`CLIENT LIST`: a worker's fetcher and waiters on a drained
    /// queue).
    public func clientsWaitingInBLMOVE() throws -> Int {
        try clientsLastInBLMOVE().filter { $0.contains(" flags=b ") }.count
    }

    /// Kills every client of this database whose last command is `BLMOVE` (`CLIENT KILL ID`): a wait in flight breaks,
    /// as when a reply is lost, and the worker's fetcher reconciles. Returns how many it killed.
    @discardableResult
    public func killClientsInBLMOVE() throws -> Int {
        var killed = 0
        for line in try clientsLastInBLMOVE() {
            if let id = line.split(separator: " ").first(where: { $0.hasPrefix("id=") })?.dropFirst(3),
               (try? command("CLIENT", "KILL", "ID", String(id))) != nil {
                killed += 1
            }
        }
        return killed
    }

    /// The `CLIENT LIST` lines of this database's clients whose last command is `BLMOVE`.
    private func clientsLastInBLMOVE() throws -> [Substring] {
        let lines = try command("CLIENT", "LIST").string?.split(separator: "\n") ?? []
        return lines.filter { $0.contains(" db=\(database) ") && $0.contains(" cmd=blmove ") }
    }

    public func processed() throws -> Int { try int("GET", Keys.statProcessed) }
    public func failed() throws -> Int { try int("GET", Keys.statFailed) }
}

/// Waits until `condition` holds, checking every 20 ms, for at most `timeout` seconds. The timeout
/// only bounds a hang: a test fails on what it observes, not on how long it took.
public func eventually(timeout: Double = 20, _ condition: () throws -> Bool) rethrows -> Bool {
    let deadline = Date(timeIntervalSinceNow: timeout)
    while Date() < deadline {
        if try condition() { return true }
        Thread.sleep(forTimeInterval: 0.02)
    }
    return try condition()
}
