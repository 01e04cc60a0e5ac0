import CLibPQ
import Foundation
import Telemetry
import Tracing

/// How a `PostgresConnection` connects and sets up its session.
public struct PostgresConnectionOptions: Sendable {
    /// Seconds libpq waits for the server when connecting (`connect_timeout`); a URL's own
    /// `connect_timeout` wins.
    public var connectTimeout: Int
    /// `application_name` shown in `pg_stat_activity` unless the URL sets one.
    public var applicationName: String
    /// Server-side `statement_timeout` in milliseconds for every statement of the session; nil = server default.
    public var statementTimeoutMilliseconds: Int?
    /// Statements are prepared once per session, on their first run (up to
    /// `PostgresConnection.maxPreparedStatements` texts), and later runs skip their parsing and planning.
    /// Turn it off behind a pooler that hands each transaction to another server session (PgBouncer's
    /// transaction mode without `max_prepared_statements`): a prepared statement exists only in the session
    /// that prepared it.
    public var preparesStatements: Bool

    public init(connectTimeout: Int = 5, applicationName: String = "swift-workers",
                statementTimeoutMilliseconds: Int? = nil, preparesStatements: Bool = true) {
        self.connectTimeout = connectTimeout
        self.applicationName = applicationName
        self.statementTimeoutMilliseconds = statementTimeoutMilliseconds
        self.preparesStatements = preparesStatements
    }
}

/// One PostgreSQL session over libpq.
///
/// ## Threading
/// A `PGconn` must not be used by two threads at once. **Invariant:** a `PostgresConnection` is owned by
/// exactly one thread at a time — the thread that created it, or the thread a `PostgresPool` handed it to
/// inside `withConnection` — and only that thread calls its methods. Ownership moves only through a
/// happens-before edge (the pool's lock). The class is `@unchecked Sendable` solely so that it can travel
/// through such hand-offs; it does no locking of its own.
///
/// ## Safety
/// Values never enter SQL text: `query`/`execute`/`write`/`pipeline` send them as separate parameters
/// (extended protocol: `PQexecParams`, `PQexecPrepared`, their pipeline forms), which also refuses several
/// statements in one string. `executeScript` (used for migrations) runs trusted, constant SQL and takes no
/// parameters.
///
/// ## Round trips
/// - A statement's SQL text is prepared once per session, on its first run, in the same round trip
///   (`PostgresConnectionOptions.preparesStatements`, up to `maxPreparedStatements` texts); later runs skip
///   parsing and planning. The cost: each session keeps its statements (and, after a few runs, a generic plan
///   the planner may prefer to a per-value one) in server memory until it ends, and a transaction-mode pooler
///   that moves transactions between server sessions needs the option off.
/// - A nested transaction's RELEASE waits for the next statement (`pendingReleases`).
/// - Inside `deferringWrites`, a `write` at a transaction's top level waits too (`deferredWrites`), so a
///   caller that only writes pays one round trip for many statements; their errors surface later, marked
///   `PostgresError.deferred`.
///
/// The session runs with `TimeZone = 'UTC'`, `DateStyle = ISO` and `client_encoding = UTF8`.
public final class PostgresConnection: @unchecked Sendable {
    /// The libpq session (internal so that PostgresNotifications.swift can wait on its socket).
    private(set) var handle: OpaquePointer?
    /// Savepoints of nested transactions that succeeded and still await their RELEASE. The RELEASE needs
    /// no answer, so it is sent with the next statement (in one pipeline) instead of costing a round trip;
    /// COMMIT and ROLLBACK make it moot. Invariant: 0 whenever no transaction is open.
    private var pendingReleases = 0
    /// Statements of `write` not sent yet, oldest first; they go, after the pending RELEASEs, in the round trip
    /// of the next statement that reads a result. Invariant: empty whenever no transaction is open (COMMIT
    /// sends them, ROLLBACK and `close` drop them), and only filled while `writesMayDefer` and
    /// `savepointDepth == 0`.
    private var deferredWrites: [Outgoing] = []
    /// Set only inside `deferringWrites`.
    private var writesMayDefer = false
    /// Savepoints opened by `transaction` that have not ended yet (0 at a transaction's top level).
    private var savepointDepth = 0
    /// This session's prepared statements: SQL text to statement name (`preparesStatements`). A session's
    /// prepared statements outlive its transactions, so an entry is added only once the server accepted
    /// the statement; a new session (a new `PostgresConnection`, e.g. the pool's after a reconnect) starts
    /// empty.
    private var preparedNames: [String: String] = [:]
    /// The last number used in a prepared statement's name (names are never reused within a session).
    private var preparedSerial = 0
    private let preparesStatements: Bool
    /// The URL without its password, for messages and logs.
    public let redactedURL: String

    /// Connects to `url` (`postgres://user:pass@host:port/db?sslmode=require&...`; any libpq URI parameter
    /// works, `sslmode` included). Throws a `.connection` `PostgresError` when the server cannot be reached
    /// or refuses the session, `.usage` when `url` is not a postgres URL.
    public init(url: String, options: PostgresConnectionOptions = .init()) throws {
        redactedURL = PostgresURL.redacted(url)
        preparesStatements = options.preparesStatements
        guard PostgresURL.isPostgresURL(url) else {
            throw PostgresError(category: .usage, message: "not a postgres:// or postgresql:// URL: \(redactedURL)")
        }
        guard !url.utf8.contains(0) else {
            throw PostgresError(category: .usage, message: "URL contains a NUL byte")
        }
        // Keywords are applied in order and later ones win: the defaults come before `dbname` (the
        // expanded URL) so the URL can override them; the encoding comes after so it is always UTF-8.
        let settings: [(String, String)] = [
            ("connect_timeout", String(options.connectTimeout)),
            ("fallback_application_name", options.applicationName),
            ("keepalives", "1"),
            ("keepalives_idle", "30"),
            ("keepalives_interval", "10"),
            ("keepalives_count", "3"),
            ("dbname", url),
            ("client_encoding", "UTF8"),
        ]
        let connection = PostgresConnection.connect(settings)
        guard let connection, PQstatus(connection) == CONNECTION_OK else {
            let message = connection.map { PostgresConnection.errorMessage(of: $0) } ?? "out of memory"
            PQfinish(connection)
            throw PostgresError(category: .connection, message: "cannot connect to \(redactedURL): \(message)")
        }
        // Discard NOTICEs (e.g. "relation already exists, skipping") instead of printing them on stderr.
        PQsetNoticeProcessor(connection, { _, _ in }, nil)
        handle = connection

        let setup = PQexec(connection, "SET TIME ZONE 'UTC'; SET DateStyle TO ISO, YMD")
        let setupOK = PQresultStatus(setup) == PGRES_COMMAND_OK
        PQclear(setup)
        guard setupOK else {
            let failure = makeError(result: nil, query: "SET TIME ZONE 'UTC'")
            close()
            throw failure
        }
        if let milliseconds = options.statementTimeoutMilliseconds {
            do {
                try query("SELECT set_config('statement_timeout', $1, false)", [String(milliseconds)])
            } catch {
                close()
                throw error
            }
        }
    }

    deinit {
        PQfinish(handle)
    }

    private static func connect(_ settings: [(String, String)]) -> OpaquePointer? {
        let keywords = settings.map { strdup($0.0) }
        let values = settings.map { strdup($0.1) }
        defer {
            keywords.forEach { free($0) }
            values.forEach { free($0) }
        }
        let keywordPointers: [UnsafePointer<CChar>?] = keywords.map { $0.map { UnsafePointer($0) } } + [nil]
        let valuePointers: [UnsafePointer<CChar>?] = values.map { $0.map { UnsafePointer($0) } } + [nil]
        return keywordPointers.withUnsafeBufferPointer { keywordBuffer in
            valuePointers.withUnsafeBufferPointer { valueBuffer in
                PQconnectdbParams(keywordBuffer.baseAddress, valueBuffer.baseAddress, 1)
            }
        }
    }

    // MARK: - State

    /// Closes the session. Later calls throw a `.connection` error. Idempotent.
    public func close() {
        PQfinish(handle)
        handle = nil
        pendingReleases = 0
        deferredWrites.removeAll()
        preparedNames.removeAll()
    }

    /// True when libpq still considers the session open (it learns about a lost server only when it
    /// next reads from the socket; see `checkAlive()`).
    public var isOpen: Bool {
        guard let handle else { return false }
        return PQstatus(handle) == CONNECTION_OK
    }

    /// True when a transaction (or a failed one) is open on this session.
    public var isInTransaction: Bool {
        guard let handle else { return false }
        return PQtransactionStatus(handle) != PQTRANS_IDLE
    }

    /// True when the open transaction hit an error and only ROLLBACK is accepted.
    public var isTransactionFailed: Bool {
        guard let handle else { return false }
        return PQtransactionStatus(handle) == PQTRANS_INERROR
    }

    /// Server process id of this session (0 when closed).
    public var backendPID: Int32 {
        guard let handle else { return 0 }
        return PQbackendPID(handle)
    }

    /// Reads whatever the server sent while the session was idle, without blocking, and reports whether
    /// the session is still usable. Catches a backend that was terminated or a server that shut down
    /// (their FATAL message and EOF are already in the socket) without a round trip.
    public func checkAlive() -> Bool {
        guard let handle, PQstatus(handle) == CONNECTION_OK else { return false }
        // One read may return only the FATAL message; EOF is seen by the next one. An idle session
        // receives nothing in normal operation, so two or three non-blocking reads are cheap.
        for _ in 0..<3 {
            guard PQconsumeInput(handle) == 1, PQstatus(handle) == CONNECTION_OK else { return false }
        }
        return true
    }

    // MARK: - Statements

    /// Runs one statement with `$1...$n` bound to `parameters` and returns its rows.
    /// A `nil` element (or a nil Optional) is SQL NULL. Writes deferred by `write` go first, in the same
    /// round trip; if one of them fails, this throws its error (`PostgresError.deferred`) and the statement
    /// does not run.
    @discardableResult
    public func query(_ sql: String, _ parameters: [(any PostgresBindable)?] = []) throws -> PostgresRows {
        guard let handle else {
            throw PostgresError(category: .connection, message: "connection is closed", query: sql)
        }
        if sql == "ROLLBACK" {
            // ROLLBACK ends every savepoint and undoes every write: what still waits to be sent is moot (and
            // ROLLBACK must not wait behind a statement an aborted transaction would refuse).
            pendingReleases = 0
            deferredWrites.removeAll()
        } else if sql == "COMMIT" {
            pendingReleases = 0  // COMMIT releases every savepoint; deferred writes still go first
        }
        let bound = try BoundParameters(parameters, query: sql)
        let name = preparedName(sql)
        if pendingReleases > 0 || !deferredWrites.isEmpty || name == nil && mayPrepare(sql) {
            return try send([Outgoing(sql: sql, parameters: bound, deferred: false)])[0]
        }
        let result = bound.withPointers { count, values in
            if let name { return PQexecPrepared(handle, name, count, values, nil, nil, 0) }
            return PQexecParams(handle, sql, count, nil, values, nil, nil, 0)
        }
        defer { PQclear(result) }
        do { return try rows(from: result, query: sql) } catch let error as PostgresError {
            forgetPreparedStatement(after: error, sql: sql)
            throw error
        }
    }

    /// Runs a statement whose result the caller does not read (no rows, no count): an INSERT, UPDATE or
    /// DELETE whose only outcome that matters is success. While the connection's owner allows it
    /// (`deferringWrites`) and a transaction is open at its top level (no savepoint of `transaction` open),
    /// the statement is not sent now: it waits, in order, and goes in the same round trip as the next
    /// statement that reads a result (`query`, `execute`, `pipeline`, COMMIT) — so a job that only writes
    /// costs no round trip of its own. Its error then surfaces from that later call, marked
    /// `PostgresError.deferred`, and leaves the transaction aborted as any failed statement does; a ROLLBACK
    /// drops it unsent. Otherwise the statement runs at once and its error is thrown here.
    ///
    /// Parameters are converted to text now (a NUL byte is refused here, not later).
    public func write(_ sql: String, _ parameters: [(any PostgresBindable)?] = []) throws {
        guard writesMayDefer, savepointDepth == 0, handle != nil, isInTransaction, !isTransactionFailed else {
            _ = try query(sql, parameters)
            return
        }
        deferredWrites.append(Outgoing(sql: sql, parameters: try BoundParameters(parameters, query: sql), deferred: true))
        if deferredWrites.count >= Self.maxDeferredWrites { try sendDeferredWrites() }
    }

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
    private struct Outgoing {
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
    private func send(_ statements: [Outgoing]) throws -> [PostgresRows] {
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
    private func preparedName(_ sql: String) -> String? {
        preparesStatements ? preparedNames[sql] : nil
    }

    /// True when `sql`, not yet prepared, is to be prepared on its first run.
    private func mayPrepare(_ sql: String) -> Bool {
        preparesStatements && preparedNames.count < Self.maxPreparedStatements
    }

    /// After a statement failed: forgets prepared statements the error shows the server no longer has
    /// (26000: someone ran DEALLOCATE or DISCARD ALL on this session) or can no longer run as prepared
    /// (0A000 "cached plan must not change result type": a table's columns changed under a `SELECT *`), so
    /// that the next run prepares again.
    private func forgetPreparedStatement(after error: PostgresError, sql: String) {
        switch error.sqlState {
        case "26000": preparedNames.removeAll()
        case "0A000" where error.message.contains("cached plan"): preparedNames[sql] = nil
        default: break
        }
    }

    /// Runs one statement and returns the number of rows it affected.
    @discardableResult
    public func execute(_ sql: String, _ parameters: [(any PostgresBindable)?] = []) throws -> Int {
        try query(sql, parameters).affectedRows
    }

    /// The first row of the statement's result, or nil when it returned none.
    public func queryFirst(_ sql: String, _ parameters: [(any PostgresBindable)?] = []) throws -> PostgresRow? {
        try query(sql, parameters).first
    }

    /// Runs trusted SQL text that may hold several statements (migration files) through `PQexec`.
    /// Never pass anything built from values: this entry point has no parameters on purpose.
    public func executeScript(_ sql: String) throws {
        guard let handle else {
            throw PostgresError(category: .connection, message: "connection is closed", query: sql)
        }
        if pendingReleases > 0 || !deferredWrites.isEmpty { _ = try send([]) }
        let result = PQexec(handle, sql)
        defer { PQclear(result) }
        _ = try rows(from: result, query: sql)
    }

    // MARK: - Transactions

    /// Runs `body` in a transaction: BEGIN, then COMMIT when `body` returns, ROLLBACK when it throws
    /// (the error is rethrown unchanged). Called inside another transaction, it uses a savepoint, so an
    /// inner failure undoes only the inner work.
    ///
    /// If `body` swallowed a statement error, the transaction is aborted on the server: this rolls it back
    /// and throws SQLSTATE 25P02 rather than pretending to commit.
    ///
    /// Inside a traced job run (docs/tracing.md) it is a client span `SQL TRANSACTION` (`SQL SAVEPOINT` when
    /// nested): the kind of statement only, never SQL text or parameters.
    @discardableResult
    public func transaction<T>(_ body: (PostgresConnection) throws -> T) throws -> T {
        guard let span = Self.transactionSpan(nested: isInTransaction, firstStatement: nil) else {
            return try transactionUntraced(body)
        }
        defer { span.end() }
        do {
            return try transactionUntraced(body)
        } catch {
            Self.fail(span, error)
            throw error
        }
    }

    /// A span for one transaction, or nil when tracing is off or no span is bound on this thread.
    /// `firstStatement`: its leading keyword (`INSERT`, `SELECT`…) becomes `db.first_statement`.
    private static func transactionSpan(nested: Bool, firstStatement: String?) -> (any Span)? {
        guard let span = JobTracing.startChildSpan(nested ? "SQL SAVEPOINT" : "SQL TRANSACTION", ofKind: .client)
        else { return nil }
        span.attributes["db.system.name"] = "postgresql"
        span.attributes["db.operation.name"] = nested ? "SAVEPOINT" : "TRANSACTION"
        if let keyword = firstStatement?.split(whereSeparator: { $0.isWhitespace }).first {
            span.attributes["db.first_statement"] = keyword.uppercased()
        }
        return span
    }

    /// Marks a transaction span failed with the SQLSTATE only (a server message may quote parameter values).
    private static func fail(_ span: any Span, _ error: any Error) {
        span.attributes["error.type"] = (error as? PostgresError)?.sqlState ?? String(describing: type(of: error))
        span.setStatus(SpanStatus(code: .error))
    }

    private func transactionUntraced<T>(_ body: (PostgresConnection) throws -> T) throws -> T {
        let nested = isInTransaction
        try execute(nested ? "SAVEPOINT storage_nested" : "BEGIN")
        if nested { savepointDepth += 1 }
        defer { if nested { savepointDepth -= 1 } }
        return try finishTransaction(nested: nested) { try body(self) }
    }

    /// `transaction`, with `first` sent together with BEGIN (or SAVEPOINT) in one round trip; `body`
    /// receives its rows. A failure of `first` rolls back and throws, like any failure inside.
    @discardableResult
    public func transaction<T>(startingWith first: Statement,
                               _ body: (PostgresConnection, PostgresRows) throws -> T) throws -> T {
        guard let span = Self.transactionSpan(nested: isInTransaction, firstStatement: first.sql) else {
            return try transactionUntraced(startingWith: first, body)
        }
        defer { span.end() }
        do {
            return try transactionUntraced(startingWith: first, body)
        } catch {
            Self.fail(span, error)
            throw error
        }
    }

    private func transactionUntraced<T>(startingWith first: Statement,
                                        _ body: (PostgresConnection, PostgresRows) throws -> T) throws -> T {
        let nested = isInTransaction
        if nested && isTransactionFailed {
            // SAVEPOINT fails on an aborted transaction: let it say so, without touching outer savepoints.
            try execute("SAVEPOINT storage_nested")
        }
        let opened: [PostgresRows]
        do {
            opened = try pipeline([Statement(nested ? "SAVEPOINT storage_nested" : "BEGIN"), first])
        } catch {
            // BEGIN (or the savepoint) ran and `first` failed; or the session broke. Either way undo it.
            if isOpen && (nested ? isTransactionFailed : isInTransaction) { rollbackQuietly(nested: nested) }
            throw error
        }
        if nested { savepointDepth += 1 }
        defer { if nested { savepointDepth -= 1 } }
        return try finishTransaction(nested: nested) { try body(self, opened[1]) }
    }

    /// Runs `body` inside the transaction (or savepoint) just opened, then commits (releases) it, or rolls it
    /// back when `body` throws or left it aborted.
    private func finishTransaction<T>(nested: Bool, _ body: () throws -> T) throws -> T {
        let value: T
        do {
            value = try body()
        } catch {
            rollbackQuietly(nested: nested)
            throw error
        }
        if isTransactionFailed {
            rollbackQuietly(nested: nested)
            throw PostgresError(category: .query, sqlState: "25P02",
                                message: "the transaction was aborted by an error the body caught; rolled back")
        }
        if nested {
            pendingReleases += 1  // sent with the next statement; see `pendingReleases`
        } else {
            pendingReleases = 0  // COMMIT releases every savepoint
            let commit: PostgresRows
            do { commit = try query("COMMIT") } catch {
                // A deferred write failed (COMMIT was skipped): the transaction is still open, aborted.
                if isOpen && isInTransaction { rollbackQuietly(nested: false) }
                throw error
            }
            if commit.commandTag == "ROLLBACK" {
                throw PostgresError(category: .query, sqlState: "25P02",
                                    message: "COMMIT rolled back an aborted transaction", query: "COMMIT")
            }
        }
        return value
    }

    private func rollbackQuietly(nested: Bool) {
        guard isOpen else { return }
        if nested {
            // Inner savepoints still awaiting RELEASE sit above ours under the same name: undo and drop each
            // of them, then ours (an aborted transaction accepts ROLLBACK TO, not RELEASE, so no bare RELEASE
            // goes first). One round trip.
            let savepoints = pendingReleases + 1
            pendingReleases = 0
            deferredWrites.removeAll()  // none at a savepoint's depth; were there any, they belong to it
            let undo = [Statement("ROLLBACK TO SAVEPOINT storage_nested"), Statement("RELEASE SAVEPOINT storage_nested")]
            _ = try? pipeline(Array(Array(repeating: undo, count: savepoints).joined()))
        } else {
            pendingReleases = 0
            _ = try? execute("ROLLBACK")
        }
    }

    // MARK: - Results and errors

    private func rows(from result: OpaquePointer?, query sql: String) throws -> PostgresRows {
        guard let result else { throw makeError(result: nil, query: sql) }
        let status = PQresultStatus(result)
        guard status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK || status == PGRES_EMPTY_QUERY else {
            throw makeError(result: result, query: sql)
        }
        let rowCount = Int(PQntuples(result))
        let columnCount = Int(PQnfields(result))
        var columns: [String] = []
        columns.reserveCapacity(columnCount)
        for column in 0..<columnCount {
            columns.append(PQfname(result, Int32(column)).map { String(cString: $0) } ?? "?column?")
        }
        var values: [[String?]] = []
        values.reserveCapacity(rowCount)
        for row in 0..<rowCount {
            var rowValues: [String?] = []
            rowValues.reserveCapacity(columnCount)
            for column in 0..<columnCount {
                if PQgetisnull(result, Int32(row), Int32(column)) == 1 {
                    rowValues.append(nil)
                } else {
                    rowValues.append(PQgetvalue(result, Int32(row), Int32(column)).map { String(cString: $0) } ?? "")
                }
            }
            values.append(rowValues)
        }
        let tag = PQcmdStatus(result).map { String(cString: $0) } ?? ""
        let affected = PQcmdTuples(result).flatMap { Int(String(cString: $0)) } ?? rowCount
        return PostgresRows(columns: columns, values: values, affectedRows: affected, commandTag: tag, query: sql)
    }

    /// Builds the error for a failed statement. The category is `.connection` when libpq lost the session
    /// or the server sent a connection-class SQLSTATE (08xxx, 57P01-57P03).
    private func makeError(result: OpaquePointer?, query sql: String) -> PostgresError {
        func field(_ code: Character) -> String? {
            guard let result, let ascii = code.asciiValue, let value = PQresultErrorField(result, Int32(ascii)) else {
                return nil
            }
            return String(cString: value)
        }
        let sqlState = field("C")
        var message = field("M") ?? ""
        if message.isEmpty {
            if let result, let text = PQresultErrorMessage(result) { message = String(cString: text) }
        }
        if message.isEmpty, let handle { message = PostgresConnection.errorMessage(of: handle) }
        if message.isEmpty { message = "unknown error" }
        message = message.trimmingCharacters(in: .whitespacesAndNewlines)

        let lost = !isOpen
            || (sqlState.map { $0.hasPrefix("08") || PostgresError.connectionLostStates.contains($0) } ?? false)
            || (result == nil)
        return PostgresError(category: lost ? .connection : .query, sqlState: sqlState, message: message,
                             detail: field("D"), hint: field("H"), constraint: field("n"), query: sql)
    }

    private static func errorMessage(of handle: OpaquePointer) -> String {
        guard let text = PQerrorMessage(handle) else { return "" }
        return String(cString: text).trimmingCharacters(in: .whitespacesAndNewlines)
    }
}

/// Helpers for postgres:// URLs. Pure functions.
public enum PostgresURL {
    static func isPostgresURL(_ url: String) -> Bool {
        url.hasPrefix("postgres://") || url.hasPrefix("postgresql://")
    }

    /// `url` with every password replaced by `***`, safe for messages and logs:
    /// * the userinfo's, from its first `:` to the **last** `@` (`postgres://user:***@host/db`), so a password
    ///   holding `?`, `/` or `@` is hidden whole (a URL whose query holds an `@` may lose more than the password);
    /// * every `password=` parameter of the query string (libpq reads one there): `?sslmode=require&password=***`;
    /// * in a libpq keyword/value string (not a URL, refused by `PostgresConnection` with this text in the
    ///   message), every `password=` word, quoted or not: `host=db password=*** dbname=app`; in a URL without its
    ///   scheme, the userinfo's as above (`user:***@db/app`).
    /// Parameter names are matched without regard to case. Pure.
    public static func redacted(_ url: String) -> String {
        let scheme = url.range(of: "://")
        let loginStart = scheme?.upperBound ?? url.startIndex
        var text = url
        if let at = url[loginStart...].lastIndex(of: "@"), let colon = url[loginStart..<at].firstIndex(of: ":") {
            text = String(url[..<colon]) + ":***" + String(url[at...])
        }
        // Not a URL: keyword/value, or a URL whose scheme was forgotten (`user:pw@db/app`, hidden above); the
        // query rule below applies to it too.
        if scheme == nil { text = redactingKeywordPasswords(text) }
        // Every `password=` right after a `?` or a `&`, wherever it is (a `?` may also sit before the query).
        guard let question = text.firstIndex(of: "?") else { return text }
        let parameters = text[text.index(after: question)...].split(separator: "&", omittingEmptySubsequences: false).map { pair in
            pair.split(separator: "?", omittingEmptySubsequences: false).map { part in
                guard let equals = part.firstIndex(of: "="), part[..<equals].lowercased() == "password" else { return String(part) }
                return part[...equals] + "***"
            }.joined(separator: "?")
        }
        return String(text[...question]) + parameters.joined(separator: "&")
    }

    /// `text` (libpq's `key=value key='quoted value'` form) with every `password` value replaced by `***`.
    static func redactingKeywordPasswords(_ text: String) -> String {
        var out = ""
        var rest = Substring(text)
        while let range = rest.range(of: "password", options: .caseInsensitive) {
            out += rest[..<range.lowerBound]
            out += rest[range]
            rest = rest[range.upperBound...]
            let spaces = rest.prefix(while: { $0 == " " })
            guard rest.dropFirst(spaces.count).first == "=" else { continue }
            out += spaces + "="
            rest = rest.dropFirst(spaces.count + 1)
            rest = rest.drop(while: { $0 == " " })
            if rest.first == "'" {  // a quoted value: up to the next quote not escaped by a backslash
                var index = rest.index(after: rest.startIndex)
                while index < rest.endIndex, rest[index] != "'" {
                    index = rest[index] == "\\" ? rest.index(index, offsetBy: 2, limitedBy: rest.endIndex) ?? rest.endIndex
                                                : rest.index(after: index)
                }
                rest = index < rest.endIndex ? rest[rest.index(after: index)...] : rest[rest.endIndex...]
            } else {
                rest = rest.drop(while: { !$0.isWhitespace })
            }
            out += "***"
        }
        return out + rest
    }
}

/// Statement parameters as C strings for libpq: every value's text, NUL-terminated, one after the other in one
/// byte array (written by `PostgresBindable.appendPostgresText`, no `String` or C copy per value), immutable once
/// built. Values are checked here: a NUL byte cannot be sent as text and is refused.
/// Written by the thread that builds it; read by the thread that sends the statement (the connection's owner).
final class BoundParameters {
    /// The values' bytes, each followed by a NUL.
    private let text: [UInt8]
    /// Where each parameter's text starts in `text`; nil for SQL NULL.
    private let starts: [Int?]

    init(_ parameters: [(any PostgresBindable)?], query sql: String) throws {
        guard parameters.count <= Int(Int32.max) else {
            throw PostgresError(category: .usage, message: "too many parameters", query: sql)
        }
        var text: [UInt8] = []
        var starts: [Int?] = []
        starts.reserveCapacity(parameters.count)
        for (position, parameter) in parameters.enumerated() {
            let start = text.count
            guard let parameter, parameter.appendPostgresText(to: &text) else {
                text.removeSubrange(start...)
                starts.append(nil)
                continue
            }
            if text[start...].contains(0) {
                throw PostgresError(category: .usage, message: "parameter $\(position + 1) contains a NUL byte", query: sql)
            }
            text.append(0)
            starts.append(start)
        }
        self.text = text
        self.starts = starts
    }

    /// Calls `body` with the parameter count and the array of value pointers (NULL = SQL NULL), valid during `body`.
    func withPointers<T>(_ body: (Int32, UnsafePointer<UnsafePointer<CChar>?>?) -> T) -> T {
        text.withUnsafeBytes { bytes in
            let base = bytes.baseAddress?.assumingMemoryBound(to: CChar.self)
            let pointers: [UnsafePointer<CChar>?] = starts.map { start in
                guard let start, let base else { return nil }
                return UnsafePointer(base + start)
            }
            return pointers.withUnsafeBufferPointer { buffer in body(Int32(buffer.count), buffer.baseAddress) }
        }
    }
}
