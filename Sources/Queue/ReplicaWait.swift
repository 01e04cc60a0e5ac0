/// Optional synchronous confirmation of writes by replicas: after an enqueue or a settlement
/// batch, `WAIT <replicas> <timeoutMilliseconds>` in the same round trip
/// (https://redis.io/docs/latest/commands/wait/).
///
/// WAIT does not make Redis strongly consistent: a write the replica did not confirm is still on
/// the master (and may reach the replica later), and even a confirmed write can be lost if a
/// replica that did not receive it is promoted. It narrows the window that asynchronous
/// replication leaves open in a failover (docs/redis-ha.md). Configured by `redis_wait_replicas` /
/// `redis_wait_timeout_ms` (worker config) or `REDIS_WAIT_REPLICAS` / `REDIS_WAIT_TIMEOUT_MS`.
/// An immutable value; any thread may use it.
package struct ReplicaWait: Sendable, Equatable {
    /// How many replicas must confirm (>= 1).
    public var replicas: Int
    /// How long the master waits for them, in milliseconds (>= 1; WAIT's 0 would block forever).
    public var timeoutMilliseconds: Int

    public static let defaultTimeoutMilliseconds = 500

    public init(replicas: Int, timeoutMilliseconds: Int = ReplicaWait.defaultTimeoutMilliseconds) {
        self.replicas = replicas
        self.timeoutMilliseconds = timeoutMilliseconds
    }

    /// From `REDIS_WAIT_REPLICAS` (absent or 0: no waiting) and `REDIS_WAIT_TIMEOUT_MS`.
    public static func from(environment: [String: String]) throws(ReplicaWaitError) -> ReplicaWait? {
        try parse(replicas: environment["REDIS_WAIT_REPLICAS"], timeoutMilliseconds: environment["REDIS_WAIT_TIMEOUT_MS"])
    }

    /// Checks the two settings (text from a file or the environment); nil when `replicas` is absent or 0.
    public static func parse(replicas: String?, timeoutMilliseconds: String?) throws(ReplicaWaitError) -> ReplicaWait? {
        guard let replicas, !replicas.isEmpty else { return nil }
        guard let count = Int(replicas), count >= 0 else { throw .invalidSetting("replica count '\(replicas)' is not a non-negative integer") }
        if count == 0 { return nil }
        var timeout = defaultTimeoutMilliseconds
        if let text = timeoutMilliseconds, !text.isEmpty {
            guard let value = Int(text), value >= 1 else { throw .invalidSetting("wait timeout '\(text)' is not a positive number of milliseconds") }
            timeout = value
        }
        return ReplicaWait(replicas: count, timeoutMilliseconds: timeout)
    }

    /// The command to append to a pipeline.
    public var command: [any RedisArgument] { ["WAIT", replicas, timeoutMilliseconds] }

    /// Checks WAIT's reply (the number of replicas that confirmed). When too few did, the link is
    /// closed before throwing: with Sentinels the next command asks again who the master is — a
    /// master that lost its replica may be one a failover has already replaced.
    public func check(_ reply: RedisReply, on connection: RedisConnection) throws(ReplicaWaitError) {
        let confirmed = Int(reply.integer ?? -1)
        if confirmed >= replicas { return }
        connection.close()
        throw .unconfirmed(confirmed: max(0, confirmed), wanted: replicas, timeoutMilliseconds: timeoutMilliseconds,
                           server: connection.serverAddress)
    }
}

/// What `ReplicaWait` found wrong.
package enum ReplicaWaitError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The write is on the master, but fewer replicas than asked confirmed it in time: a failover
    /// now could lose it.
    case unconfirmed(confirmed: Int, wanted: Int, timeoutMilliseconds: Int, server: String)
    /// A setting is not a number in range.
    case invalidSetting(String)

    public var description: String {
        switch self {
        case .unconfirmed(let confirmed, let wanted, let timeout, let server):
            return "write on \(server) confirmed by \(confirmed) of \(wanted) replicas within \(timeout) ms; a failover now could lose it"
        case .invalidSetting(let why): return "invalid replica wait setting: \(why)"
        }
    }
}
