/// Every failure the Storage layer reports.
///
/// A value type with enough context to act on it without parsing text:
/// - `category` says *what kind* of failure it is (the worker runtime branches on
///   `isConnectionFailure` / `isTransient` to retry a job instead of sending it to `dead`);
/// - `sqlState` is PostgreSQL's five-character SQLSTATE when the server sent one (e.g. `23505`);
/// - `message` is the server's (or libpq's, or our) primary message;
/// - `query` is the first line of the SQL that failed, never its parameters (they may hold PII).
public struct PostgresError: Error, Sendable, CustomStringConvertible {
    /// What went wrong, coarse enough to decide on retry vs. permanent failure.
    public enum Category: String, Sendable {
        /// Could not connect, or the connection was lost (server restart, backend terminated,
        /// network failure). The connection is unusable; the work may be retried on a new one.
        case connection
        /// The server rejected a statement (syntax, constraint, permission, data error...).
        case query
        /// A value could not be decoded into the requested Swift type, or a column is missing.
        case decoding
        /// No pooled connection became available before the checkout timeout.
        case poolTimeout
        /// The pool was shut down.
        case poolClosed
        /// The API was misused (e.g. a parameter string containing a NUL byte, a bad URL).
        case usage
        /// A migration file or the `schema_migrations` table is inconsistent.
        case migration
    }

    public var category: Category
    /// SQLSTATE sent by the server, if any (`nil` for client-side failures).
    public var sqlState: String?
    /// Primary human-readable message; a data exception's quoted input value is left out (`withoutQuotedValues`).
    public var message: String
    /// Server's DETAIL field, if any. May contain row values: not part of `description`.
    public var detail: String?
    /// Server's HINT field, if any.
    public var hint: String?
    /// Name of the violated constraint, if any.
    public var constraint: String?
    /// First line of the SQL statement that failed (trimmed), if a statement was involved.
    public var query: String?
    /// True when the statement that failed was a `PostgresConnection.write` that had been deferred: it was
    /// sent, and its error thrown, by a later call on the connection (with the statement it was sent with
    /// skipped).
    public var deferred = false

    public init(category: Category, sqlState: String? = nil, message: String, detail: String? = nil,
                hint: String? = nil, constraint: String? = nil, query: String? = nil) {
        self.category = category
        self.sqlState = sqlState
        self.message = PostgresError.withoutQuotedValues(message, sqlState: sqlState)
        self.detail = detail
        self.hint = hint
        self.constraint = constraint
        self.query = query.map(PostgresError.firstLine)
    }

    /// True when the connection was lost or could not be established: the statement may not have run,
    /// nothing was committed by this transaction, and a retry on a fresh connection is the right move.
    public var isConnectionFailure: Bool { category == .connection }

    /// True when retrying the same work later can succeed: connection failures, pool exhaustion and the
    /// SQLSTATEs PostgreSQL documents as transient (serialization failure, deadlock, lock/statement
    /// timeout, too many connections, server starting up or shutting down).
    public var isTransient: Bool {
        switch category {
        case .connection, .poolTimeout: return true
        case .poolClosed, .decoding, .usage, .migration: return false
        case .query:
            guard let state = sqlState else { return false }
            return PostgresError.transientStates.contains(state) || state.hasPrefix("08")
        }
    }

    /// SQLSTATE 23505: a unique index refused the row.
    public var isUniqueViolation: Bool { sqlState == "23505" }

    /// Category, SQLSTATE, message, constraint, hint and the SQL's first line. `detail` is left out on
    /// purpose: the server puts row values there (`Key (email)=(...) already exists`), which may be
    /// personal data and must not end up in logs or the dead set.
    public var description: String {
        var text = "PostgresError.\(category.rawValue)"
        if let sqlState { text += " [\(sqlState)]" }
        text += ": \(message)"
        if let constraint { text += " (constraint: \(constraint))" }
        if let hint { text += " (hint: \(hint))" }
        if let query { text += " — in: \(query)" }
        if deferred { text += " (a deferred write)" }
        return text
    }

    /// The primary message with the input value it quotes left out. PostgreSQL's data-exception messages (SQLSTATE
    /// class 22) quote the offending input, which is whatever a job bound — an e-mail, a token, a coordinate:
    /// `invalid input syntax for type uuid: "jane@example.com"`, `value "99999999999" is out of range for type
    /// integer`, `invalid input value for enum ...: "..."`. Everything from the first to the last double quote
    /// becomes `"…"` (the value may itself contain quotes; the fixed text around it keeps its meaning); a lone
    /// quote cuts the message there. Other classes name identifiers, not values, in quotes (`column "email" does
    /// not exist`), and class 23 puts the row in DETAIL, which `description` leaves out: they are kept as sent.
    /// The `message` of an error built here never holds the value, so no log line or dead-set reason can.
    static func withoutQuotedValues(_ message: String, sqlState: String?) -> String {
        guard let sqlState, sqlState.hasPrefix("22"), let first = message.firstIndex(of: "\"") else { return message }
        let last = message.lastIndex(of: "\"")!
        let tail = last > first ? message[message.index(after: last)...] : ""
        return message[..<first] + "\"…\"" + tail
    }

    /// SQLSTATEs after which the same statement can succeed on retry.
    static let transientStates: Set<String> = [
        "40001", // serialization_failure
        "40P01", // deadlock_detected
        "55P03", // lock_not_available
        "57014", // query_canceled (statement_timeout)
        "53300", // too_many_connections
        "57P01", // admin_shutdown
        "57P02", // crash_shutdown
        "57P03", // cannot_connect_now
    ]

    /// SQLSTATEs (besides class 08) meaning the session is gone.
    static let connectionLostStates: Set<String> = ["57P01", "57P02", "57P03"]

    static func firstLine(_ sql: String) -> String {
        let trimmed = sql.drop(while: { $0.isWhitespace || $0.isNewline })
        let line = trimmed.prefix(while: { !$0.isNewline })
        return String(line.trimmingSuffix(while: { $0.isWhitespace })).truncated(to: 200)
    }
}

extension PostgresError {
    /// True when `error` is a `PostgresError` after which retrying the job later can succeed (`isTransient`).
    /// A static of Storage's own type, not a member of every `Error` (issue 53, point 6).
    public static func isTransient(_ error: any Error) -> Bool {
        (error as? PostgresError)?.isTransient ?? false
    }

    /// True when `error` is a `PostgresError` for a lost or impossible connection (`isConnectionFailure`).
    package static func isConnectionFailure(_ error: any Error) -> Bool {
        (error as? PostgresError)?.isConnectionFailure ?? false
    }
}

extension Substring {
    func trimmingSuffix(while predicate: (Character) -> Bool) -> Substring {
        var end = endIndex
        while end > startIndex {
            let previous = index(before: end)
            guard predicate(self[previous]) else { break }
            end = previous
        }
        return self[startIndex..<end]
    }
}

extension String {
    func truncated(to limit: Int) -> String {
        count <= limit ? self : String(prefix(limit)) + "…"
    }
}
