import _CryptoExtras
import Crypto
import Foundation
@testable import Jobs
import Logging
import Mail
import Outbox
import Queue
import Storage
import SubjectKeys
import Synchronization
import TestSupport
import Workers
import XCTest

/// Personal job arguments encrypted per person, erased by key (issue 37, docs/jobs-privacy.md "Encrypted
/// arguments"): real PostgreSQL, Redis database 60 (with its AOF), the Apple fake, real workers (`TestWorker`) or
/// the real runner (`JobRunnerDriver`), `workerctl enqueue` as a child process, and a second redis-server on port
/// 6475 for the restored AOF copy.
final class SubjectKeysTests: ReceiptsTestCase {
    override func makeFixture() throws -> JobsFixture {
        try JobsFixture(prefix: "subject_keys_test", redis: 60, fakes: .own([.apple]))
    }

    var processes: [WorkerProcess] = []
    let kek1 = KeyEncryptionKey.random(id: "kek-1")
    let kek2 = KeyEncryptionKey.random(id: "kek-2")

    override func tearDown() {
        for process in processes { process.shutdown() }
        super.tearDown()
    }

    // MARK: helpers

    /// The receipt jobs (verifyReceipt against the fake) and the privacy jobs; `opener` opens personal arguments.
    func registry(opener: (any PersonalArgumentsOpener)?, subjectKeys: SubjectKeyStore? = nil) throws -> JobRegistry {
        var registry = JobRegistry()
        ReceiptJobs.register(into: &registry, services: try ReceiptServices(configuration: appleConfiguration(), http: http))
        let privacy = try PrivacyConfiguration(
            storageDirectory: FileManager.default.temporaryDirectory.appendingPathComponent("subject-keys-test-\(UUID().uuidString)"),
            urlBase: "https://downloads.example.test/privacy/exports",
            signingSecret: Data("test-signing-secret-0123456789-abcdefghijklmnop".utf8),
            smtp: SMTPConfiguration(host: "127.0.0.1", port: 9, security: .none, connectTimeout: .seconds(1), timeout: .seconds(1)),
            mailFrom: EmailAddress("privacy@example.test", name: "Privacy Team"))
        PrivacyJobs.register(into: &registry, configuration: privacy, redis: redis.pool, subjectKeys: subjectKeys)
        registry.register(MailOnlyProbeJob())
        registry.register(EchoPersonalJob())
        registry.personalArgumentsOpener = opener
        return registry
    }

    func startWorker(_ registry: JobRegistry) throws {
        processes.append(try TestWorker.start(redis: redis, registry: registry, database: fixture.jobDatabase, concurrency: 2))
    }

    func sealer(_ store: SubjectKeyStore) -> SubjectArgumentsSealer {
        SubjectArgumentsSealer(store: store, classes: DomainJobs.personalArgumentTypes)
    }

    /// A validation of `receipt` (transaction `transaction`) for `user`, typed.
    func validation(user: UUID, receipt: String, transaction: String) throws -> NewJob {
        try NewJob(ValidateReceiptArguments(userID: user, appID: db.appID, planID: db.planID,
                                            proof: .apple(receiptData: receipt, transactionID: transaction,
                                                          originalTransactionID: nil, signedTransaction: nil)))
    }

    /// verifyReceipt answers `receipt` as a valid purchase of the plan's product, transaction `transaction`.
    func registerValid(receipt: String, transaction: String) throws {
        let ms = { (d: Date) in String(Int64(d.timeIntervalSince1970 * 1000)) }
        try fakes.admin(.apple, "POST", "apple/receipts", json: [
            "receipt-data": receipt, "status": 0, "environment": "Production",
            "latest_receipt_info": [["product_id": ReceiptsDatabase.appleProduct, "transaction_id": transaction,
                                     "original_transaction_id": transaction,
                                     "purchase_date_ms": ms(Date().addingTimeInterval(-86400)),
                                     "expires_date_ms": ms(Date().addingTimeInterval(20 * 86400)), "is_trial_period": "false"]],
            "pending_renewal_info": [["original_transaction_id": transaction, "auto_renew_status": "1"]],
        ])
    }

    /// A receipt and a transaction id unique to this test run (long and random enough not to occur in the AOF by
    /// chance, as a timestamp's digits could), which verifyReceipt answers as a valid purchase.
    func validPurchase(_ label: String, transactionPrefix: String) throws -> (receipt: String, transaction: String) {
        let receipt = "\(label)-receipt-\(UUID().uuidString)"
        let transaction = transactionPrefix + "\(Int.random(in: 10_000_000_000...99_999_999_999))"
        try registerValid(receipt: receipt, transaction: transaction)
        return (receipt, transaction)
    }

    /// A user with an address and a due deletion request (as the Auth Service records it).
    func userWithDueDeletion(email: String) throws -> (user: UUID, request: UUID) {
        let user = try db.newUser()
        let request = try pool.withConnection { c in
            try c.execute("""
                UPDATE users SET email = $2, delete_requested = true, delete_scheduled_at = now() - interval '1 minute'
                WHERE id = $1
                """, [user, email])
            return try c.queryFirst("""
                INSERT INTO deletion_requests (user_id, requested_at, scheduled_at)
                VALUES ($1, now() - interval '28 days', now() - interval '1 minute') RETURNING id
                """, [user])!.uuid("id")
        }
        return (user, request)
    }

    /// Runs the user's `AccountDeletionJob` through the real runner, with the key store (it finds the person's keys
    /// by their keyed digest).
    func erase(_ user: UUID, request: UUID) throws {
        try fixture.driver(try registry(opener: nil, subjectKeys: try SubjectKeyStore(pool: pool, current: kek1)))
            .run(AccountDeletionJob.className, PrivacyJobs.deletionJob(userID: user, requestID: request).args)
    }

    /// The files of this Redis server's append-only file (its `dir` and `appenddirname`).
    func aofDirectory() throws -> URL {
        let dir = try redis.command("CONFIG", "GET", "dir").strings[1]
        let name = try redis.command("CONFIG", "GET", "appenddirname").strings[1]
        return URL(fileURLWithPath: dir).appendingPathComponent(name)
    }

    /// The needles found in the bytes of any AOF file.
    func aofHolds(_ needles: [String]) throws -> [String] {
        let directory = try aofDirectory()
        var found: Set<String> = []
        for file in try FileManager.default.contentsOfDirectory(atPath: directory.path) {
            let data = try Data(contentsOf: directory.appendingPathComponent(file))
            for needle in needles where data.range(of: Data(needle.utf8)) != nil { found.insert(needle) }
        }
        return found.sorted()
    }

    /// The needles found in the queue's LRANGE text or its DUMP bytes.
    func queueHolds(_ needles: [String], key: String = "queue:default") throws -> [String] {
        let entries = try redis.command("LRANGE", key, 0, -1).strings.joined(separator: "\n")
        let dump = Data(try redis.command("DUMP", key).bytes ?? [])
        return needles.filter { entries.contains($0) || dump.range(of: Data($0.utf8)) != nil }
    }

    // MARK: tests

    /// A receipt job enqueued from Swift (typed, through `SubjectArgumentsSealer`) and one through `workerctl
    /// enqueue`: neither the queue (LRANGE, DUMP) nor the AOF files ever hold the user id, the receipt or the
    /// transaction id; the class, queue and catalogue ids stay readable; the worker validates both.
    func testSwiftAndWorkerctlEnqueuedReceiptJobsKeepPersonalValuesOutOfRedisAndItsAOFAndRun() throws {
        let store = try SubjectKeyStore(pool: pool, current: kek1)
        let swiftUser = try db.newUser(), cliUser = try db.newUser()
        let (swiftReceipt, swiftTx) = try validPurchase("zqswift", transactionPrefix: "7337")
        let (cliReceipt, cliTx) = try validPurchase("zqcli", transactionPrefix: "7338")

        let client = JobClient(pool: redis.pool, middleware: [sealer(store)])
        try client.enqueue(try validation(user: swiftUser, receipt: swiftReceipt, transaction: swiftTx))
        let cliArgs = jsonString([["user_id": cliUser.uuidString.lowercased(), "app_id": db.appID.uuidString.lowercased(),
                                   "plan_id": db.planID.uuidString.lowercased(), "store": "apple",
                                   "receipt_data": cliReceipt, "transaction_id": cliTx]])
        let cli = try ChildProcess.run(TestServices.workerctl, ["enqueue", "ValidateReceiptJob", "--args", cliArgs],
                                       environment: ["REDIS_URL": redis.url, "DATABASE_URL": fixture.database.url,
                                                     "WORKERS_KEK": kek1.configurationText])
        XCTAssertEqual(cli.status, 0, cli.stderr)

        let needles = [swiftUser.uuidString.lowercased(), cliUser.uuidString.lowercased(), swiftReceipt, cliReceipt,
                       swiftTx, cliTx]
        XCTAssertEqual(try redis.int("LLEN", "queue:default"), 2)
        XCTAssertEqual(try queueHolds(needles), [], "personal values in clear in Redis")
        for payload in try redis.payloads(list: "queue:default") {
            XCTAssertEqual(payload.className, "ValidateReceiptJob")
            let args = try XCTUnwrap(payload.args.first?.objectValue)
            XCTAssertEqual(args["store"]?.stringValue, "apple")
            XCTAssertEqual(args["app_id"]?.stringValue, db.appID.uuidString.lowercased())
            for field in ["user_id", "receipt_data", "transaction_id"] {
                XCTAssertNotNil(PersonalEnvelope(try XCTUnwrap(args[field])), "\(field) is not an envelope")
            }
        }

        try startWorker(try registry(opener: SubjectArgumentsOpener(store: store, redis: redis.pool)))
        XCTAssertTrue(try eventually(timeout: 60) { try db.userStatus(swiftUser) == "premium" && db.userStatus(cliUser) == "premium" })
        XCTAssertEqual(try db.events(key: swiftTx), ["subscription_started"])
        XCTAssertEqual(try db.events(key: cliTx), ["subscription_started"])
        XCTAssertEqual(try redis.int("ZCARD", Keys.dead) + redis.int("ZCARD", Keys.retry), 0)
        // Everything written to Redis meanwhile (pushes, the in-flight lists, the acknowledgements) is in the AOF.
        XCTAssertEqual(try aofHolds(needles), [], "personal values in clear in the AOF")
    }

    /// A job that quotes its opened personal values in its error and its logs (the receipt job's `user_id … does not
    /// exist`, with `user_id` in every line's metadata: review 2026-12-07 security-reliability-3 H1) writes none of
    /// them: the dead entry's `error_message`, every log line of the run and the AOF hold `[field]` where the value
    /// was (`OpenedValues`, through the real runner).
    func testOpenedValuesNeverLeaveTheRunInAnErrorALogLineOrTheAOF() throws {
        let store = try SubjectKeyStore(pool: pool, current: kek1)
        let user = UUID()  // no such user: the job refuses it as bad input, quoting the id
        let (receipt, transaction) = try validPurchase("zqleak", transactionPrefix: "7339")
        let client = JobClient(pool: redis.pool, middleware: [sealer(store)])
        let jid = try client.enqueue(try validation(user: user, receipt: receipt, transaction: transaction))
        let logs = CapturedLogs()
        processes.append(try TestWorker.start(redis: redis, registry: try registry(opener: SubjectArgumentsOpener(store: store, redis: redis.pool)),
                                              database: fixture.jobDatabase, concurrency: 2, logger: logs.logger(label: "leak-test")))
        XCTAssertTrue(try eventually(timeout: 60) { try redis.payloads(zset: Keys.dead).contains { $0.jid == jid } },
                      logs.all.map(\.description).joined(separator: "\n"))
        let dead = try XCTUnwrap(try redis.payloads(zset: Keys.dead).first { $0.jid == jid })
        let message = try XCTUnwrap(dead.errorMessage)
        let needles = [transaction, user.uuidString.lowercased(), receipt]
        for needle in needles {
            XCTAssertFalse(message.contains(needle), "an opened value in error_message: \(message)")
            XCTAssertFalse(dead.serialized().contains(needle), "an opened value in the dead entry")
        }
        XCTAssertTrue(message.contains("user_id [user_id] does not exist"), "the field is named where its value was: \(message)")
        let lines = logs.all.map { "\($0.message) \($0.metadata)" }
        XCTAssertTrue(lines.contains { $0.contains("[transaction_id]") || $0.contains("[user_id]") }, "\(lines)")
        for needle in needles {
            XCTAssertEqual(lines.filter { $0.contains(needle) }, [], "an opened value in a log line")
        }
        XCTAssertEqual(try aofHolds(needles), [], "an opened value in the AOF")
    }

    /// Rotation in committed batches (issue 50 point 4): stopped after its first batch (as a `kill -9` between two
    /// batches leaves it), part of the keys are under KEK 2 and the rest under KEK 1, every key still opens with both
    /// configured and the old KEK is not retired; run again, it re-wraps only the rest and retires KEK 1; every data
    /// key is the same bytes as before, opened with KEK 2 alone.
    func testARotationStoppedBetweenBatchesResumesAndEveryKeyStaysTheSame() throws {
        let old = try SubjectKeyStore(pool: pool, current: kek1)
        let rows = try db.scalar("SELECT count(*)::int FROM subject_keys")
        var keys: [String: Data] = [:]
        for index in 0..<25 {
            let made = try old.dataKey(forSubject: "zqrotation-\(index)@example.org")
            keys[made.id] = made.key.withUnsafeBytes { Data($0) }
        }
        let total = rows + 25
        let rotating = try SubjectKeyStore(pool: pool, current: kek2, previous: kek1)
        let first = try rotating.rotate(batchSize: 10, stopAfterBatches: 1)
        XCTAssertEqual(first.rewrapped, 10)
        XCTAssertEqual(first.retiredKEKs, [])
        XCTAssertEqual(first.transactions, 1)
        XCTAssertFalse(first.complete)
        XCTAssertEqual(try db.scalar("SELECT count(*)::int FROM subject_keys WHERE kek_id = 'kek-2'"), 10)
        XCTAssertEqual(try db.scalar("SELECT count(*)::int FROM subject_key_encryption_keys WHERE kek_id = 'kek-1'"), 1,
                       "the old KEK is not retired while keys remain under it")
        for (id, bytes) in keys { XCTAssertEqual(try rotating.dataKey(id: id), bytes, "opens half-way") }

        let rest = try rotating.rotate(batchSize: 10)
        XCTAssertEqual(rest.rewrapped, total - 10)
        XCTAssertEqual(rest.retiredKEKs, ["kek-1"])
        XCTAssertTrue(rest.complete)
        XCTAssertEqual(rest.transactions, (total - 10) / 10 + 2, "full batches, the short one, the last")
        XCTAssertEqual(try db.scalar("SELECT count(*)::int FROM subject_keys WHERE kek_id <> 'kek-2'"), 0)
        let current = try SubjectKeyStore(pool: pool, current: kek2)
        for (id, bytes) in keys { XCTAssertEqual(try current.dataKey(id: id), bytes, "the same key, under KEK 2 alone") }
        XCTAssertEqual(try current.rotate().rewrapped, 0, "idempotent")
    }

    /// Rotation: jobs sealed before `keys rotate` (under KEK 1) and after (KEK 2) are opened by a worker that only has
    /// KEK 2 (KEK 1 destroyed); a wrong KEK fails when the store opens, at start, not per job.
    func testRotationKeepsJobsBeforeAndAfterReadableAndAWrongKEKIsNamedAtStart() throws {
        let before = try db.newUser(), after = try db.newUser()
        try registerValid(receipt: "zqrot-before", transaction: "7337101")
        try registerValid(receipt: "zqrot-after", transaction: "7337102")
        let old = try SubjectKeyStore(pool: pool, current: kek1)
        try redis.client.enqueue(try sealer(old).sealed(try validation(user: before, receipt: "zqrot-before", transaction: "7337101")))

        let rotating = try SubjectKeyStore(pool: pool, current: kek2, previous: kek1)
        let rotation = try rotating.rotate()
        XCTAssertEqual(rotation.rewrapped, 1)
        XCTAssertEqual(rotation.retiredKEKs, ["kek-1"])
        XCTAssertEqual(try db.scalar("SELECT count(*)::int FROM subject_keys WHERE kek_id <> 'kek-2'"), 0)
        try redis.client.enqueue(try sealer(rotating).sealed(try validation(user: after, receipt: "zqrot-after", transaction: "7337102")))

        // KEK 1 is gone: the worker knows KEK 2 only.
        let current = try SubjectKeyStore(pool: pool, current: kek2)
        try startWorker(try registry(opener: SubjectArgumentsOpener(store: current, redis: redis.pool)))
        XCTAssertTrue(try eventually(timeout: 60) { try db.userStatus(before) == "premium" && db.userStatus(after) == "premium" })
        XCTAssertEqual(try redis.int("ZCARD", Keys.dead) + redis.int("ZCARD", Keys.retry), 0)

        XCTAssertThrowsError(try SubjectKeyStore(pool: pool, current: KeyEncryptionKey.random(id: "kek-2"))) { error in
            XCTAssertEqual(error as? SubjectKeyStoreError, .wrongKEK(id: "kek-2"))
        }
        XCTAssertThrowsError(try SubjectKeyStore(pool: pool, current: kek1)) { error in
            XCTAssertEqual(error as? SubjectKeyStoreError, .unknownKEK(configured: "kek-1", stored: ["kek-2"]))
        }
        // `workerctl worker` with the wrong KEK says so at start and runs degraded (the other classes; issue 50 point 4,
        // ReceiptsGoogleWorkerTests.testAWorkerWhoseKeyStoreDoesNotOpenAtStartServesTheOtherClassesWhilePersonalJobsWait).
        let worker = try ChildProcess(executable: TestServices.workerctl, arguments: ["worker", "--concurrency", "1"],
                                      environment: ["REDIS_URL": redis.url, "DATABASE_URL": fixture.database.url,
                                                    "WORKERS_KEK": KeyEncryptionKey.random(id: "kek-2").configurationText])
        XCTAssertTrue(eventually(timeout: 30) { worker.stderr.contains("key_store_unusable") }, worker.stderr)
        XCTAssertTrue(worker.stderr.contains("wrong KEK") && worker.isRunning, worker.stderr)
        worker.signal(SIGTERM)
        _ = worker.wait()

        // A worker with the receipts area configured (ValidateReceiptJob declares personal arguments) and no KEK
        // refuses to start.
        let account = jsonString(["type": "service_account", "project_id": "demo", "private_key_id": "k1",
                                  "private_key": try _RSA.Signing.PrivateKey(keySize: .bits2048).pkcs8PEMRepresentation,
                                  "client_email": "worker@demo.iam.gserviceaccount.com", "token_uri": "http://127.0.0.1:9/token"])
        let keyless = try ChildProcess.run(TestServices.workerctl, ["worker", "--concurrency", "1"],
                                           environment: ["REDIS_URL": redis.url, "DATABASE_URL": fixture.database.url,
                                                         "RECEIPTS_GOOGLE_SERVICE_ACCOUNT": account,
                                                         "RECEIPTS_GOOGLE_PACKAGE_NAMES": "com.example.app",
                                                         "WORKERS_KEK": "", "WORKERS_KEK_FILE": ""],
                                           timeout: 30)
        XCTAssertEqual(keyless.status, 1, keyless.stderr)
        XCTAssertTrue(keyless.stderr.contains("ValidateReceiptJob declare personal arguments")
                      || keyless.stderr.contains("declare personal arguments"), keyless.stderr)
    }

    /// Erasure by key: the user's jobs sealed before the erasure — one waiting in `retry`, one in `dead`, one in a copy
    /// of the AOF taken before the erasure and restored into a fresh redis-server — never run: each ends in `dead`
    /// with `SubjectErased`, nothing is validated. A PostgreSQL dump from before the erasure, restored after the KEK
    /// rotation, does not open with the current KEK (the erased key was only ever wrapped under the destroyed one).
    func testErasedSubjectsJobsInRetryDeadAndARestoredAOFCopyNeverRunAndAPreErasureDumpStaysClosed() throws {
        let (user, request) = try userWithDueDeletion(email: "zqshredded@example.org")
        let other = try db.newUser()
        try registerValid(receipt: "zqerased-receipt", transaction: "7337201")
        let store = try SubjectKeyStore(pool: pool, current: kek1)
        let seal = sealer(store)
        _ = try store.dataKey(forSubject: other.uuidString)  // a live key the rotation re-wraps

        func payload(_ job: NewJob) throws -> JobPayload {
            try JobClient.payload(for: try seal.sealed(job), createdAt: Clock.now(), enqueuedAt: Clock.now())
        }
        var retried = try payload(try validation(user: user, receipt: "zqerased-receipt", transaction: "7337201"))
        retried.fields["retry_count"] = .int(0)
        retried.fields["error_class"] = .string("StoreUnavailable")
        let dead = try payload(try validation(user: user, receipt: "zqerased-receipt", transaction: "7337201"))
        let restoredJob = try payload(try validation(user: user, receipt: "zqerased-receipt", transaction: "7337201"))
        try redis.command("ZADD", Keys.retry, Clock.now() + 3600, retried.serialized())
        try redis.command("ZADD", Keys.dead, Clock.now(), dead.serialized())
        try redis.command("LPUSH", "queue:backup-only", restoredJob.serialized())

        // The backups, taken before the erasure: the AOF files and a PostgreSQL dump.
        let backup = FileManager.default.temporaryDirectory.appendingPathComponent("subject-keys-backup-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: backup, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: backup) }
        try FileManager.default.copyItem(at: try aofDirectory(), to: backup.appendingPathComponent("appendonlydir"))
        let dumpFile = backup.appendingPathComponent("before.sql").path
        let dump = try ChildProcess.run(URL(fileURLWithPath: "/usr/bin/pg_dump"),
                                        ["--no-owner", "-f", dumpFile, fixture.database.url])
        XCTAssertEqual(dump.status, 0, dump.stderr)
        try redis.command("DEL", "queue:backup-only")

        try erase(user, request: request)
        XCTAssertEqual(try db.scalar("SELECT count(*)::int FROM subject_keys WHERE person_digest = $1", [store.personDigest(user)]), 0)

        // Rotation after the erasure; KEK 1 is then destroyed.
        XCTAssertEqual(try SubjectKeyStore(pool: pool, current: kek2, previous: kek1).rotate().rewrapped, 1)
        let current = try SubjectKeyStore(pool: pool, current: kek2)
        let opener = SubjectArgumentsOpener(store: current, redis: redis.pool)

        // dead: cannot be read.
        XCTAssertThrowsError(try opener.open(dead.args, className: "ValidateReceiptJob", jid: dead.jid ?? "",
                                             fields: ValidateReceiptArguments.personalFields, subjectField: "user_id")) { error in
            XCTAssertEqual((error as? PersonalArgumentsRefusal)?.errorClass, "SubjectErased")
        }
        // retry: due now; the worker sends it to dead as SubjectErased, without a retry.
        try redis.command("ZREM", Keys.retry, retried.serialized())
        try redis.command("ZADD", Keys.retry, Clock.now() - 1, retried.serialized())
        try startWorker(try registry(opener: opener))
        XCTAssertTrue(try eventually(timeout: 60) { try redis.payloads(zset: Keys.dead).contains { $0.jid == retried.jid } })
        // dead, retried by hand (pushed back to its queue): dead again.
        try redis.command("ZREM", Keys.dead, dead.serialized())
        try redis.client.push(existing: dead, connection: try redis.connection())

        // The AOF copy restored into a fresh Redis: the job is there, and the worker sends it to dead.
        let restored = try RestoredRedis(directory: backup, port: 6475, database: redis.database)
        defer { restored.stop() }
        let raw = try XCTUnwrap(try restored.connection.command("LRANGE", "queue:backup-only", 0, -1).strings.first)
        XCTAssertEqual(try JobPayload(parsing: raw).jid, restoredJob.jid)
        try redis.command("LPUSH", "queue:default", raw)

        let jids = Set([retried.jid, dead.jid, restoredJob.jid].compactMap { $0 })
        XCTAssertTrue(try eventually(timeout: 60) {
            Set(try redis.payloads(zset: Keys.dead).filter { $0.fields["error_class"]?.stringValue == "SubjectErased" }
                .compactMap(\.jid)) == jids
        }, "\((try? redis.payloads(zset: Keys.dead))?.map { ($0.jid ?? "", $0.fields["error_class"]?.stringValue ?? "") } ?? [])")
        XCTAssertEqual(try redis.int("ZCARD", Keys.retry), 0)
        XCTAssertEqual(try db.scalar("SELECT count(*)::int FROM iap_receipts WHERE transaction_id = '7337201'"), 0)
        for entry in try redis.payloads(zset: Keys.dead) {
            XCTAssertFalse(entry.serialized().contains("zqerased-receipt"))
            XCTAssertFalse(entry.serialized().lowercased().contains(user.uuidString.lowercased()))
        }

        // The pre-erasure dump restored: with the current KEK the store does not open, and the erased person's
        // wrapped key (still in the dump) does not unwrap under it.
        let restoredDB = try PostgresTestDatabase.create(prefix: "subject_keys_restore")
        defer { restoredDB.drop() }
        let load = try ChildProcess.run(URL(fileURLWithPath: "/usr/bin/psql"),
                                        ["-q", "-v", "ON_ERROR_STOP=1", "-f", dumpFile, restoredDB.url])
        XCTAssertEqual(load.status, 0, load.stderr)
        let restoredPool = PostgresPool(url: restoredDB.url, maxConnections: 1)
        defer { restoredPool.shutdown() }
        XCTAssertEqual(try restoredPool.withConnection { c in
            try c.queryFirst("SELECT count(*)::int AS n FROM subject_keys WHERE person_digest = $1 AND kek_id = 'kek-1'", [store.personDigest(user)])!.int("n")
        }, 1, "the dump holds the erased key, wrapped under KEK 1 only")
        XCTAssertThrowsError(try SubjectKeyStore(pool: restoredPool, current: kek2)) { error in
            XCTAssertEqual(error as? SubjectKeyStoreError, .unknownKEK(configured: "kek-2", stored: ["kek-1"]))
        }
    }

    /// The unwrapped-key cache of a running worker is dropped fleet-wide by the erasure: a job sealed before the
    /// erasure, delivered after it to a worker that has the key cached (60 s TTL), goes to dead as `SubjectErased`
    /// once the worker read the erasure epoch (at most 1 s later, the test's clock).
    func testAWarmKeyCacheIsDroppedFleetWideWhenTheSubjectIsErased() throws {
        let (user, request) = try userWithDueDeletion(email: "zqcached@example.org")
        try registerValid(receipt: "zqwarm-1", transaction: "7337301")
        let store = try SubjectKeyStore(pool: pool, current: kek1)
        let clock = TestClock()
        let opener = SubjectArgumentsOpener(store: store, redis: redis.pool, cacheTTL: .seconds(60),
                                            epochCheckInterval: .seconds(1), now: { clock.now })
        try startWorker(try registry(opener: opener))
        try redis.client.enqueue(try sealer(store).sealed(try validation(user: user, receipt: "zqwarm-1", transaction: "7337301")))
        XCTAssertTrue(try eventually(timeout: 60) { try db.userStatus(user) == "premium" })
        XCTAssertEqual(opener.cachedKeyCount, 1, "the key is cached")
        let late = try sealer(store).sealed(try validation(user: user, receipt: "zqwarm-1", transaction: "7337301"))

        try erase(user, request: request)
        clock.advance(by: 1.5)  // the next job makes the worker read the epoch
        let jid = try redis.client.enqueue(late)
        XCTAssertTrue(try eventually(timeout: 60) {
            try redis.payloads(zset: Keys.dead).contains { $0.jid == jid && $0.fields["error_class"]?.stringValue == "SubjectErased" }
        }, "\((try? redis.payloads(zset: Keys.dead))?.map { $0.fields["error_class"]?.stringValue ?? "" } ?? [])")
    }

    /// The sealer hears of erasures (issue 50 point 5): a producer's sealer that has a person's key cached does not
    /// seal with it once the person is erased (the erasure epoch, read at most once a second): the next job gets a
    /// key of its own, not the erased one.
    func testASealerWithTheErasedKeyCachedSealsTheNextJobUnderANewKey() throws {
        let store = try SubjectKeyStore(pool: pool, current: kek1)
        let sealer = SubjectArgumentsSealer(store: store, classes: DomainJobs.personalArgumentTypes, redis: redis.pool)
        let user = try db.newUser()
        func keyID(_ job: NewJob) throws -> String {
            let object = try XCTUnwrap(job.args.first?.objectValue)
            let envelope: PersonalEnvelope = try XCTUnwrap(object.entries.compactMap { PersonalEnvelope($0.value) }.first, "\(object)")
            return envelope.keyID
        }
        let first = try keyID(sealer.sealed(try validation(user: user, receipt: "zqseal-1", transaction: "7349001")))
        XCTAssertEqual(try keyID(sealer.sealed(try validation(user: user, receipt: "zqseal-2", transaction: "7349002"))), first,
                       "cached: the same key")
        XCTAssertEqual(sealer.cachedKeyCount, 1)
        // The key deleted as an erasure by subject does (an address not linked to a person: a new key may be made
        // for the subject later, unlike for an erased person).
        _ = try pool.withConnection { try $0.execute("DELETE FROM subject_keys WHERE person_digest = $1", [store.personDigest(user)]) }
        try SubjectKeyInvalidation.announce(on: [redis.pool])
        Thread.sleep(forTimeInterval: 1.1)  // the sealer reads the epoch at most once a second
        let after = try keyID(sealer.sealed(try validation(user: user, receipt: "zqseal-3", transaction: "7349003")))
        XCTAssertNotEqual(after, first, "a job sealed after the erasure is not sealed under the erased key")
    }

    /// No key is made for a person already erased (issue 50 point 4): a job enqueued for them after the erasure is
    /// refused by the sealer (no fresh key linked to them that no later erasure would delete); other persons seal on.
    func testNoDataKeyIsMadeForAnErasedPersonAndTheirLateJobIsRefused() throws {
        let store = try SubjectKeyStore(pool: pool, current: kek1)
        let (user, request) = try userWithDueDeletion(email: "zqlate@example.org")
        _ = try sealer(store).sealed(try validation(user: user, receipt: "zqlate-1", transaction: "7351001"))
        try erase(user, request: request)
        func keys(_ person: UUID) throws -> Int {
            try pool.withConnection { try XCTUnwrap($0.queryFirst("SELECT count(*)::int AS n FROM subject_keys WHERE person_digest = $1", [store.personDigest(person)])).int("n") }
        }
        XCTAssertEqual(try keys(user), 0)
        XCTAssertThrowsError(try sealer(store).sealed(try validation(user: user, receipt: "zqlate-2", transaction: "7351002"))) { error in
            XCTAssertTrue("\(error)".contains("person was erased"), "\(error)")
            XCTAssertFalse("\(error)".contains(user.uuidString.lowercased()) || "\(error)".contains(user.uuidString), "\(error)")
        }
        XCTAssertThrowsError(try store.dataKey(forSubject: user.uuidString)) { error in
            XCTAssertEqual(error as? SubjectKeyStoreError, .personErased)
        }
        XCTAssertEqual(try keys(user), 0, "no key was made for the erased person")
        let other = try db.newUser()
        XCTAssertNoThrow(try sealer(store).sealed(try validation(user: other, receipt: "zqlate-3", transaction: "7351003")))
        XCTAssertEqual(try keys(other), 1)
    }

    /// The person link is a keyed digest (issue 50 point 3): a key made now holds no `users.id` in clear; a row written
    /// before migration 0020 (clear `person_id`) is moved to its digest when a process with the KEK opens the store,
    /// and an erasure finds both.
    func testThePersonLinkIsAKeyedDigestAndRowsFromBeforeMoveToItWhenTheStoreOpens() throws {
        let store = try SubjectKeyStore(pool: pool, current: kek1)
        let user = try db.newUser(), legacy = try db.newUser()
        let made = try store.dataKey(forSubject: user.uuidString)
        let legacyKey = try store.dataKey(forSubject: legacy.uuidString)
        try pool.withConnection { c in  // as 0018 wrote it
            _ = try c.execute("UPDATE subject_keys SET person_id = $2, person_digest = NULL WHERE key_id = $1", [legacyKey.id, legacy])
        }
        let clear = try db.scalar("SELECT count(*)::int FROM subject_keys WHERE person_id IS NOT NULL")
        XCTAssertEqual(clear, 1)
        let row = try XCTUnwrap(try pool.withConnection { try $0.queryFirst("SELECT person_digest FROM subject_keys WHERE key_id = $1", [made.id]) })
        XCTAssertEqual(try row.data("person_digest"), store.personDigest(user))
        XCTAssertNotEqual(store.personDigest(user), store.personDigest(legacy))

        _ = try SubjectKeyStore(pool: pool, current: kek1)  // a start with the KEK
        XCTAssertEqual(try db.scalar("SELECT count(*)::int FROM subject_keys WHERE person_id IS NOT NULL"), 0)
        XCTAssertEqual(try db.scalar("SELECT count(*)::int FROM subject_keys WHERE person_digest = $1", [store.personDigest(legacy)]), 1)
        let erased = try pool.withConnection { c in try c.transaction { try store.erase(personID: legacy, on: $0) } }
        XCTAssertEqual(erased, 1)
        XCTAssertNil(try store.dataKey(id: legacyKey.id))
        XCTAssertNotNil(try store.dataKey(id: made.id))
    }

    /// A PostgreSQL backup restored after an erasure brings the person's key and account back (issue 50 point 4). The
    /// erasure journaled the person's keyed digest — no id — in Redis; `workerctl keys journal` ships it as text, and
    /// `workerctl keys recover --since <backup time> --journal-file F` (the Redis journal gone, as when Redis is
    /// restored too) erases the key again, erases a key that no longer unwraps, records the person so no new key is
    /// made, and enqueues the deletion again: through the real runner the person's sealed job dies `SubjectErased`
    /// and the re-enqueued deletion anonymises the account again; another person's key still opens.
    func testAfterARestoreFromBeforeAnErasureRecoverReplaysTheJournalAndThePersonsJobsDieSubjectErased() throws {
        let store = try SubjectKeyStore(pool: pool, current: kek1)
        let (user, request) = try userWithDueDeletion(email: "zqrestore@example.org")
        let other = try db.newUser(), damaged = try db.newUser()
        let job = try sealer(store).sealed(try validation(user: user, receipt: "zqrestore-1", transaction: "7355001"))
        let otherKey = try store.dataKey(forSubject: other.uuidString).id
        let damagedKey = try store.dataKey(forSubject: damaged.uuidString).id
        let keyID = try XCTUnwrap(try store.keyID(forSubject: user.uuidString))

        // The backup, taken before the erasure.
        let backupTime = Date().addingTimeInterval(-1)
        let backup = FileManager.default.temporaryDirectory.appendingPathComponent("subject-keys-recover-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: backup, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: backup) }
        let dumpFile = backup.appendingPathComponent("before.sql").path
        let dump = try ChildProcess.run(URL(fileURLWithPath: "/usr/bin/pg_dump"), ["--no-owner", "-f", dumpFile, fixture.database.url])
        XCTAssertEqual(dump.status, 0, dump.stderr)

        try erase(user, request: request)
        XCTAssertNil(try store.dataKey(id: keyID))
        let members = try redis.command("ZRANGE", SubjectKeyErasureJournal.key, 0, -1).strings
        XCTAssertEqual(members.count, 1)
        XCTAssertEqual(SubjectKeyErasureJournal.Entry.parse(line: "0 \(members[0])")?.personDigest, store.personDigest(user))
        XCTAssertFalse(members[0].lowercased().contains(user.uuidString.lowercased().prefix(8)), "the journal names no one")

        // The journal shipped as text; then Redis loses it (restored to the same old time as PostgreSQL).
        let environment = ["REDIS_URL": redis.url, "WORKERS_KEK": kek1.configurationText]
        let journal = try ChildProcess.run(TestServices.workerctl, ["keys", "journal"], environment: environment, timeout: 30)
        XCTAssertEqual(journal.status, 0, journal.stderr)
        let journalFile = backup.appendingPathComponent("journal.txt").path
        try journal.stdout.write(toFile: journalFile, atomically: true, encoding: .utf8)
        try redis.command("DEL", SubjectKeyErasureJournal.key)

        // The restore: PostgreSQL as it was before the erasure, plus one key row changed since (it no longer unwraps).
        let restoredDB = try PostgresTestDatabase.create(prefix: "subject_keys_recover")
        defer { restoredDB.drop() }
        let load = try ChildProcess.run(URL(fileURLWithPath: "/usr/bin/psql"), ["-q", "-v", "ON_ERROR_STOP=1", "-f", dumpFile, restoredDB.url])
        XCTAssertEqual(load.status, 0, load.stderr)
        let restoredPool = PostgresPool(url: restoredDB.url, maxConnections: 2)
        defer { restoredPool.shutdown() }
        try restoredPool.withConnection { c in
            _ = try c.execute("UPDATE subject_keys SET wrapped_key = overlay(wrapped_key placing '\\x00'::bytea from 20 for 1) WHERE key_id = $1",
                              [damagedKey])
        }
        let restored = try SubjectKeyStore(pool: restoredPool, current: kek1)
        XCTAssertNotNil(try restored.dataKey(id: keyID), "the restore brought the erased key back: what recover undoes")

        let recover = try ChildProcess.run(TestServices.workerctl, [
            "keys", "recover", "--since", "\(Int(backupTime.timeIntervalSince1970))", "--journal-file", journalFile,
        ], environment: environment.merging(["DATABASE_URL": restoredDB.url]) { $1 }, timeout: 60)
        XCTAssertEqual(recover.status, 0, recover.stderr)
        XCTAssertTrue(recover.stdout.contains("1 erasures since") && recover.stdout.contains("1 data keys erased again")
                      && recover.stdout.contains("1 keys that no longer unwrap erased") && recover.stdout.contains("1 deletion jobs enqueued")
                      && recover.stdout.contains("0 digests matching no account"), recover.stdout)
        XCTAssertNil(try restored.dataKey(id: keyID))
        XCTAssertNil(try restored.dataKey(id: damagedKey))
        XCTAssertThrowsError(try restored.dataKey(forSubject: user.uuidString)) { error in
            XCTAssertEqual(error as? SubjectKeyStoreError, .personErased)
        }
        XCTAssertEqual(try restored.dataKey(forSubject: other.uuidString).id, otherKey, "another person's key is untouched")

        // Through the real runner, on the restored database: the person's job dies SubjectErased; the deletion runs.
        let driver = JobRunnerDriver(registry: try registry(opener: SubjectArgumentsOpener(store: restored, redis: redis.pool),
                                                            subjectKeys: restored),
                                     database: JobDatabase(pool: restoredPool))
        let delivery = try driver.deliver(job)
        XCTAssertEqual(delivery.errorClass, "SubjectErased", "\(delivery)")
        let queued = try redis.payloads(list: "queue:default").filter { $0.className == AccountDeletionJob.className }
        XCTAssertEqual(queued.count, 1, "the deletion enqueued again")
        try driver.run(try XCTUnwrap(queued.first))
        XCTAssertEqual(try restoredPool.withConnection { c in
            try c.queryFirst("SELECT (email IS NULL AND anonymized_at IS NOT NULL) AS gone FROM users WHERE id = $1", [user])!.bool("gone")
        }, true, "the account anonymised again")

        // A recover from after the erasure finds nothing to do.
        let later = try ChildProcess.run(TestServices.workerctl, ["keys", "recover", "--since", "\(Int(Date().timeIntervalSince1970) + 5)"],
                                         environment: environment.merging(["DATABASE_URL": restoredDB.url]) { $1 }, timeout: 30)
        XCTAssertTrue(later.stdout.hasPrefix("0 erasures since"), later.stdout + later.stderr)
    }

    /// Envelopes are bound to their job's class and person (issue 50 point 2), through the real runner: a field
    /// taken from another person's job, an envelope pasted into a job of another class (whose subject names the same
    /// person in clear), and a field sealed for another person under a clear subject all end in dead as
    /// `UnreadableEnvelope`, naming fields and key ids only; the jobs as sealed run.
    func testAnEnvelopeTakenFromAnotherPersonOrPastedIntoAnotherClassDoesNotOpen() throws {
        let store = try SubjectKeyStore(pool: pool, current: kek1)
        let driver = try fixture.driver(try registry(opener: SubjectArgumentsOpener(store: store, redis: redis.pool)))
        let userA = try db.newUser(), userB = try db.newUser()
        try registerValid(receipt: "zqbindA", transaction: "7353001")
        let jobA = try sealer(store).sealed(try validation(user: userA, receipt: "zqbindA", transaction: "7353001"))
        let jobB = try sealer(store).sealed(try validation(user: userB, receipt: "zqbindB", transaction: "7353002"))
        let argsA = try XCTUnwrap(jobA.args.first?.objectValue), argsB = try XCTUnwrap(jobB.args.first?.objectValue)
        func refusal(_ className: String, _ object: JSONObject, jid: String? = nil) throws -> JobPayload {
            var job = NewJob(className, args: [.object(object)])
            job.jid = jid
            let delivery = try driver.deliver(job)
            guard case .dead(let payload) = delivery else { XCTFail("\(delivery)"); return try JobRunnerDriver.payload(className, []) }
            XCTAssertEqual(payload.fields["error_class"]?.stringValue, "UnreadableEnvelope")
            let message = payload.fields["error_message"]?.stringValue ?? ""
            for secret in ["zqbind", "7353", userA.uuidString.lowercased(), userB.uuidString.lowercased()] {
                XCTAssertFalse(message.contains(secret), message)
            }
            return payload
        }
        // 1. A's job with B's receipt: two keys in one job.
        var mixed = argsA
        mixed["receipt_data"] = argsB["receipt_data"]
        XCTAssertTrue(try refusal(ValidateReceiptArguments.className, mixed).fields["error_message"]?.stringValue?
            .contains("sealed under another key") == true)
        // 2. A's transaction_id envelope in a job of another class whose clear subject is A: the key is A's, the class not.
        let echoSealer = SubjectArgumentsSealer(store: store, classes: [EchoPersonalJob.Arguments.self])
        let echo = try echoSealer.sealed(try NewJob(EchoPersonalJob.Arguments(user_id: userA.uuidString, transaction_id: "7353003")))
        var pasted = try XCTUnwrap(echo.args.first?.objectValue)
        pasted["transaction_id"] = argsA["transaction_id"]
        // Under A's jid, so that only the class differs from where it was sealed.
        XCTAssertTrue(try refusal(EchoPersonalJob.Arguments.className, pasted, jid: jobA.jid).fields["error_message"]?.stringValue?
            .contains("moved from another field, class or job") == true)
        // 3. A clear subject with a field sealed for someone else.
        let forB = try echoSealer.sealed(try NewJob(EchoPersonalJob.Arguments(user_id: userB.uuidString, transaction_id: "7353004")))
        var borrowed = try XCTUnwrap(forB.args.first?.objectValue)
        borrowed["user_id"] = .string(userA.uuidString)
        XCTAssertTrue(try refusal(EchoPersonalJob.Arguments.className, borrowed).fields["error_message"]?.stringValue?
            .contains("not sealed under the key of user_id") == true)
        // 4. A's whole job copied as a new job (another jid, which the ledger would run again): v3 envelopes are bound
        //    to their jid.
        XCTAssertEqual(try XCTUnwrap(PersonalEnvelope(try XCTUnwrap(argsA["receipt_data"])))?.version, "v3")
        let copied = try driver.deliver(ValidateReceiptArguments.className, jobA.args)
        XCTAssertEqual(copied.errorClass, "UnreadableEnvelope", "\(copied)")
        XCTAssertTrue(copied.errorMessage?.contains("moved from another field, class or job") == true, "\(copied)")
        // The jobs as sealed run.
        XCTAssertNoThrow(try driver.run(echo))
        XCTAssertNoThrow(try driver.run(jobA))
        XCTAssertEqual(try db.userStatus(userA), "premium")
    }

    /// v1 envelopes (sealed before the class binding) still open when all of a job's fields carry its subject's key,
    /// through the real runner; strict mode refuses them, and so does every worker after
    /// `PersonalEnvelope.legacyAcceptedUntil` (the opener's clock moved there).
    func testLegacyEnvelopesOpenUntilTheirCutoffAndNeverInStrictMode() throws {
        let store = try SubjectKeyStore(pool: pool, current: kek1)
        let user = try db.newUser()
        try registerValid(receipt: "zqlegacy", transaction: "7354001")
        // Sealed as a producer configured with WORKERS_ENVELOPE_VERSION=v1 (or one of the previous release) seals.
        let configuration = try XCTUnwrap(try SubjectKeysConfiguration.fromEnvironment(["WORKERS_KEK": kek1.configurationText,
                                                                                       "WORKERS_ENVELOPE_VERSION": "v1"]))
        XCTAssertTrue(configuration.warnings.contains { $0.contains("WORKERS_ENVELOPE_VERSION=v1") }, "\(configuration.warnings)")
        let legacySealer = SubjectArgumentsSealer(store: store, classes: DomainJobs.personalArgumentTypes,
                                                  envelopeVersion: configuration.envelopeVersion)
        var object = try XCTUnwrap(try legacySealer.sealed(try validation(user: user, receipt: "zqlegacy", transaction: "7354001"))
            .args.first?.objectValue)
        XCTAssertEqual(PersonalEnvelope(try XCTUnwrap(object["user_id"]))?.version, "v1")
        let fields = ValidateReceiptArguments.personalFields
        let strict = SubjectArgumentsOpener(store: store, redis: nil, strict: true)
        XCTAssertThrowsError(try strict.open([.object(object)], className: ValidateReceiptArguments.className, jid: "", fields: fields,
                                             subjectField: "user_id")) { error in
            XCTAssertEqual((error as? PersonalArgumentsRefusal)?.errorClass, "UnreadableEnvelope")
            XCTAssertTrue("\(error)".contains("refused in strict mode"), "\(error)")
        }
        let late = SubjectArgumentsOpener(store: store, redis: nil, now: { PersonalEnvelope.legacyAcceptedUntil.addingTimeInterval(1) })
        XCTAssertThrowsError(try late.open([.object(object)], className: ValidateReceiptArguments.className, jid: "", fields: fields,
                                           subjectField: "user_id")) { error in
            XCTAssertTrue("\(error)".contains("no longer opened"), "\(error)")
        }
        let driver = try fixture.driver(try registry(opener: SubjectArgumentsOpener(store: store, redis: redis.pool)))
        XCTAssertNoThrow(try driver.run(ValidateReceiptArguments.className, [.object(object)]))
        XCTAssertEqual(try db.userStatus(user), "premium")

        // v2 (the previous release: bound to its class, not its jid): opens under any jid, in strict mode too, until
        // the cutoff.
        let v2 = try XCTUnwrap(try SubjectKeysConfiguration.fromEnvironment(["WORKERS_KEK": kek1.configurationText,
                                                                            "WORKERS_ENVELOPE_VERSION": "v2"]))
        XCTAssertTrue(v2.warnings.contains { $0.contains("WORKERS_ENVELOPE_VERSION=v2") }, "\(v2.warnings)")
        let v2Object = try XCTUnwrap(try SubjectArgumentsSealer(store: store, classes: DomainJobs.personalArgumentTypes,
                                                                envelopeVersion: v2.envelopeVersion)
            .sealed(try validation(user: user, receipt: "zqlegacy", transaction: "7354001")).args.first?.objectValue)
        XCTAssertEqual(PersonalEnvelope(try XCTUnwrap(v2Object["user_id"]))?.version, "v2")
        XCTAssertNoThrow(try strict.open([.object(v2Object)], className: ValidateReceiptArguments.className, jid: Identifiers.jid(),
                                         fields: fields, subjectField: "user_id"))
        XCTAssertThrowsError(try late.open([.object(v2Object)], className: ValidateReceiptArguments.className, jid: "", fields: fields,
                                           subjectField: "user_id")) { error in
            XCTAssertTrue("\(error)".contains("v2 envelope: no longer opened"), "\(error)")
        }
    }

    /// The one-off scrub (issue 50 point 1): error texts an older release wrote with opened values in them lose the
    /// values (`[field]`), in retry and dead, at the same score, the arguments still sealed; a job whose key is erased
    /// has both texts replaced by a fixed note; the opener's own refusals and classes without personal arguments are
    /// left alone; `--dry-run` writes nothing; a second run changes nothing.
    func testScrubErrorsRemovesOpenedValuesFromOldErrorTextsInRetryAndDead() throws {
        let store = try SubjectKeyStore(pool: pool, current: kek1)
        let user = try db.newUser()
        let (erasedUser, request) = try userWithDueDeletion(email: "zqscrub@example.org")
        func entry(_ job: NewJob, message: String, errorClass: String = "RuntimeError", backtrace: [String] = []) throws -> String {
            var payload = try JobClient.payload(for: job, createdAt: Clock.now(), enqueuedAt: Clock.now())
            payload.fields["error_class"] = .string(errorClass)
            payload.fields["error_message"] = .string(message)
            if !backtrace.isEmpty { payload.fields["error_backtrace"] = .array(backtrace.map { .string($0) }) }
            payload.fields["retry_count"] = .int(1)
            return payload.serialized()
        }
        let quoted = try entry(try sealer(store).sealed(try validation(user: user, receipt: "zqscrubreceipt-1", transaction: "7352001")),
                               message: "transaction 7352001 is not in receipt zqscrubreceipt-1 of user \(user.uuidString.lowercased())",
                               backtrace: ["ValidateReceiptJob.perform user=\(user.uuidString.lowercased())", "JobRunner.run"])
        let gone = try entry(try sealer(store).sealed(try validation(user: erasedUser, receipt: "zqscrubreceipt-2", transaction: "7352002")),
                             message: "transaction 7352002 refused for \(erasedUser.uuidString.lowercased())", backtrace: ["frame"])
        let refusal = try entry(try sealer(store).sealed(try validation(user: erasedUser, receipt: "zqscrubreceipt-3", transaction: "7352003")),
                                message: "the data key of user_id (key id k) is erased: the subject was deleted", errorClass: "SubjectErased")
        let other = try entry(NewJob("Noop", args: [.string("7352001")]), message: "Noop failed on 7352001")
        try redis.command("ZADD", Keys.retry, 1000, quoted)
        try redis.command("ZADD", Keys.dead, 2000, gone, 3000, refusal, 4000, other)
        try erase(erasedUser, request: request)
        let environment = ["REDIS_URL": redis.url, "DATABASE_URL": fixture.database.url, "WORKERS_KEK": kek1.configurationText]

        let dry = try ChildProcess.run(TestServices.workerctl, ["keys", "scrub-errors", "--dry-run"], environment: environment, timeout: 30)
        XCTAssertEqual(dry.status, 0, dry.stderr)
        XCTAssertTrue(dry.stdout.contains("would scrub 1, would blank 1 of 4"), dry.stdout)
        XCTAssertEqual(try redis.command("ZRANGE", Keys.retry, 0, -1).strings, [quoted], "a dry run writes nothing")

        let run = try ChildProcess.run(TestServices.workerctl, ["keys", "scrub-errors"], environment: environment, timeout: 30)
        XCTAssertEqual(run.status, 0, run.stderr)
        XCTAssertTrue(run.stdout.contains("scrubbed 1, blanked 1 of 4"), run.stdout)
        let retried = try XCTUnwrap(try redis.payloads(zset: Keys.retry).first)
        XCTAssertEqual(retried.fields["error_message"]?.stringValue,
                       "transaction [transaction_id] is not in receipt [receipt_data] of user [user_id]")
        XCTAssertEqual(retried.fields["error_backtrace"]?.arrayValue?.compactMap(\.stringValue),
                       ["ValidateReceiptJob.perform user=[user_id]", "JobRunner.run"])
        XCTAssertEqual(retried.args, try JobPayload(parsing: quoted).args, "the arguments stay sealed, as they were")
        XCTAssertEqual(try redis.command("ZSCORE", Keys.retry, retried.serialized()).double, 1000, "at its score")
        let dead = try redis.payloads(zset: Keys.dead)
        let blanked = try XCTUnwrap(dead.first { $0.jid == (try? JobPayload(parsing: gone))?.jid })
        XCTAssertEqual(blanked.fields["error_message"]?.stringValue, OpenedErrorScrub.blankedMessage)
        XCTAssertNil(blanked.fields["error_backtrace"])
        let members = try redis.command("ZRANGE", Keys.dead, 0, -1).strings
        XCTAssertTrue(members.contains(refusal) && members.contains(other), "the refusal's own text and other classes are left")
        for needle in ["7352001", "7352002", "zqscrubreceipt", user.uuidString.lowercased(), erasedUser.uuidString.lowercased()] {
            XCTAssertFalse((try redis.command("ZRANGE", Keys.retry, 0, -1).strings + members.filter { $0 != other })
                .contains { $0.contains(needle) }, needle)
        }
        let again = try ChildProcess.run(TestServices.workerctl, ["keys", "scrub-errors"], environment: environment, timeout: 30)
        XCTAssertTrue(again.stdout.contains("scrubbed 0, blanked 0 of 4"), again.stdout + again.stderr)
    }

    /// A worker whose key store fails (its table away) keeps the job of a personal class waiting in `schedule` without
    /// spending a retry (`key_store_waits` counts the waits), and runs it once the store is back (issue 50 point 4).
    func testAJobWhoseKeyStoreFailsWaitsWithoutSpendingARetryAndRunsOnceItIsBack() throws {
        let store = try SubjectKeyStore(pool: pool, current: kek1)
        let user = try db.newUser()
        let (receipt, transaction) = try validPurchase("zqwait", transactionPrefix: "7342")
        let job = try sealer(store).sealed(try validation(user: user, receipt: receipt, transaction: transaction))
        _ = try pool.withConnection { try $0.execute("ALTER TABLE subject_keys RENAME TO subject_keys_away") }
        var restored = false
        defer { if !restored { _ = try? pool.withConnection { try $0.execute("ALTER TABLE subject_keys_away RENAME TO subject_keys") } } }
        let jid = try redis.client.enqueue(job)
        try startWorker(try registry(opener: SubjectArgumentsOpener(store: store, redis: redis.pool)))
        XCTAssertTrue(try eventually(timeout: 30) {
            try redis.payloads(zset: Keys.schedule).contains { $0.jid == jid && ($0.fields["key_store_waits"]?.intValue ?? 0) >= 1 }
        }, "\((try? redis.payloads(zset: Keys.retry).map(\.errorMessage)) ?? [])")
        let waiting = try XCTUnwrap(try redis.payloads(zset: Keys.schedule).first { $0.jid == jid })
        XCTAssertNil(waiting.retryCount, "no retry spent")
        XCTAssertEqual(try redis.int("ZCARD", Keys.retry) + redis.int("ZCARD", Keys.dead), 0)

        _ = try pool.withConnection { try $0.execute("ALTER TABLE subject_keys_away RENAME TO subject_keys") }
        restored = true
        XCTAssertTrue(try eventually(timeout: 90) { try db.userStatus(user) == "premium" }, "ran once the store was back")
        XCTAssertEqual(try redis.int("ZCARD", Keys.retry) + redis.int("ZCARD", Keys.dead), 0)
    }

    /// A damaged key is its row's fault (issue 50 point 6): the subject whose wrapped key was changed has its outbox
    /// row marked with the reason, the relay logs the alert, and the next row of another subject in the same batch is
    /// sealed and pushed — one damaged key no longer stops the relay.
    func testADamagedSubjectKeyMarksItsOutboxRowAndTheRelayGoesOn() throws {
        let store = try SubjectKeyStore(pool: pool, current: kek1)
        let damaged = try db.newUser(), healthy = try db.newUser()
        _ = try store.dataKey(forSubject: damaged.uuidString.lowercased())
        try pool.withConnection { c in
            _ = try c.execute("UPDATE subject_keys SET wrapped_key = overlay(wrapped_key placing '\\x00'::bytea from 20 for 1) WHERE person_digest = $1",
                              [store.personDigest(damaged)])
            for user in [damaged, healthy] {
                let args = JSONValue.array(try validation(user: user, receipt: "zqdamaged-\(user)", transaction: "7341\(Int.random(in: 1000...9999))").args)
                _ = try c.query("SELECT workers_enqueue('ValidateReceiptJob', $1::jsonb) AS jid", [args.serialized()])
            }
        }
        let relay = try ChildProcess(executable: TestServices.workerctl, arguments: ["relay", "--outbox-poll-interval", "0.2"],
                                     environment: ["REDIS_URL": redis.url, "DATABASE_URL": fixture.database.url,
                                                   "WORKERS_KEK": kek1.configurationText])
        defer { relay.signal(SIGTERM); _ = relay.wait() }
        XCTAssertTrue(eventually(timeout: 30) { (try? redis.int("LLEN", "queue:default")) == 1 }, relay.stderr)
        // The healthy row may reach Redis before the damaged one's mark is committed: wait for the mark too.
        var marked: [String] = []
        XCTAssertTrue(eventually(timeout: 30) {
            marked = (try? pool.withConnection { try $0.query("SELECT error FROM job_outbox WHERE error IS NOT NULL").map { try $0.string("error") } }) ?? []
            return !marked.isEmpty
        }, relay.stderr)
        XCTAssertEqual(marked.count, 1, "the damaged subject's row, marked")
        XCTAssertTrue(marked.first?.contains("does not unwrap") == true, "\(marked)")
        XCTAssertFalse(marked.first?.contains(damaged.uuidString.lowercased()) == true, "the reason names no person")
        XCTAssertTrue(eventually { relay.stderr.contains("outbox_row_refused") }, relay.stderr)
        let pushed = try XCTUnwrap(try redis.payloads(list: "queue:default").first?.args.first?.objectValue)
        XCTAssertNotNil(PersonalEnvelope(try XCTUnwrap(pushed["user_id"])), "the healthy row went sealed")
        XCTAssertFalse(relay.stderr.contains("outbox relay round failed"), "no round failed over one damaged key")
    }

    /// The outbox (issue 37 point 2): a row written in clear through SQL `workers_enqueue` reaches Redis with its
    /// personal fields sealed by the real `workerctl relay` (WORKERS_KEK set), a row the caller sealed itself passes
    /// untouched; while the key store fails (its table away) the relay pushes nothing — neither in clear nor marked
    /// `error` — and once it is back both rows go, sealed, and the worker validates both. Neither the queue nor the
    /// AOF ever holds a personal value.
    func testTheOutboxRelaySealsRowsWrittenInClearAndHoldsThemBackWhileTheKeyStoreFails() throws {
        let store = try SubjectKeyStore(pool: pool, current: kek1)
        let clearUser = try db.newUser(), sealedUser = try db.newUser()
        let (clearReceipt, clearTx) = try validPurchase("zqoutbox-clear", transactionPrefix: "7339")
        let (sealedReceipt, sealedTx) = try validPurchase("zqoutbox-sealed", transactionPrefix: "7340")
        let clearArgs = JSONValue.array(try validation(user: clearUser, receipt: clearReceipt, transaction: clearTx).args).serialized()
        let sealed = try sealer(store).sealed(try validation(user: sealedUser, receipt: sealedReceipt, transaction: sealedTx))
        try pool.withConnection { c in
            _ = try c.query("SELECT workers_enqueue('ValidateReceiptJob', $1::jsonb) AS jid", [clearArgs])
            // Sealed by the caller: its envelopes are bound to the jid the sealer chose, which the row must carry.
            _ = try c.query("SELECT workers_enqueue('ValidateReceiptJob', $1::jsonb, jid => $2) AS jid",
                            [JSONValue.array(sealed.args).serialized(), sealed.jid])
            _ = try c.execute("ALTER TABLE subject_keys RENAME TO subject_keys_away")
        }
        var restored = false
        defer { if !restored { _ = try? pool.withConnection { try $0.execute("ALTER TABLE subject_keys_away RENAME TO subject_keys") } } }

        let relay = try ChildProcess(executable: TestServices.workerctl, arguments: ["relay", "--outbox-poll-interval", "0.2"],
                                     environment: ["REDIS_URL": redis.url, "DATABASE_URL": fixture.database.url,
                                                   "WORKERS_KEK": kek1.configurationText])
        defer { relay.signal(SIGTERM); _ = relay.wait() }
        XCTAssertTrue(eventually(timeout: 30) { relay.stderr.contains("outbox relay round failed") }, relay.stderr)
        XCTAssertEqual(try redis.int("LLEN", "queue:default"), 0, "pushed without the sealer")
        XCTAssertEqual(try pool.withConnection { try $0.queryFirst(
            "SELECT count(*)::int AS n FROM job_outbox WHERE pushed_at IS NULL AND error IS NULL")!.int("n") }, 2,
            "the rows must wait, unmarked, for the key store")

        _ = try pool.withConnection { try $0.execute("ALTER TABLE subject_keys_away RENAME TO subject_keys") }
        restored = true
        XCTAssertTrue(eventually(timeout: 30) { (try? redis.int("LLEN", "queue:default")) == 2 }, relay.stderr)
        let needles = [clearUser.uuidString.lowercased(), sealedUser.uuidString.lowercased(), clearReceipt, sealedReceipt,
                       clearTx, sealedTx]
        XCTAssertEqual(try queueHolds(needles), [], "personal values in clear in Redis")
        // The ciphertext (fresh nonce per seal) tells the caller's envelope from a second sealing (jsonb reorders keys).
        let sealedReceiptCiphertext = try XCTUnwrap(sealed.args.first?.objectValue?["receipt_data"]?.objectValue?["ct"])
        var untouched = false
        for payload in try redis.payloads(list: "queue:default") {
            let args = try XCTUnwrap(payload.args.first?.objectValue)
            for field in ["user_id", "receipt_data", "transaction_id"] {
                XCTAssertNotNil(PersonalEnvelope(try XCTUnwrap(args[field])), "\(field) is not an envelope")
            }
            XCTAssertEqual(args["app_id"]?.stringValue, db.appID.uuidString.lowercased())
            if args["receipt_data"]?.objectValue?["ct"] == sealedReceiptCiphertext { untouched = true }
        }
        XCTAssertTrue(untouched, "the caller's own envelope was sealed again")

        try startWorker(try registry(opener: SubjectArgumentsOpener(store: store, redis: redis.pool)))
        XCTAssertTrue(try eventually(timeout: 60) { try db.userStatus(clearUser) == "premium" && db.userStatus(sealedUser) == "premium" })
        XCTAssertEqual(try redis.int("ZCARD", Keys.dead) + redis.int("ZCARD", Keys.retry), 0)
        XCTAssertEqual(try aofHolds(needles), [], "personal values in clear in the AOF")
    }

    /// A row whose personal fields the relay seals is checked at its sealed size where it is accepted (issue 50
    /// point 6): once the real `workerctl relay` has published the declared fields, `workers_enqueue` refuses a receipt
    /// job whose clear args fit the 1 MiB limit but whose sealed payload would not (SQLSTATE 54000, sizes only),
    /// accepts one that fits sealed — which the relay then pushes, sealed, without marking it — and still accepts a
    /// class without personal fields of the refused size.
    func testAnOutboxRowIsCheckedAtItsSealedSizeWhereItIsAccepted() throws {
        let relay = try ChildProcess(executable: TestServices.workerctl, arguments: ["relay", "--outbox-poll-interval", "0.2"],
                                     environment: ["REDIS_URL": redis.url, "DATABASE_URL": fixture.database.url,
                                                   "WORKERS_KEK": kek1.configurationText])
        defer { relay.signal(SIGTERM); _ = relay.wait() }
        XCTAssertTrue(eventually(timeout: 30) {
            (try? self.db.scalar("SELECT count(*)::int FROM workers_personal_fields WHERE class = 'ValidateReceiptJob' AND 'receipt_data' = ANY (fields)")) == 1
        }, relay.stderr)
        let user = try db.newUser()
        func args(_ receiptBytes: Int) throws -> String {
            let receipt = "zqbig" + String(repeating: "Q", count: receiptBytes - 5)
            return JSONValue.array(try validation(user: user, receipt: receipt, transaction: "7360001").args).serialized()
        }
        func enqueue(_ className: String, _ args: String) throws {
            _ = try pool.withConnection { try $0.query("SELECT workers_enqueue($1, $2::jsonb) AS jid", [className, args]) }
        }
        let tooBig = try args(850_000)
        XCTAssertLessThan(tooBig.utf8.count, OutboxRelaySettings.defaultMaxPayloadBytes, "fits in clear")
        XCTAssertThrowsError(try enqueue("ValidateReceiptJob", tooBig)) { error in
            let text = "\(error)"
            XCTAssertTrue(text.contains("once its personal fields are sealed") && text.contains("54000"), text)
            XCTAssertFalse(text.contains("zqbig") || text.contains(user.uuidString.lowercased()), text)
        }
        XCTAssertNoThrow(try enqueue("Noop", tooBig), "a class without personal fields is checked at its size")
        try enqueue("ValidateReceiptJob", try args(700_000))
        XCTAssertTrue(eventually(timeout: 30) { (try? self.redis.int("LLEN", "queue:default")) == 2 }, relay.stderr)
        XCTAssertEqual(try db.scalar("SELECT count(*)::int FROM job_outbox WHERE error IS NOT NULL"), 0, "nothing refused by the relay later")
        let sealed = try XCTUnwrap(try redis.payloads(list: "queue:default").first { $0.className == "ValidateReceiptJob" })
        XCTAssertNotNil(PersonalEnvelope(try XCTUnwrap(sealed.args.first?.objectValue?["receipt_data"])))
        XCTAssertGreaterThan(sealed.serialized().utf8.count, 900_000, "sealed, it grew by a third")
    }

    /// An address used as a subject by a job that knows only the address (a key not linked to the person): the
    /// deletion erases it too, by the address it keeps in `purge_email`, so that job dies `SubjectErased`; another
    /// address's key stays. A worker without a key store cannot find that key: the deletion waits, spending no retry
    /// (nothing names the address), and keeps `purge_email` until a worker with the key store completes it.
    func testTheErasureDeletesTheKeyOfTheAddressAsASubjectAndWaitsForAKeyStoreWhenItHasNone() throws {
        let email = "zqmailonly@example.org"
        let (user, request) = try userWithDueDeletion(email: email)
        let store = try SubjectKeyStore(pool: pool, current: kek1)
        let probeSealer = SubjectArgumentsSealer(store: store, classes: [MailOnlyProbeJob.Arguments.self])
        // The producer spells the address its own way; the subject is the address, whatever its case.
        let mailJob = try probeSealer.sealed(try NewJob(MailOnlyProbeJob.Arguments(email: "ZqMailOnly@Example.org", note: "zqhello")))
        let otherJob = try probeSealer.sealed(try NewJob(MailOnlyProbeJob.Arguments(email: "zqsomeoneelse@example.org", note: "zqhi")))
        let opener = SubjectArgumentsOpener(store: store, redis: redis.pool, cacheTTL: .zero)
        XCTAssertNoThrow(try fixture.driver(try registry(opener: opener)).run(mailJob))

        let keyless = fixture.driver(try registry(opener: nil))
        let waiting = try keyless.deliver(AccountDeletionJob.className, PrivacyJobs.deletionJob(userID: user, requestID: request).args)
        // It waits for a worker with the key store, spending no retry (the person's keys are found by digest, and the
        // address's by its digest: both need the KEK), and nothing it wrote names the address.
        guard case .waited(let next, _) = waiting else { return XCTFail("\(waiting)") }
        XCTAssertNil(next.retryCount, "no retry spent")
        XCTAssertFalse(next.serialized().lowercased().contains("zqmailonly"), "the address in the payload")
        let purgeEmail = { try self.pool.withConnection { try $0.queryFirst(
            "SELECT count(*)::int AS n FROM deletion_requests WHERE id = $1 AND purge_email IS NOT NULL", [request])!.int("n") } }
        XCTAssertEqual(try purgeEmail(), 1, "the address must stay known until its key is erased")

        let keyed = fixture.driver(try registry(opener: opener, subjectKeys: store))
        try keyed.run(AccountDeletionJob.className, PrivacyJobs.deletionJob(userID: user, requestID: request).args)
        XCTAssertEqual(try purgeEmail(), 0)
        let erased = try keyed.deliver(mailJob)
        XCTAssertEqual(erased.errorClass, "SubjectErased", "\(erased)")
        XCTAssertNoThrow(try keyed.run(otherJob), "another address's key went too")
    }

    /// Strict mode: a clear personal value goes to dead as `PersonalDataInClear` (lenient mode runs it); an envelope
    /// moved to another field does not open (`UnreadableEnvelope`); a registry that declares personal arguments
    /// refuses to start without a key store; the payload limit applies to the encrypted size.
    func testStrictModeRefusesClearPersonalValuesAndEnvelopesStayInTheirField() throws {
        let store = try SubjectKeyStore(pool: pool, current: kek1)
        let user = try db.newUser()
        try registerValid(receipt: "zqclear-1", transaction: "7337401")
        let clear = try validation(user: user, receipt: "zqclear-1", transaction: "7337401")

        let strict = fixture.driver(try registry(opener: SubjectArgumentsOpener(store: store, redis: redis.pool, strict: true)))
        let refused = try strict.deliver("ValidateReceiptJob", clear.args)
        XCTAssertEqual(refused.errorClass, "PersonalDataInClear", "\(refused)")
        XCTAssertFalse(refused.errorMessage?.contains("zqclear-1") ?? true)

        // An envelope moved from receipt_data to transaction_id (same key id): does not open.
        var sealed = try sealer(store).sealed(clear)
        var object = try XCTUnwrap(sealed.args.first?.objectValue)
        object["transaction_id"] = object["receipt_data"]
        sealed.args = [.object(object)]
        XCTAssertEqual(try strict.deliver(sealed).errorClass, "UnreadableEnvelope")

        let lenient = fixture.driver(try registry(opener: SubjectArgumentsOpener(store: store, redis: redis.pool)))
        XCTAssertNoThrow(try lenient.run("ValidateReceiptJob", clear.args))
        XCTAssertEqual(try db.userStatus(user), "premium")

        XCTAssertThrowsError(try registry(opener: nil).checkPersonalArguments()) { error in
            XCTAssertTrue("\(error)".contains("ValidateReceiptJob"), "\(error)")
        }
        XCTAssertNoThrow(try registry(opener: SubjectArgumentsOpener(store: store, redis: nil)).checkPersonalArguments())

        // 800,000 characters fit the 1 MiB limit in clear; sealed (base64 of the ciphertext) they do not.
        let big = try validation(user: user, receipt: String(repeating: "r", count: 800_000), transaction: "7337402")
        XCTAssertNoThrow(try JobClient.serializedWithinLimit(try JobClient.payload(for: big, createdAt: 0, enqueuedAt: 0)))
        XCTAssertThrowsError(try JobClient(pool: redis.pool, middleware: [sealer(store)]).enqueue(big)) { error in
            guard case .tooLarge = error as? EnqueueError else { return XCTFail("\(error)") }
        }
    }
}

/// A job that knows a person only by an e-mail address (as another service's mail job sharing our Redis would):
/// `email` is the subject, `email` and `note` are personal. Does nothing.
struct MailOnlyProbeJob: Job {
    struct Arguments: JobArguments, Equatable {
        static let className = "ZqMailOnlyProbe"
        static let personalFields: Set<String> = ["email", "note"]
        static let subjectField: String? = "email"
        let email: String
        let note: String
    }
    func perform(_ arguments: Arguments, context: JobContext) throws {}
}

/// A class whose subject travels in clear (`user_id`, not personal) beside one personal field: the envelopes of another
/// class or person pasted into it must not open (issue 50 point 2).
struct EchoPersonalJob: Job {
    struct Arguments: JobArguments, Equatable {
        static let className = "ZqEchoPersonal"
        static let personalFields: Set<String> = ["transaction_id"]
        static let subjectField: String? = "user_id"
        let user_id: String
        let transaction_id: String
    }
    func perform(_ arguments: Arguments, context: JobContext) throws {}
}

/// A clock the test moves.
final class TestClock: Sendable {
    private let current = Mutex(Date())
    var now: Date { current.withLock { $0 } }
    func advance(by seconds: Double) { current.withLock { $0 = $0.addingTimeInterval(seconds) } }
}

/// A redis-server of the test's own on `port`, started from the AOF files copied into `directory/appendonlydir`
/// (a restored backup). `stop()` ends it.
final class RestoredRedis {
    let server: ChildProcess
    let connection: RedisConnection

    /// A redis-server over `directory`: its `appendonlydir` (the AOF copy), or with `rdbFile` that RDB file there.
    init(directory: URL, port: Int, database: Int, rdbFile: String? = nil) throws {
        let persistence = rdbFile.map { ["--appendonly", "no", "--dbfilename", $0] }
            ?? ["--appendonly", "yes", "--appenddirname", "appendonlydir"]
        server = try ChildProcess(executable: URL(fileURLWithPath: "/usr/bin/redis-server"),
                                  arguments: ["--port", "\(port)", "--bind", "127.0.0.1", "--dir", directory.path, "--save", "",
                                              "--databases", "256"] + persistence)  // as many as scripts/services runs
        var connected: RedisConnection?
        _ = eventually(timeout: 20) {
            connected = try? RedisConnection(url: "redis://127.0.0.1:\(port)/\(database)")
            guard let c = connected, (try? c.command("PING").checked()) != nil else { return false }
            // Still loading the AOF: commands answer LOADING.
            return (try? c.command("DBSIZE").checked()) != nil
        }
        guard let connected else { throw RestoreFailed() }
        connection = connected
    }

    struct RestoreFailed: Error {}

    func stop() {
        _ = try? connection.command("SHUTDOWN", "NOSAVE")
        server.signal(SIGTERM)
        _ = server.wait(timeout: 10)
    }
}
