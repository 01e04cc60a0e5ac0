import CWorkersLibPQ
import Foundation

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
/// This file holds the session (connect, state, close) and its statements (`query`, `write`, `execute`,
/// `executeScript`) with the reading of their results and errors; PostgresConnection+Pipeline.swift how they
/// reach the server (pipelining, prepared statements, deferred writes); PostgresConnection+Transaction.swift
/// transactions, savepoints and their tracing spans. The stored state of all three is declared here.
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
    var pendingReleases = 0  // internal: used by PostgresConnection+Pipeline.swift, +Transaction.swift
    /// Statements of `write` not sent yet, oldest first; they go, after the pending RELEASEs, in the round trip
    /// of the next statement that reads a result. Invariant: empty whenever no transaction is open (COMMIT
    /// sends them, ROLLBACK and `close` drop them), and only filled while `writesMayDefer` and
    /// `savepointDepth == 0`.
    var deferredWrites: [Outgoing] = []  // internal: used by PostgresConnection+Pipeline.swift, +Transaction.swift
    /// Set only inside `deferringWrites`.
    var writesMayDefer = false  // internal: used by PostgresConnection+Pipeline.swift
    /// Savepoints opened by `transaction` that have not ended yet (0 at a transaction's top level).
    var savepointDepth = 0  // internal: used by PostgresConnection+Transaction.swift
    /// This session's prepared statements: SQL text to statement name (`preparesStatements`). A session's
    /// prepared statements outlive its transactions, so an entry is added only once the server accepted
    /// the statement; a new session (a new `PostgresConnection`, e.g. the pool's after a reconnect) starts
    /// empty.
    var preparedNames: [String: String] = [:]  // internal: used by PostgresConnection+Pipeline.swift
    /// The last number used in a prepared statement's name (names are never reused within a session).
    var preparedSerial = 0  // internal: used by PostgresConnection+Pipeline.swift
    let preparesStatements: Bool  // internal: used by PostgresConnection+Pipeline.swift
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

    // MARK: - Results and errors

    // internal: used by PostgresConnection+Pipeline.swift
    func rows(from result: OpaquePointer?, query sql: String) throws -> PostgresRows {
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
    /// Internal: used by PostgresConnection+Pipeline.swift.
    func makeError(result: OpaquePointer?, query sql: String) -> PostgresError {
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
