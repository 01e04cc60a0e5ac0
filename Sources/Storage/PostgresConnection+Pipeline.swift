import CWorkersLibPQ

/// How a `PostgresConnection`'s statements reach the server: `send` puts the pending RELEASEs, then the deferred
/// writes, then the caller's statements into one round trip (libpq's pipeline mode), each through the session's
/// prepared statement for its SQL text when there is one (prepared on its first run otherwise); `pipeline` and
/// `sendDeferredWrites` are its public faces, `deferringWrites` lets `write` wait for it.
///
/// Thread rules: as the connection's (only its owning thread calls these; no locking here).
/// Invariants: those of the stored state this uses (`pendingReleases`, `deferredWrites`, `writesMayDefer`,
/// `preparedNames`, `preparedSerial`), stated where it is declared, in PostgresConnection.swift. A pipeline that
/// cannot be read back to a clean state closes the session (`abandonPipeline`).
extension PostgresConnection {
    // MARK: - Deferred writes

    /// Most writes that wait unsent; the next `write` sends them (one round trip) and starts a new batch.
    static let maxDeferredWrites = 1000

    /// Runs `body` with `write` allowed to defer statements (see `write`), for a caller whose handling of
    /// a failure can cope with a write's error surfacing later than the `write` call: group commit's fast
    /// path, which rolls the whole transaction back and runs it again with every write sent at once.
    /// Writes still waiting when `body` returns go with the next statement (or are dropped by ROLLBACK).
    public func deferringWrites<T>(_ body: () throws -> T) rethrows -> T {
        let outer = writesMayDefer
        writesMayDefer = true
        defer { writesMayDefer = outer }
        return try body()
    }

    /// True while statements of `write` wait to be sent.
    public var hasDeferredWrites: Bool { !deferredWrites.isEmpty }

    /// Sends the deferred writes now, in one round trip, and throws the first one's error (`.deferred`).
    public func sendDeferredWrites() throws {
        guard !deferredWrites.isEmpty else { return }
        _ = try send([])
    }

    // MARK: - Pipelining

    /// One statement of a `pipeline`.
    public struct Statement {
        public let sql: String
        public let parameters: [(any PostgresBindable)?]
        public init(_ sql: String, _ parameters: [(any PostgresBindable)?] = []) {
            self.sql = sql
            self.parameters = parameters
        }
    }

    /// Sends `statements` together and reads their results in one round trip (libpq's pipeline mode),
    /// instead of one round trip each. They run in order, as separate statements, after any deferred
    /// writes (`write`); the first one that fails throws its error and the server skips the rest (inside a
    /// transaction it is left aborted, as after any failed statement). Returns every statement's rows, in
    /// order.
    public func pipeline(_ statements: [Statement]) throws -> [PostgresRows] {
        let outgoing = try statements.map {
            Outgoing(sql: $0.sql, parameters: try BoundParameters($0.parameters, query: $0.sql), deferred: false)
        }
        return try send(outgoing)
    }

    /// A statement on its way to the server, its parameters already converted. `deferred`: it came from
    /// `write` and waited for a later round trip (its error is marked so).
    /// Internal: used by `query`, `write` and `executeScript` (PostgresConnection.swift).
    struct Outgoing {
        let sql: String
        let parameters: BoundParameters
        let deferred: Bool
    }

    /// How one statement of a pipeline is sent.
    private enum Plan {
        /// As an unnamed statement (parsed and planned for this execution only).
        case unnamed
        /// Through the session's prepared statement of this name.
        case prepared(String)
        /// Prepared under this name first (its own result comes first), then run through it.
        case preparing(String)
    }

    /// The pipeline behind `query`, `pipeline` and `sendDeferredWrites`: pending RELEASEs, then deferred
    /// writes, then `statements`, in one round trip. Returns the rows of `statements` only.
    /// Internal: used by `query` and `executeScript` (PostgresConnection.swift).
    func send(_ statements: [Outgoing]) throws -> [PostgresRows] {
        guard let handle else {
            throw PostgresError(category: .connection, message: "connection is closed", query: statements.first?.sql)
        }
        let releases = try (0..<pendingReleases).map { _ in
            Outgoing(sql: "RELEASE SAVEPOINT storage_nested", parameters: try BoundParameters([], query: ""), deferred: false)
        }
        let skipped = releases.count + deferredWrites.count
        let all = releases + deferredWrites + statements
        pendingReleases = 0
        deferredWrites.removeAll()
        guard PQenterPipelineMode(handle) == 1 else {
            throw makeError(result: nil, query: all.first?.sql ?? "pipeline")
        }
        var plans: [Plan] = []
        plans.reserveCapacity(all.count)
        var sendFailed = false
        for statement in all where !sendFailed {
            var plan = Plan.unnamed
            if let name = preparedName(statement.sql) {
                plan = .prepared(name)
            } else if mayPrepare(statement.sql) {
                preparedSerial += 1
                let name = "swift_workers_\(preparedSerial)"
                plan = .preparing(name)
                sendFailed = PQsendPrepare(handle, name, statement.sql, 0, nil) != 1
            }
            plans.append(plan)
            guard !sendFailed else { break }
            let sent = statement.parameters.withPointers { count, values in
                switch plan {
                case .unnamed: return PQsendQueryParams(handle, statement.sql, count, nil, values, nil, nil, 0)
                case .prepared(let name), .preparing(let name):
                    return PQsendQueryPrepared(handle, name, count, values, nil, nil, 0)
                }
            }
            sendFailed = sent != 1
        }
        if sendFailed || PQpipelineSync(handle) != 1 {
            let error = makeError(result: nil, query: all.first?.sql ?? "pipeline")
            abandonPipeline()
            throw error
        }
        var results: [PostgresRows] = []
        results.reserveCapacity(all.count)
        var firstError: PostgresError?
        func fail(_ error: PostgresError, _ statement: Outgoing) {
            guard firstError == nil else { return }
            var error = error
            error.deferred = statement.deferred
            firstError = error
        }
        reading: for (statement, plan) in zip(all, plans) {
            if case .preparing(let name) = plan {
                guard let prepared = PQgetResult(handle) else {
                    fail(makeError(result: nil, query: statement.sql), statement)
                    break reading
                }
                let status = PQresultStatus(prepared)
                if status == PGRES_COMMAND_OK {
                    preparedNames[statement.sql] = name
                } else if status != PGRES_PIPELINE_ABORTED {
                    fail(makeError(result: prepared, query: statement.sql), statement)
                }
                PQclear(prepared)
                while let extra = PQgetResult(handle) { PQclear(extra) }
            }
            guard let result = PQgetResult(handle) else {
                fail(makeError(result: nil, query: statement.sql), statement)
                break
            }
            if PQresultStatus(result) != PGRES_PIPELINE_ABORTED {
                do { results.append(try rows(from: result, query: statement.sql)) } catch let error as PostgresError {
                    fail(error, statement)
                    forgetPreparedStatement(after: error, sql: statement.sql)
                }
            }
            PQclear(result)
            // Each statement's results end with a NULL.
            while let extra = PQgetResult(handle) { PQclear(extra) }
        }
        // The Sync's own result closes the pipeline.
        if firstError == nil || isOpen {
            while let result = PQgetResult(handle) {
                let status = PQresultStatus(result)
                PQclear(result)
                if status == PGRES_PIPELINE_SYNC { break }
            }
        }
        if PQexitPipelineMode(handle) != 1 {
            let error = firstError ?? makeError(result: nil, query: all.first?.sql ?? "pipeline")
            abandonPipeline()
            throw error
        }
        if let firstError { throw firstError }
        return Array(results.dropFirst(skipped))
    }

    /// A pipeline that cannot be brought back to a clean state: the session is closed, so no later
    /// statement can run on it half-read (the pool then drops it).
    private func abandonPipeline() {
        close()
    }

    // MARK: - Prepared statements

    /// Most statements one session prepares (`PostgresConnectionOptions.preparesStatements`); SQL texts past
    /// it run unnamed. A bound, not a cache that evicts: a job building SQL text per call (an IN list of
    /// varying length) must not grow the server's memory, nor churn the cache.
    static let maxPreparedStatements = 200

    /// The name of the session's prepared statement for `sql`, if it has one.
    /// Internal: used by `query` (PostgresConnection.swift).
    func preparedName(_ sql: String) -> String? {
        preparesStatements ? preparedNames[sql] : nil
    }

    /// True when `sql`, not yet prepared, is to be prepared on its first run.
    /// Internal: used by `query` (PostgresConnection.swift).
    func mayPrepare(_ sql: String) -> Bool {
        preparesStatements && preparedNames.count < Self.maxPreparedStatements
    }

    /// After a statement failed: forgets prepared statements the error shows the server no longer has
    /// (26000: someone ran DEALLOCATE or DISCARD ALL on this session) or can no longer run as prepared
    /// (0A000 "cached plan must not change result type": a table's columns changed under a `SELECT *`), so
    /// that the next run prepares again.
    /// Internal: used by `query` (PostgresConnection.swift).
    func forgetPreparedStatement(after error: PostgresError, sql: String) {
        switch error.sqlState {
        case "26000": preparedNames.removeAll()
        case "0A000" where error.message.contains("cached plan"): preparedNames[sql] = nil
        default: break
        }
    }
}
