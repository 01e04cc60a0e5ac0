import Foundation
import WorkersQueue
import WorkersStorage
import WorkersSubjectKeys

/// After PostgreSQL is restored from a backup taken at time T (docs/jobs-privacy.md, "Restoring a backup"): every
/// erasure since T is undone in PostgreSQL — the persons' data keys and accounts are back. `run(since:)` replays them
/// from the erasure journal (`SubjectKeyErasureJournal`: every shard's Redis, plus lines the operator shipped
/// elsewhere) **before workers serve**:
/// 1. the data keys of every journaled person digest are deleted again (one transaction), so the persons' sealed
///    jobs die `SubjectErased` from the first fetch on;
/// 2. every key that no longer unwraps under the configured KEKs is deleted (a restore older than a rotation whose
///    old KEK was destroyed brings such rows back; they could never open a job again);
/// 3. the digests are matched to `users.id`s (each id's digest under the lookup key, read in pages of 10,000 ids),
///    and for each person: recorded as erased (no key is made for them again), their account marked for deletion
///    with a request due now (the restored one, or a new one) — the deletions to enqueue again, which anonymise
///    the account and owe the store cancellations again;
/// 4. every worker is told to drop cached keys.
/// Idempotent: a second run finds the keys gone and the requests open (enqueueing a deletion twice is harmless:
/// the ledger applies it once).
///
/// Thread rules: a value; one call at a time per database (it takes one pooled connection).
public struct ErasureRecovery: Sendable {
    public let store: SubjectKeyStore
    public let database: PostgresPool
    public let journal: SubjectKeyErasureJournal

    public init(store: SubjectKeyStore, database: PostgresPool, journal: SubjectKeyErasureJournal) {
        self.store = store
        self.database = database
        self.journal = journal
    }

    /// What a recovery did. Holds no person: counts, and the deletions to enqueue (ids the restored rows hold).
    public struct Report: Sendable, Equatable {
        /// Distinct erasures journaled at or after `since` (Redis and the lines given).
        public var journaled = 0
        /// Data keys of journaled persons the restore had brought back, deleted again.
        public var keysErasedAgain = 0
        /// Data keys that no longer unwrap, deleted.
        public var unopenableKeysErased = 0
        /// Journaled digests no `users.id` of the restored database matches (an account the backup predates).
        public var unmatched = 0
        /// The `AccountDeletionJob`s to enqueue again: (user, deletion request).
        public var deletions: [Deletion] = []
    }

    public struct Deletion: Sendable, Equatable {
        public let userID: UUID
        public let requestID: UUID
    }

    /// `lines`: entries shipped outside Redis (`SubjectKeyErasureJournal.export`), merged with Redis's journal.
    public func run(since: Date, lines: [SubjectKeyErasureJournal.Entry] = []) throws -> Report {
        var earliest: [Data: Date] = [:]
        for entry in try journal.entries(since: since) + lines.filter({ $0.erasedAt >= since }) {
            earliest[entry.personDigest] = min(earliest[entry.personDigest] ?? entry.erasedAt, entry.erasedAt)
        }
        var report = Report()
        report.journaled = earliest.count
        report.keysErasedAgain = try database.withConnection { conn in
            try conn.transaction { conn in
                try earliest.keys.sorted { $0.lexicographicallyPrecedes($1) }
                    .reduce(0) { $0 + (try store.erase(personDigest: $1, on: conn)) }
            }
        }
        report.unopenableKeysErased = try store.eraseKeysThatDoNotUnwrap()
        let persons = try matchPersons(Set(earliest.keys))
        report.unmatched = earliest.count - persons.count
        for person in persons.sorted(by: { $0.uuidString < $1.uuidString }) {
            report.deletions.append(Deletion(userID: person, requestID: try reopenDeletion(of: person)))
        }
        try SubjectKeyInvalidation.announce(on: journal.pools)
        return report
    }

    /// The `users.id`s whose person digest is in `digests`, reading the ids in pages.
    private func matchPersons(_ digests: Set<Data>) throws -> [UUID] {
        guard !digests.isEmpty else { return [] }
        var found: [UUID] = []
        var after = UUID(uuidString: "00000000-0000-0000-0000-000000000000")!
        while found.count < digests.count {
            let ids = try database.withConnection { conn in
                try conn.query("SELECT id FROM users WHERE id > $1 ORDER BY id LIMIT 10000", [after]).map { try $0.uuid("id") }
            }
            for id in ids where digests.contains(store.personDigest(id)) { found.append(id) }
            guard let last = ids.last, ids.count == 10_000 else { break }
            after = last
        }
        return found
    }

    /// Records `person` as erased (their keys go, no new one is made) and makes sure a deletion request of theirs is
    /// open and due now, the account marked for deletion: the restored request when there is one not cancelled,
    /// else a new one. Returns the request's id.
    private func reopenDeletion(of person: UUID) throws -> UUID {
        try database.withConnection { conn in
            try conn.transaction { conn in
                _ = try store.erase(personID: person, on: conn)
                try conn.execute("UPDATE users SET delete_requested = true WHERE id = $1", [person])
                if let open = try conn.queryFirst("""
                    SELECT id FROM deletion_requests WHERE user_id = $1 AND cancelled_at IS NULL
                    ORDER BY requested_at DESC LIMIT 1
                    """, [person]) {
                    let id = try open.uuid("id")
                    try conn.execute("UPDATE deletion_requests SET scheduled_at = LEAST(scheduled_at, now()) WHERE id = $1", [id])
                    return id
                }
                return try conn.queryFirst("""
                    INSERT INTO deletion_requests (user_id, scheduled_at) VALUES ($1, now()) RETURNING id
                    """, [person])!.uuid("id")
            }
        }
    }
}
