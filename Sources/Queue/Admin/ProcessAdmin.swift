/// Operating on worker processes (ours and Ruby's) through the process registry (§10).
public enum ProcessAdmin {
    /// The signals Sidekiq processes read from `IDENTITY-signals`.
    public enum Signal: String, Sendable {
        /// Stop fetching; running jobs finish (Sidekiq's "quiet").
        case quiet = "TSTP"
        /// Shut down (Sidekiq's "stop").
        case stop = "TERM"
    }

    /// The identity in `processes` that is exactly `name`, or the only one starting with it among the first
    /// `Stats.sampleProcesses` members read (`SISMEMBER`, then `SSCAN`: review M5, anyone may add members).
    public static func resolve(_ connection: RedisConnection, _ name: String) throws -> String {
        guard !name.isEmpty else { throw AdminError.invalidArgument("the process identity is empty") }
        if try connection.command("SISMEMBER", Keys.processes, name).integer == 1 { return name }
        let members = try ScanBudget(maxEntries: Stats.sampleProcesses).members(of: Keys.processes, connection).sorted()
        let matches = members.filter { $0.hasPrefix(name) }
        if matches.count == 1 { return matches[0] }
        if matches.isEmpty { throw AdminError.processNotFound(name) }
        throw AdminError.ambiguousProcess(name, matches: matches)
    }

    /// Sends `signal` to the process `name` (identity or unique prefix) and returns its identity.
    /// The process acts on it at its next heartbeat.
    @discardableResult
    public static func send(_ signal: Signal, to name: String, _ connection: RedisConnection) throws -> String {
        let identity = try resolve(connection, name)
        try ProcessRegistry.signal(connection, identity: identity, signal.rawValue)
        return identity
    }

    /// Sends `signal` to every live process; returns their identities.
    public static func sendAll(_ signal: Signal, _ connection: RedisConnection) throws -> [String] {
        let identities = try ProcessRegistry.list(connection).map(\.identity)
        for identity in identities { try ProcessRegistry.signal(connection, identity: identity, signal.rawValue) }
        return identities
    }
}
