import Crypto
import Foundation
import WorkersQueue
import WorkersStorage

/// The per-subject data keys (docs/jobs-privacy.md, "Encrypted arguments"), in PostgreSQL
/// (`0018_subject_keys.sql`): one random AES-256 key per subject, stored wrapped (AES-256-GCM) under the KEK of
/// the configuration, under a random key id. A subject (a `users.id`, or an e-mail address) is found by its
/// digest, HMAC-SHA256 under a random lookup key that is itself stored wrapped under the KEK: the table never holds
/// an e-mail address in clear, and a stolen dump cannot be matched against a list of addresses (a plain SHA-256
/// could). The lookup key survives a KEK rotation (it is re-wrapped), so digests never change.
///
/// A key's person (the `users.id` erased with it) is linked by a keyed digest too, `person_digest` =
/// HMAC-SHA256(lookup key, "person|" + the lowercased id) (`0020_subject_key_person_digest.sql`): a PostgreSQL dump
/// plus a copy of Redis (whose envelopes carry key ids) do not name the person of a sealed job without the KEK.
///
/// Invariants: a data key is only ever written wrapped; neither a key id nor a row names a person in clear (rows
/// from before 0020 keep `person_id` until the first `init` with the KEK moves them); erasing a person deletes their
/// rows (`erase(personID:on:)`), and nothing else holds their key (an unwrapped copy lives at most `cacheTTL` in a
/// worker's cache, and is dropped fleet-wide at once by `SubjectKeyInvalidation`).
///
/// Thread rules: immutable after `init`; every method borrows a pooled connection; any thread.
public final class SubjectKeyStore: Sendable {
    let pool: PostgresPool
    public let current: KeyEncryptionKey
    public let previous: KeyEncryptionKey?
    private let lookupKeyBytes: Data  // `SymmetricKey` is not `Sendable`

    /// Opens the store: reads the wrapped lookup key and checks the KEK against it (the AES-GCM tag of the wrapped
    /// lookup key is the check value), so a wrong KEK fails here, at start, not per job. The first start ever writes
    /// a new lookup key under the current KEK; a start with a `previous` KEK that PostgreSQL knows (a rotation under
    /// way) also writes the lookup key under the current one.
    public init(pool: PostgresPool, current: KeyEncryptionKey, previous: KeyEncryptionKey? = nil) throws {
        self.pool = pool
        self.current = current
        self.previous = previous
        self.lookupKeyBytes = try pool.withConnection { conn in try Self.openLookupKey(conn, current: current, previous: previous) }
        // Best effort: a store whose key table is unreadable now still opens (its calls fail, and wait, one by one),
        // and rows not moved yet are still erased by `person_id`; the next start moves them.
        try? linkLegacyPersons()
    }

    /// Moves the clear `person_id` of rows written before `0020_subject_key_person_digest.sql` to `person_digest`,
    /// `batchSize` rows per committed transaction (rows another process is moving are skipped, it finishes them).
    /// One query when there is none left, which is every start after the first.
    func linkLegacyPersons(batchSize: Int = 1000) throws {
        try pool.withConnection { conn in
            while true {
                let moved = try conn.transaction { conn -> Int in
                    let rows = try conn.query("""
                        SELECT key_id, person_id FROM subject_keys WHERE person_id IS NOT NULL
                        LIMIT \(max(1, batchSize)) FOR UPDATE SKIP LOCKED
                        """)
                    for row in rows {
                        try conn.write("UPDATE subject_keys SET person_digest = $2, person_id = NULL WHERE key_id = $1",
                                       [try row.string("key_id"), personDigest(try row.uuid("person_id"))])
                    }
                    return rows.count
                }
                if moved == 0 { return }
            }
        }
    }

    public convenience init(pool: PostgresPool, configuration: SubjectKeysConfiguration) throws {
        try self.init(pool: pool, current: configuration.current, previous: configuration.previous)
    }

    private static func lookupContext(_ kekID: String) -> String { "lookup-key|\(kekID)" }
    private static func dataKeyContext(_ keyID: String) -> String { "subject-key|\(keyID)" }

    private static func openLookupKey(_ conn: PostgresConnection, current: KeyEncryptionKey,
                                      previous: KeyEncryptionKey?) throws -> Data {
        func stored() throws -> [String: Data] {
            var rows: [String: Data] = [:]
            for row in try conn.query("SELECT kek_id, wrapped_lookup_key FROM subject_key_encryption_keys") {
                rows[try row.string("kek_id")] = try row.data("wrapped_lookup_key")
            }
            return rows
        }
        var rows = try stored()
        if rows.isEmpty {
            let fresh = SymmetricKey(size: .bits256).withUnsafeBytes { Data($0) }
            try conn.write("INSERT INTO subject_key_encryption_keys (kek_id, wrapped_lookup_key) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                           [current.id, try current.wrap(fresh, context: lookupContext(current.id))])
            rows = try stored()
        }
        if let wrapped = rows[current.id] {
            guard let lookup = try? current.unwrap(wrapped, context: lookupContext(current.id)) else {
                throw SubjectKeyStoreError.wrongKEK(id: current.id)
            }
            return lookup
        }
        if let previous, let wrapped = rows[previous.id] {
            guard let lookup = try? previous.unwrap(wrapped, context: lookupContext(previous.id)) else {
                throw SubjectKeyStoreError.wrongKEK(id: previous.id)
            }
            try conn.write("INSERT INTO subject_key_encryption_keys (kek_id, wrapped_lookup_key) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                           [current.id, try current.wrap(lookup, context: lookupContext(current.id))])
            return lookup
        }
        throw SubjectKeyStoreError.unknownKEK(configured: current.id, stored: rows.keys.sorted())
    }

    /// The digest a subject is looked up by: HMAC-SHA256(lookup key, "subject|" + the trimmed, lowercased subject).
    func digest(ofSubject subject: String) -> Data {
        let canonical = subject.trimmingCharacters(in: .whitespacesAndNewlines).lowercased()
        return Data(HMAC<SHA256>.authenticationCode(for: Data("subject|\(canonical)".utf8), using: SymmetricKey(data: lookupKeyBytes)))
    }

    /// The digest a key's person is linked by: HMAC-SHA256(lookup key, "person|" + the lowercased `users.id`).
    /// What the erasure journal records too (`SubjectKeyErasureJournal`).
    public func personDigest(_ person: UUID) -> Data {
        Data(HMAC<SHA256>.authenticationCode(for: Data("person|\(person.uuidString.lowercased())".utf8),
                                             using: SymmetricKey(data: lookupKeyBytes)))
    }

    /// The data key of `subject`, made on first use. `person`: the `users.id` the subject belongs to (erased with
    /// it); a subject that is itself a UUID is its own person. Two producers asking at once get the same key. No key
    /// is made for a person already erased (`SubjectKeyStoreError.personErased`): the check and the insert hold the
    /// person's advisory lock, which the erasure takes too.
    public func dataKey(forSubject subject: String, person: UUID? = nil) throws -> SubjectDataKey {
        let digest = digest(ofSubject: subject)
        let person = person ?? UUID(uuidString: subject.trimmingCharacters(in: .whitespacesAndNewlines))
        return try pool.withConnection { conn in
            func existing() throws -> SubjectDataKey? {
                guard let row = try conn.queryFirst("SELECT key_id, kek_id, wrapped_key FROM subject_keys WHERE subject_digest = $1",
                                                    [digest]) else { return nil }
                let keyID = try row.string("key_id")
                return SubjectDataKey(id: keyID, bytes: try unwrap(keyID: keyID, kekID: try row.string("kek_id"),
                                                                  wrapped: try row.data("wrapped_key")))
            }
            if let found = try existing() { return found }
            let keyID = Self.newKeyID()
            let wrapped = try current.wrap(SymmetricKey(size: .bits256).withUnsafeBytes { Data($0) }, context: Self.dataKeyContext(keyID))
            try conn.transaction { c in
                if let person {
                    _ = try c.execute(Self.personLock, [person])
                    if try c.queryFirst("SELECT 1 FROM subject_key_erasures WHERE person_id = $1", [person]) != nil {
                        throw SubjectKeyStoreError.personErased
                    }
                }
                _ = try c.execute("""
                    INSERT INTO subject_keys (key_id, subject_digest, person_digest, kek_id, wrapped_key)
                    VALUES ($1, $2, $3, $4, $5) ON CONFLICT (subject_digest) DO NOTHING
                    """, [keyID, digest, person.map(personDigest), current.id, wrapped])
            }
            guard let made = try existing() else { throw SubjectKeyStoreError.raceLost }
            return made
        }
    }

    /// The id of `subject`'s data key, or nil when it has none (never made, or erased). Makes nothing.
    public func keyID(forSubject subject: String) throws -> String? {
        try pool.withConnection { conn in
            try conn.queryFirst("SELECT key_id FROM subject_keys WHERE subject_digest = $1", [digest(ofSubject: subject)])?
                .string("key_id")
        }
    }

    /// The data key (its 32 bytes) with this id, or nil when there is none: erased (or never made).
    public func dataKey(id keyID: String) throws -> Data? {
        try pool.withConnection { conn in
            guard let row = try conn.queryFirst("SELECT kek_id, wrapped_key FROM subject_keys WHERE key_id = $1", [keyID])
            else { return nil }
            return try unwrap(keyID: keyID, kekID: try row.string("kek_id"), wrapped: try row.data("wrapped_key"))
        }
    }

    private func unwrap(keyID: String, kekID: String, wrapped: Data) throws -> Data {
        let kek: KeyEncryptionKey
        if kekID == current.id { kek = current } else if let previous, kekID == previous.id { kek = previous } else {
            throw SubjectKeyStoreError.unknownKEK(configured: current.id, stored: [kekID])
        }
        guard let plain = try? kek.unwrap(wrapped, context: Self.dataKeyContext(keyID)) else {
            throw SubjectKeyStoreError.damagedKey(keyID: keyID)
        }
        return plain
    }

    /// 128 random bits, base64url without padding (22 characters).
    static func newKeyID() -> String {
        SymmetricKey(size: .bits128).withUnsafeBytes { Data($0) }.base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// What a rotation did.
    public struct Rotation: Sendable, Equatable {
        /// Data keys re-wrapped under the current KEK.
        public let rewrapped: Int
        /// KEK ids no row needs any more (their lookup-key rows were deleted): the keys can be destroyed.
        public let retiredKEKs: [String]
        /// Committed transactions it took (batches, and the final one that retires the KEKs).
        public let transactions: Int
        /// False when it stopped before the end (`stopAfterBatches`): run it again to go on.
        public let complete: Bool
    }

    /// The keys one rotation transaction re-wraps by default.
    public static let rotationBatchSize = 1000

    /// Re-wraps every data key not under the current KEK (they must be under the previous one), `batchSize` keys per
    /// committed transaction, then, in a last transaction that re-wraps any key left (one a concurrent erasure or
    /// creation held), deletes the other KEKs' lookup-key rows. Afterwards PostgreSQL holds nothing the previous KEK
    /// opens: destroy it.
    ///
    /// Memory is one batch, whatever the number of keys. A batch locks only its own rows (`FOR UPDATE SKIP LOCKED`),
    /// so an erasure waits at most for one batch, and the rotation skips rows an erasure holds until the last
    /// transaction. A rotation stopped part-way (killed, or `stopAfterBatches` in tests) leaves committed batches under
    /// the current KEK and the rest under the previous one, both still opened (keep `WORKERS_KEK_PREVIOUS` until it
    /// completes); running it again goes on. Keys erased before the rotation are not re-wrapped (they are gone), so an
    /// older dump holds them only under the previous KEK. Idempotent (a second run re-wraps nothing).
    public func rotate(batchSize: Int = rotationBatchSize, stopAfterBatches: Int? = nil) throws -> Rotation {
        let size = max(1, batchSize)
        return try pool.withConnection { conn in
            var count = 0, transactions = 0
            func rewrap(_ rows: PostgresRows, on conn: PostgresConnection) throws {
                for row in rows {
                    let keyID = try row.string("key_id")
                    let key = try unwrap(keyID: keyID, kekID: try row.string("kek_id"), wrapped: try row.data("wrapped_key"))
                    try conn.write("UPDATE subject_keys SET wrapped_key = $2, kek_id = $3 WHERE key_id = $1",
                                   [keyID, try current.wrap(key, context: Self.dataKeyContext(keyID)), current.id])
                }
                count += rows.count
            }
            // Keyset pagination: each batch starts after the last key id of the one before, so a batch reads its own
            // rows only (from the start each time, a batch stepped over every key already re-wrapped: the rotation
            // grew with the square of the keys, bench/subject_keys_scale.sh). Rows an erasure holds are skipped and
            // re-wrapped by the last transaction; a resumed rotation starts from the first key again.
            var after = ""
            while true {
                if let stop = stopAfterBatches, transactions >= stop {
                    return Rotation(rewrapped: count, retiredKEKs: [], transactions: transactions, complete: false)
                }
                let done = try conn.transaction { conn -> Int in
                    let rows = try conn.query("""
                        SELECT key_id, kek_id, wrapped_key FROM subject_keys WHERE key_id > $2 AND kek_id <> $1
                        ORDER BY key_id LIMIT \(size) FOR UPDATE SKIP LOCKED
                        """, [current.id, after])
                    if let last = rows.last { after = try last.string("key_id") }
                    try rewrap(rows, on: conn)
                    return rows.count
                }
                transactions += 1
                if done < size { break }
            }
            return try conn.transaction { conn in
                try rewrap(try conn.query("SELECT key_id, kek_id, wrapped_key FROM subject_keys WHERE kek_id <> $1 FOR UPDATE",
                                          [current.id]), on: conn)
                let retired = try conn.query("DELETE FROM subject_key_encryption_keys WHERE kek_id <> $1 RETURNING kek_id",
                                             [current.id]).map { try $0.string("kek_id") }
                return Rotation(rewrapped: count, retiredKEKs: retired.sorted(), transactions: transactions + 1, complete: true)
            }
        }
    }

    /// Deletes the data keys of `personID` (every subject linked to that `users.id`, by its digest or, for rows from
    /// before 0020, in clear), inside the caller's transaction (the account deletion's). Returns how many keys went.
    /// Call `SubjectKeyInvalidation.announce` after the commit so no worker keeps a cached copy, and journal it
    /// (`SubjectKeyErasureJournal.record`) so a restore cannot bring the keys back unnoticed.
    /// The person is recorded in `subject_key_erasures` (under the person's advisory lock, which key creation takes
    /// too), so no key is made for them afterwards.
    public func erase(personID: UUID, on conn: PostgresConnection) throws -> Int {
        try Self.recordErasure(personID, on: conn)
        return try conn.execute("DELETE FROM subject_keys WHERE person_digest = $1 OR person_id = $2",
                                [personDigest(personID), personID])
    }

    /// Deletes the data keys linked to the person whose digest is `personDigest` (an erasure journal's entry,
    /// `SubjectKeyErasureJournal`), in the caller's transaction. Returns how many went.
    public func erase(personDigest: Data, on conn: PostgresConnection) throws -> Int {
        try conn.execute("DELETE FROM subject_keys WHERE person_digest = $1", [personDigest])
    }

    /// Deletes every data key that no longer unwraps under the configured KEKs (wrapped under a KEK neither current
    /// nor previous — one destroyed after a rotation, brought back by a restore — or a changed row), `batchSize`
    /// rows read per query: such a key can never open its jobs again, and once its row is gone they die
    /// `SubjectErased` at once instead of waiting on a key store that will never open them. The person is not recorded
    /// as erased (a new key is made for their next job). Returns how many went.
    public func eraseKeysThatDoNotUnwrap(batchSize: Int = 1000) throws -> Int {
        try pool.withConnection { conn in
            var after = "", erased = 0
            while true {
                let rows = try conn.query("""
                    SELECT key_id, kek_id, wrapped_key FROM subject_keys WHERE key_id > $1 ORDER BY key_id LIMIT \(max(1, batchSize))
                    """, [after])
                for row in rows {
                    let keyID = try row.string("key_id")
                    after = keyID
                    if (try? unwrap(keyID: keyID, kekID: try row.string("kek_id"), wrapped: try row.data("wrapped_key"))) == nil {
                        erased += try conn.execute("DELETE FROM subject_keys WHERE key_id = $1", [keyID])
                    }
                }
                if rows.count < max(1, batchSize) { return erased }
            }
        }
    }

    /// The erasure where no key store is configured (no KEK on this worker, or one unusable at start): the person is
    /// recorded and their keys from before 0020 go; a key linked by digest cannot be found without the KEK, so when
    /// any exists this throws `SubjectKeyErasureWait` (the job waits for a worker with the key store, spending no
    /// retry) — never a success that leaves a key.
    public static func eraseWithoutKeyStore(personID: UUID, on conn: PostgresConnection) throws -> Int {
        if try conn.queryFirst("SELECT EXISTS (SELECT 1 FROM subject_keys WHERE person_digest IS NOT NULL) AS found")?
            .bool("found") ?? false {
            throw SubjectKeyErasureWait.noKeyStore
        }
        try recordErasure(personID, on: conn)
        return try conn.execute("DELETE FROM subject_keys WHERE person_id = $1", [personID])
    }

    private static func recordErasure(_ personID: UUID, on conn: PostgresConnection) throws {
        _ = try conn.execute(personLock, [personID])
        _ = try conn.execute("INSERT INTO subject_key_erasures (person_id) VALUES ($1) ON CONFLICT DO NOTHING", [personID])
    }

    /// The transaction-scoped advisory lock that orders a person's key creation and erasure.
    static let personLock = "SELECT pg_advisory_xact_lock(hashtextextended('subject-keys-person|' || $1::text, 0))"

    /// Deletes the data key of one subject (e.g. an e-mail address not linked to a person), in the caller's
    /// transaction. Returns 1 when there was one.
    public func erase(subject: String, on conn: PostgresConnection) throws -> Int {
        try conn.execute("DELETE FROM subject_keys WHERE subject_digest = $1", [digest(ofSubject: subject)])
    }
}

/// An erasure that needs the key store and finds none on this worker (no KEK, or one unusable at start): keys linked
/// to persons by digest exist and only the KEK finds them. Not the job's fault: the runner gives the job back to
/// `schedule` without spending a retry (`WaitsForKeyStore`), until a worker with the key store runs it.
public enum SubjectKeyErasureWait: Error, Sendable, CustomStringConvertible, WaitsForKeyStore {
    case noKeyStore

    public var description: String {
        "subject keys linked to persons exist and this worker has no usable key store (WORKERS_KEK): they cannot be "
            + "found without it; a worker with the KEK completes the erasure (docs/jobs-privacy.md)"
    }
}

/// A subject's data key and its (random) id.
public struct SubjectDataKey: Sendable {
    public let id: String
    /// The key bytes (`SymmetricKey` is not `Sendable`).
    let bytes: Data
    public var key: SymmetricKey { SymmetricKey(data: bytes) }
}

/// Why the key store refused. Never holds key material or a subject.
public enum SubjectKeyStoreError: Error, Sendable, CustomStringConvertible, Equatable {
    /// The configured KEK does not open what PostgreSQL holds under its id.
    case wrongKEK(id: String)
    /// PostgreSQL's keys are under other KEK ids than the configured ones.
    case unknownKEK(configured: String, stored: [String])
    /// A wrapped key does not open (changed bytes).
    case damagedKey(keyID: String)
    /// A concurrent insert and delete of the same subject's key (retry).
    case raceLost
    /// The subject's person was erased: no data key is made for them again (their job is refused).
    case personErased

    public var description: String {
        switch self {
        case .wrongKEK(let id):
            return "wrong KEK: the key configured as \(id) does not open the subject keys PostgreSQL holds under \(id)"
        case .unknownKEK(let configured, let stored):
            return "the subject keys in PostgreSQL are wrapped under KEK \(stored.joined(separator: ", ")), not the configured \(configured): "
                + "configure that KEK as WORKERS_KEK_PREVIOUS and run `workerctl keys rotate` (docs/jobs-privacy.md)"
        case .damagedKey(let keyID): return "subject key \(keyID) does not unwrap: its row was changed"
        case .raceLost: return "subject key created and deleted concurrently; try again"
        case .personErased: return "the subject's person was erased: no data key is made for them again"
        }
    }
}
