import Crypto
import Foundation
@testable import WorkersAppJobs
import WorkersQueue
import WorkersStorage
import WorkersSubjectKeys
import WorkersTestServices
import Workers
import XCTest

/// docs/jobs-privacy.md's threat-model table, one test per line, each playing the thief on real copies (issue 50
/// point 3): an RDB taken with `redis-cli --rdb` and a copy of the AOF directory, each loaded into a redis-server of
/// its own and read key by key; the text of `pg_dump`; and, for the last line, that dump restored with the KEK.
/// The scene: person A with sealed receipt jobs queued, in `retry` and in `dead`; person B the same, then erased;
/// person C validated (so `subscriptions` holds a row naming C, written within the second C's key was made).
extension SubjectKeysTests {
    struct Scene {
        let a: UUID, b: UUID, c: UUID
        /// Every personal value sealed into a job (ids, receipts, transaction ids).
        let needles: [String]
        /// The key ids of A's and B's envelopes.
        let keyOfA: String, keyOfB: String
        let jobOfA: NewJob, jobOfB: NewJob
        let directory: URL
        let rdb: URL, aof: URL, dump: String
    }

    /// Builds the scene and takes the copies a thief would hold.
    func threatScene() throws -> Scene {
        let store = try SubjectKeyStore(pool: pool, current: kek1)
        let seal = sealer(store)
        let (a, c) = (try db.newUser(), try db.newUser())
        let (b, requestB) = try userWithDueDeletion(email: "zqthief-b@example.org")
        var needles = [a, b, c].map { $0.uuidString.lowercased() }
        func job(_ user: UUID, _ label: String) throws -> NewJob {
            let receipt = "zqthief-\(label)-\(UUID().uuidString)", transaction = "7357\(Int.random(in: 10_000_000...99_999_999))"
            needles += [receipt, transaction]
            return try seal.sealed(try validation(user: user, receipt: receipt, transaction: transaction))
        }
        let (receiptC, transactionC) = try validPurchase("zqthief-c", transactionPrefix: "7358")
        try fixture.driver(try registry(opener: SubjectArgumentsOpener(store: store, redis: redis.pool)))
            .run(try seal.sealed(try validation(user: c, receipt: receiptC, transaction: transactionC)))
        let jobOfA = try job(a, "a"), jobOfB = try job(b, "b")
        for (index, sealed) in [jobOfA, try job(a, "a-retry"), try job(a, "a-dead"), jobOfB].enumerated() {
            var payload = try JobClient.payload(for: sealed, createdAt: Clock.now(), enqueuedAt: Clock.now())
            switch index {
            case 1:
                payload.fields["retry_count"] = .int(0)
                payload.fields["error_class"] = .string("StoreUnavailable")
                payload.fields["error_message"] = .string("verifyReceipt answered 503")
                try redis.command("ZADD", Keys.retry, Clock.now() + 3600, payload.serialized())
            case 2: try redis.command("ZADD", Keys.dead, Clock.now(), payload.serialized())
            default: try redis.command("LPUSH", "queue:thief", payload.serialized())
            }
        }
        let keyOfA = try XCTUnwrap(PersonalEnvelope(try XCTUnwrap(jobOfA.args.first?.objectValue?["user_id"])))?.keyID
        let keyOfB = try XCTUnwrap(PersonalEnvelope(try XCTUnwrap(jobOfB.args.first?.objectValue?["user_id"])))?.keyID
        try erase(b, request: requestB)

        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("thief-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let port = try redis.command("CONFIG", "GET", "port").strings[1]
        let rdb = directory.appendingPathComponent("stolen.rdb")
        let taken = try ChildProcess.run(URL(fileURLWithPath: "/usr/bin/redis-cli"), ["-h", "127.0.0.1", "-p", port, "--rdb", rdb.path])
        XCTAssertEqual(taken.status, 0, taken.stderr)
        let aof = directory.appendingPathComponent("aof")
        try FileManager.default.createDirectory(at: aof, withIntermediateDirectories: true)
        try FileManager.default.copyItem(at: try aofDirectory(), to: aof.appendingPathComponent("appendonlydir"))
        let dump = try ChildProcess.run(URL(fileURLWithPath: "/usr/bin/pg_dump"), ["--no-owner", fixture.database.url])
        XCTAssertEqual(dump.status, 0, dump.stderr)
        return Scene(a: a, b: b, c: c, needles: needles, keyOfA: try XCTUnwrap(keyOfA), keyOfB: try XCTUnwrap(keyOfB),
                     jobOfA: jobOfA, jobOfB: jobOfB, directory: directory, rdb: rdb, aof: aof, dump: dump.stdout)
    }

    /// Every value of every key of `connection`'s database, as text (what the thief reads from a loaded copy).
    func everything(_ connection: RedisConnection) throws -> String {
        var text: [String] = []
        for key in try connection.command("KEYS", "*").strings {
            text.append(key)
            switch try connection.command("TYPE", key).string {
            case "list": text += try connection.command("LRANGE", key, 0, -1).strings
            case "zset": text += try connection.command("ZRANGE", key, 0, -1, "WITHSCORES").strings
            case "hash": text += try connection.command("HGETALL", key).strings
            case "set": text += try connection.command("SMEMBERS", key).strings
            case "string": text.append(try connection.command("GET", key).string ?? "")
            default: break
            }
        }
        return text.joined(separator: "\n")
    }

    /// The rows of `table` in a plain `pg_dump`: its COPY column list and each row's fields (`\N` for NULL).
    func dumpRows(_ dump: String, table: String) -> (columns: [String], rows: [[String]]) {
        let lines = dump.components(separatedBy: "\n")
        guard let start = lines.firstIndex(where: { $0.hasPrefix("COPY public.\(table) (") }) else { return ([], []) }
        let header = lines[start]
        let columns = header[header.index(after: header.firstIndex(of: "(")!)..<header.firstIndex(of: ")")!]
            .components(separatedBy: ", ")
        var rows: [[String]] = []
        for line in lines[(start + 1)...] {
            if line == "\\." { break }
            rows.append(line.components(separatedBy: "\t"))
        }
        return (columns, rows)
    }

    /// Line "Redis (RDB/AOF, a backup of it, a replica)": no personal value, in the RDB or the AOF, loaded and read key
    /// by key; what is readable is the class, queue, jid, times, the catalogue fields and opaque key ids — the clear
    /// fields of a receipt job are exactly `app_id`, `plan_id`, `store` (accepted: they name our catalogue; the
    /// person's linkage through them needs PostgreSQL, the lines below).
    func testThreatModelARedisCopyHoldsNoPersonalValueAndOnlyTheCatalogueInClear() throws {
        let scene = try threatScene()
        defer { try? FileManager.default.removeItem(at: scene.directory) }
        let fromRDB = try RestoredRedis(directory: scene.directory, port: 6476, database: redis.database, rdbFile: scene.rdb.lastPathComponent)
        defer { fromRDB.stop() }
        let fromAOF = try RestoredRedis(directory: scene.aof, port: 6477, database: redis.database)
        defer { fromAOF.stop() }
        for (name, copy) in [("RDB", fromRDB), ("AOF", fromAOF)] {
            let text = try everything(copy.connection)
            XCTAssertTrue(text.contains(scene.keyOfA), "\(name): the copy holds A's jobs (the scene is real)")
            XCTAssertEqual(scene.needles.filter { text.contains($0) }, [], "\(name): personal values in clear")
            let queued = try copy.connection.command("LRANGE", "queue:thief", 0, -1).strings.map { try JobPayload(parsing: $0) }
            XCTAssertFalse(queued.isEmpty, name)
            for payload in queued {
                let args = try XCTUnwrap(payload.args.first?.objectValue)
                let clear = Set(args.filter { PersonalEnvelope($0.value) == nil }.map(\.key))
                XCTAssertEqual(clear, ["app_id", "plan_id", "store"], "\(name): the clear fields the table lists")
            }
        }
    }

    /// Line "PostgreSQL dump" and "Redis + PostgreSQL, no KEK": the dump's `subject_keys` holds no person in clear and
    /// no time (the column list is checked, so a column added later fails here), its person link matches no
    /// unkeyed digest of any `users.id` of the dump; A's key id from the Redis copy finds A's row and still no person;
    /// B's key id finds nothing (erased); A's and B's receipts and transactions are nowhere in the dump. Accepted, and
    /// stated in the table: C's validated purchase is in the domain tables (what the product needs), and
    /// `subject_key_erasures` names B as erased, as B's anonymised account row does anyway.
    func testThreatModelAPostgresDumpWithOrWithoutTheRedisCopyLinksNoKeyToAPerson() throws {
        let scene = try threatScene()
        defer { try? FileManager.default.removeItem(at: scene.directory) }
        let keys = dumpRows(scene.dump, table: "subject_keys")
        XCTAssertEqual(keys.columns, ["key_id", "subject_digest", "person_id", "kek_id", "wrapped_key", "person_digest"],
                       "what a dump of subject_keys reveals; a new column needs a line in the threat model")
        XCTAssertFalse(keys.rows.isEmpty)
        let personColumn = keys.columns.firstIndex(of: "person_id")!, digestColumn = keys.columns.firstIndex(of: "person_digest")!
        XCTAssertTrue(keys.rows.allSatisfy { $0[personColumn] == "\\N" }, "no users.id in clear")
        let users = dumpRows(scene.dump, table: "users")
        let ids = users.rows.map { $0[users.columns.firstIndex(of: "id")!] }
        XCTAssertTrue(ids.contains(scene.a.uuidString.lowercased()))
        let unkeyed = Set(ids.flatMap { id in
            [Data(SHA256Digest.of("person|\(id)")), Data(SHA256Digest.of(id)), Data(SHA256Digest.of("subject|\(id)"))]
                .map { "\\\\x" + $0.map { String(format: "%02x", $0) }.joined() }
        })
        XCTAssertTrue(keys.rows.allSatisfy { !unkeyed.contains($0[digestColumn]) && !unkeyed.contains($0[1]) },
                      "a digest a thief computes without the KEK matches a key's person")
        let rowOfA = keys.rows.filter { $0[0] == scene.keyOfA }
        XCTAssertEqual(rowOfA.count, 1, "A's key id from the Redis copy finds A's row")
        XCTAssertFalse(rowOfA[0].joined(separator: "\t").contains(scene.a.uuidString.lowercased()))
        XCTAssertTrue(keys.rows.allSatisfy { $0[0] != scene.keyOfB }, "B's key is erased")
        let personalOfAB = scene.needles.filter { !$0.contains("-c-") && UUID(uuidString: $0) == nil }
        XCTAssertEqual(personalOfAB.filter { scene.dump.contains($0) }, [], "A's or B's receipts or transactions in the dump")
    }

    /// Line "Redis + PostgreSQL + the KEK": the dump restored and opened with the KEK reads A's jobs (accepted: the KEK
    /// is the secret; its holder reads every live person's jobs) and links A's key to A, but B's jobs stay closed
    /// (`SubjectErased`), and the erasure journal in the Redis copy says only that *some* account was erased, which
    /// the KEK then matches to B — as B's anonymised row says anyway.
    func testThreatModelWithTheKEKTooOnlyLivePersonsJobsOpen() throws {
        let scene = try threatScene()
        defer { try? FileManager.default.removeItem(at: scene.directory) }
        let restoredDB = try PostgresTestDatabase.create(prefix: "thief_restore")
        defer { restoredDB.drop() }
        let file = scene.directory.appendingPathComponent("dump.sql")
        try scene.dump.write(to: file, atomically: true, encoding: .utf8)
        let load = try ChildProcess.run(URL(fileURLWithPath: "/usr/bin/psql"), ["-q", "-v", "ON_ERROR_STOP=1", "-f", file.path, restoredDB.url])
        XCTAssertEqual(load.status, 0, load.stderr)
        let restoredPool = PostgresPool(url: restoredDB.url, maxConnections: 1)
        defer { restoredPool.shutdown() }
        let thief = try SubjectKeyStore(pool: restoredPool, current: kek1)
        let opener = SubjectArgumentsOpener(store: thief, redis: redis.pool)
        let fields = ValidateReceiptArguments.personalFields
        let opened = try opener.open(scene.jobOfA.args, className: ValidateReceiptArguments.className, jid: scene.jobOfA.jid ?? "", fields: fields, subjectField: "user_id")
        XCTAssertEqual(opened.first?.objectValue?["user_id"]?.stringValue?.lowercased(), scene.a.uuidString.lowercased())
        XCTAssertEqual(try thief.keyID(forSubject: scene.a.uuidString), scene.keyOfA)
        XCTAssertThrowsError(try opener.open(scene.jobOfB.args, className: ValidateReceiptArguments.className, jid: scene.jobOfB.jid ?? "", fields: fields,
                                             subjectField: "user_id")) { error in
            XCTAssertEqual((error as? PersonalArgumentsRefusal)?.errorClass, "SubjectErased")
        }
        let journal = try SubjectKeyErasureJournal(pools: [redis.pool]).entries(since: Date(timeIntervalSince1970: 0))
        XCTAssertEqual(journal.map(\.personDigest), [thief.personDigest(scene.b)])
    }
}

/// SHA-256 as a thief without the KEK computes it.
enum SHA256Digest {
    static func of(_ text: String) -> [UInt8] {
        Array(SHA256.hash(data: Data(text.utf8)))
    }
}
