import Crypto
import Foundation
import WorkersQueue
import WorkersStorage
@testable import WorkersSubjectKeys
import XCTest

/// The fillers of bench/subject_keys_scale.sh (issue 50: a KEK rotation over 1,000,000 subject keys, and a worker's
/// resident memory after the keys of 1,000,000 distinct persons). What they fill is not measured. Subjects are the
/// fixed user ids `00000000-0000-4000-8000-<12 digits>` of bench/subject_keys.sh's filler, each its own person.
final class SubjectKeysScaleFillTests: XCTestCase {
    static func subject(_ index: Int) -> String { String(format: "00000000-0000-4000-8000-%012d", index) }

    /// `SUBJECT_KEYS_SCALE_KEYS=N`: N real subject keys in the key store of `DATABASE_URL` under the KEK
    /// `SUBJECT_KEYS_SCALE_KEK`. The first `SUBJECT_KEYS_SCALE_VIA_STORE` (default 2,000) are made by
    /// `SubjectKeyStore.dataKey(forSubject:)` (the production path, timed: the line `via-store`); the rest are written
    /// as rows of a COPY file (`SUBJECT_KEYS_SCALE_COPY`, text format, columns `key_id, subject_digest, person_digest,
    /// kek_id, wrapped_key`) the script loads with psql, with what the store writes since
    /// `0020_subject_key_person_digest.sql`: a random key id (`SubjectKeyStore.newKeyID`), the subject's digest under
    /// the store's lookup key, the person's digest (`SubjectKeyStore.personDigest`; `person_id` stays NULL: a row with
    /// it is a legacy row that every store open would first move to `person_digest`, 1,000,000 rows before the
    /// measurement starts), the KEK id, and a random 32-byte data key wrapped by `KeyEncryptionKey.wrap` with the
    /// store's context. The first generated row is INSERTed here instead and must open through the store
    /// (`dataKey(id:)`, `keyID(forSubject:)`, and its erasure by person must delete it): a drift of the context or the
    /// digests fails here, not later as dead jobs, a failed rotation or an erasure that deletes nothing.
    /// `SUBJECT_KEYS_SCALE_PERSONS` (optional): a second COPY file, `person_digest, person_id` of all N persons, which
    /// the script loads into a table of the bench database only (`bench_persons`): its erasure prober needs the
    /// person's id (advisory lock, `subject_key_erasures`) of the key the rotation takes next, which a key row no
    /// longer names; its small key set is the first persons by id.
    func testFillKeys() throws {
        let env = ProcessInfo.processInfo.environment
        guard let total = Int(env["SUBJECT_KEYS_SCALE_KEYS"] ?? "") else { throw XCTSkip("set SUBJECT_KEYS_SCALE_KEYS (bench/subject_keys_scale.sh)") }
        let kek = try KeyEncryptionKey(parsing: try XCTUnwrap(env["SUBJECT_KEYS_SCALE_KEK"], "SUBJECT_KEYS_SCALE_KEK"))
        let copyPath = try XCTUnwrap(env["SUBJECT_KEYS_SCALE_COPY"], "SUBJECT_KEYS_SCALE_COPY")
        let viaStore = min(total, Int(env["SUBJECT_KEYS_SCALE_VIA_STORE"] ?? "") ?? 2_000)
        let pool = PostgresPool(url: try XCTUnwrap(env["DATABASE_URL"], "DATABASE_URL"), maxConnections: 1)
        defer { pool.shutdown() }
        let store = try SubjectKeyStore(pool: pool, current: kek)

        var started = Date()
        for index in 0..<viaStore { _ = try store.dataKey(forSubject: Self.subject(index)) }
        let storeSeconds = Date().timeIntervalSince(started)
        print("subject-keys-scale-fill: via-store \(viaStore) keys by SubjectKeyStore.dataKey(forSubject:) in "
              + String(format: "%.2f", storeSeconds) + " s ("
              + String(format: "%.0f", storeSeconds * 1e6 / Double(max(1, viaStore))) + " µs per key, debug build)")

        func hex(_ data: Data) -> String {
            let digits = Array("0123456789abcdef".utf8)
            var out = [UInt8](repeating: 0, count: data.count * 2)
            for (i, byte) in data.enumerated() {
                out[2 * i] = digits[Int(byte >> 4)]
                out[2 * i + 1] = digits[Int(byte & 0xf)]
            }
            return String(decoding: out, as: UTF8.self)
        }
        func person(_ index: Int) -> UUID { UUID(uuidString: Self.subject(index))! }
        func row(_ index: Int) throws -> (keyID: String, digest: Data, subject: String, personDigest: Data, wrapped: Data) {
            let subject = Self.subject(index)
            let keyID = SubjectKeyStore.newKeyID()
            let wrapped = try kek.wrap(SymmetricKey(size: .bits256).withUnsafeBytes { Data($0) }, context: "subject-key|\(keyID)")
            return (keyID, store.digest(ofSubject: subject), subject, store.personDigest(person(index)), wrapped)
        }
        // The first generated row goes in through SQL here and must open through the store: the context and the
        // digest are the store's (a drift fails here, not as dead jobs or a failed rotation later).
        guard viaStore < total else { return }
        let probe = try row(viaStore)
        try pool.withConnection { conn in
            try conn.write("INSERT INTO subject_keys (key_id, subject_digest, person_digest, kek_id, wrapped_key) VALUES ($1, $2, $3, $4, $5)",
                           [probe.keyID, probe.digest, probe.personDigest, kek.id, probe.wrapped])
        }
        XCTAssertNotNil(try store.dataKey(id: probe.keyID), "a generated row does not open through the store")
        XCTAssertEqual(try store.keyID(forSubject: probe.subject), probe.keyID, "a generated digest is not the store's")
        // The erasure by person must find it (by person_digest), in a transaction rolled back: the row stays.
        struct RollBack: Error {}
        do {
            try pool.withConnection { conn in
                try conn.transaction { conn in
                    XCTAssertEqual(try store.erase(personID: person(viaStore), on: conn), 1, "a generated person digest is not the store's")
                    throw RollBack()
                }
            }
        } catch is RollBack {}
        XCTAssertNotNil(try store.dataKey(id: probe.keyID), "the rolled-back erasure left no key")

        started = Date()
        FileManager.default.createFile(atPath: copyPath, contents: nil)
        let file = try XCTUnwrap(FileHandle(forWritingAtPath: copyPath))
        defer { try? file.close() }
        var buffer = ""
        for index in (viaStore + 1)..<total {
            let r = try row(index)
            buffer += "\(r.keyID)\t\\\\x\(hex(r.digest))\t\\\\x\(hex(r.personDigest))\t\(kek.id)\t\\\\x\(hex(r.wrapped))\n"
            if buffer.utf8.count > 1 << 20 {
                try file.write(contentsOf: Data(buffer.utf8))
                buffer = ""
            }
        }
        try file.write(contentsOf: Data(buffer.utf8))
        if let personsPath = env["SUBJECT_KEYS_SCALE_PERSONS"] {
            FileManager.default.createFile(atPath: personsPath, contents: nil)
            let persons = try XCTUnwrap(FileHandle(forWritingAtPath: personsPath))
            defer { try? persons.close() }
            buffer = ""
            for index in 0..<total {
                buffer += "\\\\x\(hex(store.personDigest(person(index))))\t\(Self.subject(index))\n"
                if buffer.utf8.count > 1 << 20 {
                    try persons.write(contentsOf: Data(buffer.utf8))
                    buffer = ""
                }
            }
            try persons.write(contentsOf: Data(buffer.utf8))
        }
        print("subject-keys-scale-fill: copy \(total - viaStore - 1) rows generated in "
              + String(format: "%.1f", Date().timeIntervalSince(started)) + " s")
    }

    /// `SealedProbe` as bench/subject_keys.sh's filler declares it (JobsTests does not link BenchJobs).
    typealias SealedProbeArguments = SubjectKeysBenchFillTests.SealedProbeArguments

    /// `SUBJECT_KEYS_SCALE_JOBS=N`: N sealed `SealedProbe` jobs in `queue:default` of `REDIS_URL`; job j's subject is
    /// number `SUBJECT_KEYS_SCALE_FIRST + j % SUBJECT_KEYS_SCALE_DISTINCT` (default: N distinct subjects), its
    /// `receipt` `SUBJECT_KEYS_SCALE_RECEIPT_BYTES` long (default 64: what is measured is the key cache, not the
    /// payload), sealed by a `SubjectArgumentsSealer` over the key store of `DATABASE_URL` under
    /// `SUBJECT_KEYS_SCALE_KEK` (the keys exist: testFillKeys), pushed in pipelined batches of 1,000.
    func testFillJobs() throws {
        let env = ProcessInfo.processInfo.environment
        guard let count = Int(env["SUBJECT_KEYS_SCALE_JOBS"] ?? "") else { throw XCTSkip("set SUBJECT_KEYS_SCALE_JOBS (bench/subject_keys_scale.sh)") }
        let first = Int(env["SUBJECT_KEYS_SCALE_FIRST"] ?? "") ?? 0
        let distinct = max(1, Int(env["SUBJECT_KEYS_SCALE_DISTINCT"] ?? "") ?? count)
        let receipt = String(repeating: "M", count: Int(env["SUBJECT_KEYS_SCALE_RECEIPT_BYTES"] ?? "") ?? 64)
        let kek = try KeyEncryptionKey(parsing: try XCTUnwrap(env["SUBJECT_KEYS_SCALE_KEK"], "SUBJECT_KEYS_SCALE_KEK"))
        let pool = PostgresPool(url: try XCTUnwrap(env["DATABASE_URL"], "DATABASE_URL"), maxConnections: 1)
        defer { pool.shutdown() }
        let store = try SubjectKeyStore(pool: pool, current: kek)
        let redis = try RedisPool(url: try XCTUnwrap(env["REDIS_URL"], "REDIS_URL"), maxConnections: 1)
        let client = JobClient(pool: redis, middleware: [SubjectArgumentsSealer(store: store, classes: [SealedProbeArguments.self],
                                                                                cacheTTL: .seconds(3600))])
        let started = Date()
        for start in stride(from: 0, to: count, by: 1000) {
            let jobs = try (start..<min(count, start + 1000)).map { j in
                try NewJob(SealedProbeArguments(userID: Self.subject(first + j % distinct), receipt: receipt, n: j))
            }
            try client.enqueueMany(jobs)
        }
        print("subject-keys-scale-fill: \(count) SealedProbe jobs sealed, subjects \(first)..<\(first + min(count, distinct)) in "
              + String(format: "%.1f", Date().timeIntervalSince(started)) + " s")
    }
}
