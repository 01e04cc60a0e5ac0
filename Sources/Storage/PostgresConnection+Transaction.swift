import WorkersTelemetry
import Tracing

/// Transactions on a `PostgresConnection`: BEGIN/COMMIT/ROLLBACK, savepoints for nested ones (their RELEASE sent
/// with the next statement, `pendingReleases`), and the tracing span of each (docs/tracing.md).
///
/// Thread rules: as the connection's (only its owning thread calls these; no locking here).
/// Invariant: `savepointDepth` counts the savepoints opened here that have not ended, and `pendingReleases` is 0
/// whenever no transaction is open (both declared in PostgresConnection.swift).
extension PostgresConnection {
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
}
