import Foundation
import WorkersHTTP
@testable import WorkersAppJobs
import Logging
import WorkersQueue
import WorkersStorage
import WorkersTestServices
import Workers
import XCTest

/// AccountDeletionJob and DueDeletionSweepJob against real PostgreSQL and Redis db 32.
final class PrivacyDeletionTests: PrivacyTestCase {
    override func makeFixture() throws -> PrivacyFixture { try PrivacyFixture(prefix: "privacy_deletion_test", redisDatabase: 32) }

    /// Columns of rows still linked to a deleted user that may stay non-NULL, with the reason. Every other
    /// column of such a row must be NULL (or the row gone). Keep docs/jobs-privacy.md in step.
    static let nonPIIColumns: [String: Set<String>] = [
        // The anonymous shell keeps the account's technical state, no identifier of the person.
        "users": ["id", "app_id", "email_verified", "auth_provider", "status", "is_guest", "login_attempts",
                  "delete_requested", "delete_scheduled_at", "anonymized_at", "created_at", "updated_at"],
        // Audit trail: what happened when; network identifiers and free-form details are cleared
        // (only the deletion's own entry has details: request id, jid, row counts).
        "audit_logs": ["id", "user_id", "app_id", "action", "result", "details", "timestamp"],
        // Proof of the erasure request; the cancellation token is rotated to a random value, the reason cleared.
        "deletion_requests": ["id", "user_id", "token", "requested_at", "scheduled_at", "cancelled_at", "completed_at"],
    ]

    /// `table.column` of every foreign key to users(id), from information_schema.
    private func referencesToUsers() throws -> [(table: String, column: String)] {
        try fixture.sql("""
            SELECT kcu.table_name::text AS t, kcu.column_name::text AS c
            FROM information_schema.referential_constraints rc
            JOIN information_schema.key_column_usage kcu
              ON kcu.constraint_name = rc.constraint_name AND kcu.constraint_schema = rc.constraint_schema
            JOIN information_schema.constraint_column_usage ccu
              ON ccu.constraint_name = rc.unique_constraint_name AND ccu.constraint_schema = rc.unique_constraint_schema
            WHERE ccu.table_name = 'users' AND ccu.column_name = 'id' AND kcu.table_schema = 'public'
            ORDER BY 1, 2
            """).map { (try $0.string("t"), try $0.string("c")) }
    }

    private func columns(of table: String) throws -> [String] {
        try fixture.sql("""
            SELECT column_name::text AS c FROM information_schema.columns
            WHERE table_schema = 'public' AND table_name = $1 ORDER BY ordinal_position
            """, [table]).map { try $0.string("c") }
    }

    private func quote(_ identifier: String) throws -> String {
        try fixture.sql("SELECT quote_ident($1) AS q", [identifier]).first!.string("q")
    }

    /// Non-allow-listed columns that are not NULL in rows of `table` where `column = user`: `["table.col", …]`.
    private func personalColumns(table: String, linkedBy column: String, user: UUID) throws -> [String] {
        let allowed = Self.nonPIIColumns[table] ?? []
        var offending: [String] = []
        for candidate in try columns(of: table) where !allowed.contains(candidate) {
            let n = try fixture.count("SELECT count(*) AS n FROM \(try quote(table)) WHERE \(try quote(column)) = $1 "
                                      + "AND \(try quote(candidate)) IS NOT NULL", [user])
            if n > 0 { offending.append("\(table).\(candidate) (\(n) rows)") }
        }
        return offending
    }

    /// Tables (every public table) whose row text contains `needle`.
    private func tablesContaining(_ needle: String) throws -> [String] {
        let tables = try fixture.sql("""
            SELECT table_name::text AS t FROM information_schema.tables
            WHERE table_schema = 'public' AND table_type = 'BASE TABLE' ORDER BY 1
            """).map { try $0.string("t") }
        return try tables.filter { table in
            try fixture.count("SELECT count(*) AS n FROM \(try quote(table)) t WHERE strpos(t::text, $1) > 0", [needle]) > 0
        }
    }

    // MARK: - The erasure

    func testDeletionLeavesNoPersonalDataInAnyTableAndKeepsAccounting() throws {
        let appID = UUID()
        let alice = try PrivacySeed.user(fixture, label: "zqalice", appID: appID)
        let bob = try PrivacySeed.user(fixture, label: "zqbob", appID: appID)
        let aliceExport = try PrivacySeed.export(fixture, user: alice)
        try fixture.runExport(user: alice.id, export: aliceExport)
        let aliceFile = ExportFileStore(directory: fixture.directory).finalPath(exportID: aliceExport)
        XCTAssertTrue(FileManager.default.fileExists(atPath: aliceFile))
        let request = try PrivacySeed.deletionRequest(fixture, user: alice, scheduledIn: -60)
        _ = try PrivacySeed.deletionRequest(fixture, user: bob, scheduledIn: 86400)

        // The allow-list names real columns only (a typo would silently allow nothing).
        for (table, allowed) in Self.nonPIIColumns {
            XCTAssertTrue(allowed.isSubset(of: Set(try columns(of: table))), "unknown column in allow-list of \(table)")
        }
        // Sanity: the search finds the seeded data before, so finding nothing afterwards means something.
        for needle in alice.personalStrings { XCTAssertFalse(try tablesContaining(needle).isEmpty, needle) }

        try fixture.runDeletion(user: alice.id, request: request)

        // 1. Column by column, from information_schema: the user's own row and every row linked to it.
        XCTAssertEqual(try personalColumns(table: "users", linkedBy: "id", user: alice.id), [])
        let references = try referencesToUsers()
        XCTAssertGreaterThanOrEqual(references.count, 18)
        for (table, column) in references {
            XCTAssertEqual(try personalColumns(table: table, linkedBy: column, user: alice.id), [],
                           "personal data left in \(table) rows linked by \(column)")
        }
        // 2. Value by value, across the whole database (also catches PII in allowed or detached columns).
        for needle in alice.personalStrings {
            XCTAssertEqual(try tablesContaining(needle), [], "'\(needle)' still stored")
        }
        // 3. The other user is untouched.
        for needle in bob.personalStrings where needle != bob.cancellationToken.uuidString.lowercased() {
            XCTAssertFalse(try tablesContaining(needle).isEmpty, "bob's '\(needle)' disappeared")
        }
        // 4. Accounting kept, detached.
        let subscription = try XCTUnwrap(fixture.sql("SELECT * FROM subscriptions WHERE store_transaction_id = $1",
                                                     [alice.transactionID]).first)
        XCTAssertTrue(try subscription.isNull("user_id"))
        XCTAssertEqual(try subscription.string("status"), "active")
        XCTAssertEqual(try fixture.count("SELECT count(*) AS n FROM iap_receipts WHERE transaction_id = $1 AND user_id IS NULL",
                                         [alice.transactionID]), 1)
        XCTAssertEqual(try fixture.count("SELECT count(*) AS n FROM credit_transactions WHERE reference = 'ref-zqalice' AND user_id IS NULL"), 1)
        XCTAssertEqual(try fixture.count("SELECT count(*) AS n FROM subscription_events WHERE subscription_id = $1",
                                         [try subscription.uuid("id")]), 1)
        // 5. Audit entry, request completed, user marked, export file and rows gone.
        let audit = try XCTUnwrap(fixture.sql("SELECT details::text AS d FROM audit_logs WHERE user_id = $1 AND action = 'account_deleted'",
                                              [alice.id]).first)
        XCTAssertTrue(try audit.string("d").contains(request.uuidString.lowercased()))
        XCTAssertNotNil(try fixture.sql("SELECT completed_at FROM deletion_requests WHERE id = $1", [request]).first!.optionalDate("completed_at"))
        XCTAssertNotNil(try fixture.sql("SELECT anonymized_at FROM users WHERE id = $1", [alice.id]).first!.optionalDate("anonymized_at"))
        XCTAssertFalse(FileManager.default.fileExists(atPath: aliceFile))
        XCTAssertEqual(try fixture.count("SELECT count(*) AS n FROM privacy_exports WHERE user_id = $1", [alice.id]), 0)
    }

    func testDeletionPurgesTheUsersJobsFromRedisAndKeepsOthers() throws {
        let alice = try PrivacySeed.user(fixture, label: "zqalice")
        let bob = try PrivacySeed.user(fixture, label: "zqbob")
        let request = try PrivacySeed.deletionRequest(fixture, user: alice, scheduledIn: -60)
        let a = alice.id.uuidString.lowercased(), b = bob.id.uuidString.lowercased()
        func job(_ cls: String, _ args: [JSONValue]) throws -> String {
            try fixture.payload(cls, args: args).serialized()
        }
        let later = Clock.now() + 3600
        let aliceJobs = [
            (Keys.schedule, try job("GeocodeLocationJob", [.object(["user_id": .string(a), "location_id": "l1"])])),
            (Keys.retry, try job("ValidateReceiptJob", [.object(["user_id": .string(a.uppercased())])])),  // any case
            (Keys.dead, try job("RewardJob", [.string(a), .int(3)])),
            (Keys.dead, try job("Wrapped", [.object(["arguments": .array([.object(["user": .string(a)])])])])),  // nested
        ]
        let otherJobs = [
            (Keys.schedule, try job("GeocodeLocationJob", [.object(["user_id": .string(b)])])),
            (Keys.retry, try job("ValidateReceiptJob", [.object(["user_id": .string(b)])])),
            (Keys.dead, try job("Noop", [])),
        ]
        for (key, member) in aliceJobs + otherJobs { try fixture.redis.command("ZADD", key, later, member) }
        let queued = try job("SendNotificationJob", [.object(["user_id": .string(a)])])
        let queuedOther = try job("SendNotificationJob", [.object(["user_id": .string(b)])])
        try fixture.redis.command("SADD", Keys.queues, "default")
        try fixture.redis.command("LPUSH", Keys.queue("default"), queued, queuedOther)

        try fixture.runDeletion(user: alice.id, request: request)

        for key in [Keys.schedule, Keys.retry, Keys.dead] {
            let members = try fixture.redis.command("ZRANGE", key, 0, -1).strings
            XCTAssertEqual(Set(members), Set(otherJobs.filter { $0.0 == key }.map(\.1)), key)
        }
        XCTAssertEqual(try fixture.redis.command("LRANGE", Keys.queue("default"), 0, -1).strings, [queuedOther])
    }

    /// Erasure through a real worker reaches every job naming the user by id OR by e-mail address (a mail job
    /// carrying only the address, in another letter case), in a queue, `schedule`, `retry`, `dead` and the
    /// in-flight list of a dead process; other users' jobs stay; a live process's running job is not touched
    /// (docs/jobs-privacy.md). Afterwards neither Redis nor PostgreSQL holds the address or (outside that
    /// running job) the user id: the deletion job's own record included.
    func testErasureReachesJobsByIdOrEmailWhereverTheySitAndLeavesNoPersonalData() throws {
        let alice = try PrivacySeed.user(fixture, label: "zqalice")
        let bob = try PrivacySeed.user(fixture, label: "zqbob")
        let request = try PrivacySeed.deletionRequest(fixture, user: alice, scheduledIn: -60)
        let a = alice.id.uuidString.lowercased()
        // The jobs sit on queue "mail", which the worker does not serve, so none of them runs meanwhile.
        func job(_ cls: String, _ args: [JSONValue]) throws -> String {
            var payload = try fixture.payload(cls, args: args)
            payload.fields["queue"] = "mail"
            return payload.serialized()
        }
        let later = Clock.now() + 3600
        let deadProcess = Keys.working(queue: "mail", identity: "gone:999:0123456789ab")      // no heartbeat
        let liveProcess = Keys.working(queue: "mail", identity: "live:1:0123456789ab")
        try fixture.redis.command("SET", Keys.fetcherHeartbeat(identity: "live:1:0123456789ab"), "1", "EX", 3600)
        let aliceJobs: [(String, String)] = [
            (Keys.queue("mail"), try job("SendMailJob", [.object(["to": .string("Alice <\(alice.email.uppercased())>")])])),
            (Keys.schedule, try job("SendMailJob", [.object(["to": .string(alice.email)])])),
            (Keys.retry, try job("ValidateReceiptJob", [.object(["user_id": .string(a)])])),
            (Keys.dead, try job("SendMailJob", [.object(["message": .object(["rcpt": .array([.string(alice.email)])])])])),
            (deadProcess, try job("SendMailJob", [.string(alice.email), .string("subject")])),
            (deadProcess, try job("RewardJob", [.string(a)])),
        ]
        let otherJobs: [(String, String)] = [
            (Keys.queue("mail"), try job("SendMailJob", [.object(["to": .string(bob.email)])])),
            (Keys.schedule, try job("SendMailJob", [.object(["to": .string(bob.email)])])),
            (Keys.retry, try job("ValidateReceiptJob", [.object(["user_id": .string(bob.id.uuidString.lowercased())])])),
            (Keys.dead, try job("SendMailJob", [.object(["to": .string(bob.email.uppercased())])])),
            (deadProcess, try job("SendMailJob", [.string(bob.email)])),
        ]
        let running = try job("SendMailJob", [.object(["to": .string(alice.email)])])
        try fixture.redis.command("SADD", Keys.queues, "mail")
        for (key, member) in aliceJobs + otherJobs {
            if key.hasPrefix("queue:") || key.hasPrefix("working:") {
                try fixture.redis.command("LPUSH", key, member)
            } else {
                try fixture.redis.command("ZADD", key, later, member)
            }
        }
        try fixture.redis.command("LPUSH", liveProcess, running)

        try fixture.redis.client.enqueue(PrivacyJobs.deletionJob(userID: alice.id, requestID: request))
        let worker = try fixture.startWorker(concurrency: 1)
        defer { worker.shutdown() }
        XCTAssertTrue(try eventually { try fixture.redis.processed() == 1 })
        XCTAssertEqual(try fixture.redis.failed(), 0)

        // Every job of alice is gone, every other job is still somewhere (by jid: the orphan sweep may have moved
        // the dead process's jobs to their queue, with interrupted_count + 1).
        func contents() throws -> [String: [String]] {
            var members: [String: [String]] = [:]
            for key in try fixture.redis.command("KEYS", "*").strings {
                switch try fixture.redis.command("TYPE", key).string {
                case "list": members[key] = try fixture.redis.command("LRANGE", key, 0, -1).strings
                case "zset": members[key] = try fixture.redis.command("ZRANGE", key, 0, -1).strings
                case "hash": members[key] = try fixture.redis.command("HGETALL", key).strings
                case "string": members[key] = [try fixture.redis.command("GET", key).string ?? ""]
                case "set": members[key] = try fixture.redis.command("SMEMBERS", key).strings
                default: continue
                }
            }
            return members
        }
        /// Keys (other than the live process's list) whose contents name alice by address or id.
        func traces() throws -> [String] {
            try contents().filter { key, values in
                key != liveProcess && values.contains {
                    $0.lowercased().contains(alice.email.lowercased()) || $0.lowercased().contains(a)
                }
            }.map(\.key).sorted()
        }
        // The worker clears its own record of the running deletion job (`<identity>:workers`) just after the count.
        XCTAssertTrue(try eventually { try traces().isEmpty }, "still naming alice: \((try? traces()) ?? [])")
        let members = try contents()
        let jids = Set(members.values.flatMap { $0 }.compactMap { try? JobPayload(parsing: Array($0.utf8)).jid })
        func jid(_ member: String) throws -> String { try XCTUnwrap(try JobPayload(parsing: Array(member.utf8)).jid) }
        for (key, job) in aliceJobs { XCTAssertFalse(jids.contains(try jid(job)), "alice's job from \(key) survived") }
        for (key, job) in otherJobs { XCTAssertTrue(jids.contains(try jid(job)), "another user's job from \(key) is gone") }
        XCTAssertEqual(members[liveProcess], [running], "a running job of a live process is left to finish")
        // PostgreSQL: the address kept for the purge is gone with it; the audit entry holds ids and counts only.
        XCTAssertEqual(try fixture.count("SELECT count(*) AS n FROM deletion_requests WHERE purge_email IS NOT NULL"), 0)
        XCTAssertEqual(try tablesContaining(alice.email), [])
        XCTAssertEqual(try tablesContaining(alice.email.uppercased()), [])
    }

    /// The purger on its own (no worker, so no orphan sweep moves anything meanwhile): the in-flight list of a
    /// dead process (heartbeat expired) is cleaned of the user's jobs, a live process's list is not touched.
    func testPurgerReachesInFlightListsOfDeadProcessesOnly() throws {
        let user = UUID(), email = "Someone.Else+tag@Example.org"
        let byID = try fixture.payload("RewardJob", args: [.string(user.uuidString.lowercased())]).serialized()
        let byMail = try fixture.payload("SendMailJob", args: [.object(["to": .string(email.uppercased())])]).serialized()
        let other = try fixture.payload("SendMailJob", args: [.object(["to": "x.someone.else+tag@example.org"])]).serialized()
        let dead = Keys.working(queue: "default", identity: "gone:7:00aa11bb22cc")
        let live = Keys.working(queue: "default", identity: "live:8:00aa11bb22cd")
        try fixture.redis.command("SET", Keys.fetcherHeartbeat(identity: "live:8:00aa11bb22cd"), "1", "EX", 3600)
        try fixture.redis.command("RPUSH", dead, byID, other, byMail)
        try fixture.redis.command("RPUSH", live, byID, byMail)

        let report = try RedisJobPurger(pool: fixture.redis.pool).purge(userID: user, email: email)

        XCTAssertEqual(try fixture.redis.command("LRANGE", dead, 0, -1).strings, [other])
        XCTAssertEqual(try fixture.redis.command("LRANGE", live, 0, -1).strings, [byID, byMail])
        XCTAssertEqual(report.removedByKey, [dead: 2])
    }

    /// A purged job releases the unique lock it owns (docs/unique-jobs.md); another user's job keeps its own.
    func testPurgerReleasesTheUniqueLocksOfTheJobsItRemoves() throws {
        let user = UUID(), stranger = UUID()
        let policy = UniquePolicy(for: .seconds(600))
        let mine = try fixture.redis.client.enqueueUnique(NewJob("RewardJob", args: [.string(user.uuidString.lowercased())]),
                                                          policy: policy, at: Clock.now() + 3600).jid
        let theirs = try fixture.redis.client.enqueueUnique(NewJob("RewardJob", args: [.string(stranger.uuidString.lowercased())]),
                                                            policy: policy).jid
        let report = try RedisJobPurger(pool: fixture.redis.pool).purge(userID: user)
        XCTAssertEqual(report.removedByKey, [Keys.schedule: 1])
        let locks = try fixture.redis.pool.withConnection { try UniqueAdmin(connection: $0).list().map(\.jid) }
        XCTAssertEqual(locks, [theirs], "the purged job's lock (\(mine)) is released, the other one kept")
        XCTAssertEqual(try fixture.redis.int("EXISTS", Keys.uniqueOwner(mine)), 0)
    }

    /// The purge needs the address after the commit, when `users.email` is already gone: the transaction keeps
    /// it in `deletion_requests.purge_email` until a purge succeeds (a run that dies in between finds it again).
    func testAddressKeptForThePurgeSurvivesACrashAfterTheCommit() throws {
        let alice = try PrivacySeed.user(fixture, label: "zqalice")
        let request = try PrivacySeed.deletionRequest(fixture, user: alice, scheduledIn: -60)
        // The anonymisation transaction alone, as a run that crashed right after its commit leaves it.
        try fixture.pool.withConnection { conn in
            try conn.transaction { tx in
                _ = try AccountAnonymizer().run(requestID: request, userID: alice.id, jid: "crashed", conn: tx)
            }
        }
        XCTAssertEqual(try fixture.sql("SELECT purge_email FROM deletion_requests WHERE id = $1", [request]).first?
            .optionalString("purge_email"), alice.email)
        XCTAssertEqual(try fixture.count("SELECT count(*) AS n FROM users WHERE id = $1 AND email IS NULL", [alice.id]), 1)
        let mail = try fixture.payload("SendMailJob", args: [.object(["to": .string(alice.email)])]).serialized()
        try fixture.redis.command("ZADD", Keys.retry, Clock.now() + 3600, mail)

        // The redelivery, through a real worker: the purge still finds the mail job by its address.
        try fixture.redis.client.enqueue(PrivacyJobs.deletionJob(userID: alice.id, requestID: request))
        let worker = try fixture.startWorker(concurrency: 1)
        defer { worker.shutdown() }
        XCTAssertTrue(try eventually { try fixture.redis.processed() == 1 })
        XCTAssertEqual(try fixture.redis.int("ZCARD", Keys.retry), 0, "the mail job carrying only the address is purged")
        XCTAssertEqual(try fixture.count("SELECT count(*) AS n FROM deletion_requests WHERE purge_email IS NOT NULL"), 0)
    }

    // MARK: - Re-check at run time

    func testCancelledRequestIsANoOp() throws {
        let alice = try PrivacySeed.user(fixture, label: "zqalice")
        let request = try PrivacySeed.deletionRequest(fixture, user: alice, scheduledIn: -60)
        // Cancelled before it became due (the Auth Service clears the flag and stamps the request).
        try fixture.sql("UPDATE users SET delete_requested = false, delete_scheduled_at = NULL WHERE id = $1", [alice.id])
        try fixture.sql("UPDATE deletion_requests SET cancelled_at = scheduled_at - interval '1 day' WHERE id = $1", [request])
        let before = try fixture.snapshot()
        try fixture.runDeletion(user: alice.id, request: request)
        XCTAssertEqual(try fixture.snapshot(), before)
    }

    func testCancelledOnlyOnTheUserFlagIsANoOp() throws {
        let alice = try PrivacySeed.user(fixture, label: "zqalice")
        let request = try PrivacySeed.deletionRequest(fixture, user: alice, scheduledIn: -60)
        try fixture.sql("UPDATE users SET delete_requested = false WHERE id = $1", [alice.id])
        let before = try fixture.snapshot()
        try fixture.runDeletion(user: alice.id, request: request)
        XCTAssertEqual(try fixture.snapshot(), before)
    }

    func testRequestNotYetDueIsANoOp() throws {
        let alice = try PrivacySeed.user(fixture, label: "zqalice")
        let request = try PrivacySeed.deletionRequest(fixture, user: alice, scheduledIn: 3600)
        let before = try fixture.snapshot()
        try fixture.runDeletion(user: alice.id, request: request)
        XCTAssertEqual(try fixture.snapshot(), before)
    }

    func testBadInputGoesDeadWithReadableReason() throws {
        let alice = try PrivacySeed.user(fixture, label: "zqalice")
        let bob = try PrivacySeed.user(fixture, label: "zqbob")
        let request = try PrivacySeed.deletionRequest(fixture, user: alice, scheduledIn: -60)
        XCTAssertThrowsError(try fixture.run(fixture.payload(AccountDeletionJob.className,
                                                             args: [.object(["user_id": .string(alice.id.uuidString)])]))) {
            Failure.settled($0, in: .dead, errorClass: "BadInput",
                            messagePrefix: "arguments do not fit \(AccountDeletionJob.className): ", containing: ["request_id"])
        }
        XCTAssertThrowsError(try fixture.runDeletion(user: alice.id, request: UUID())) {
            Failure.settled($0, in: .dead, errorClass: "BadInput", messagePrefix: "bad input: ", containing: ["does not exist"])
        }
        XCTAssertThrowsError(try fixture.runDeletion(user: bob.id, request: request)) {
            Failure.settled($0, in: .dead, errorClass: "BadInput", messagePrefix: "bad input: ", containing: ["another user"])
        }
        XCTAssertEqual(try fixture.count("SELECT count(*) AS n FROM users WHERE anonymized_at IS NOT NULL"), 0)
    }

    /// A table added later that references users without a policy: the deletion refuses and changes nothing.
    func testUnknownReferenceToUsersRefusesToDelete() throws {
        let alice = try PrivacySeed.user(fixture, label: "zqalice")
        let request = try PrivacySeed.deletionRequest(fixture, user: alice, scheduledIn: -60)
        try fixture.sql("CREATE TABLE nicknames (user_id uuid REFERENCES users (id), nickname text)")
        defer { _ = try? fixture.sql("DROP TABLE nicknames") }
        let before = try fixture.snapshot()
        XCTAssertThrowsError(try fixture.runDeletion(user: alice.id, request: request)) {
            // DeletionPolicyError.uncovered(["nicknames.user_id"]): exactly that reference, retried until a policy exists.
            Failure.settled($0, in: .retry, errorClass: Failure.className(of: DeletionPolicyError.self),
                            messagePrefix: "no deletion policy for nicknames.user_id: ")
        }
        XCTAssertEqual(try fixture.snapshot(), before)
    }

    // MARK: - Idempotency

    func testRunningTwiceChangesNothingMore() throws {
        let alice = try PrivacySeed.user(fixture, label: "zqalice")
        let request = try PrivacySeed.deletionRequest(fixture, user: alice, scheduledIn: -60)
        try fixture.runDeletion(user: alice.id, request: request)
        let after = try fixture.snapshot()
        try fixture.runDeletion(user: alice.id, request: request)                  // another jid
        XCTAssertEqual(try fixture.snapshot(), after)
        XCTAssertEqual(try fixture.count("SELECT count(*) AS n FROM audit_logs WHERE action = 'account_deleted'"), 1)
    }

    /// The job committed, then the worker died before acknowledging: the orphan sweep redelivers it to a live
    /// worker, which acknowledges without changing anything (and still purges Redis).
    func testCrashBetweenCommitAndAcknowledge() throws {
        let alice = try PrivacySeed.user(fixture, label: "zqalice")
        let request = try PrivacySeed.deletionRequest(fixture, user: alice, scheduledIn: -60)
        let payload = try fixture.payload(AccountDeletionJob.className,
                                          args: PrivacyJobs.deletionJob(userID: alice.id, requestID: request).args)
        try fixture.run(payload)                                                    // committed...
        let after = try fixture.snapshot()
        // ...but never acknowledged: still in the dead process's in-flight list. Meanwhile a job for the user landed.
        try fixture.redis.command("LPUSH", Keys.working(queue: "default", identity: "gone:999:0123456789ab"), payload.serialized())
        let straggler = try fixture.payload("SendNotificationJob", args: [.object(["user_id": .string(alice.id.uuidString.lowercased())])])
        try fixture.redis.command("ZADD", Keys.retry, Clock.now() + 3600, straggler.serialized())

        let worker = try fixture.startWorker()
        defer { worker.shutdown() }
        XCTAssertTrue(try eventually { try fixture.redis.processed() == 1 })
        XCTAssertEqual(try fixture.snapshot(), after)
        XCTAssertEqual(try fixture.redis.int("ZCARD", Keys.dead), 0)
        XCTAssertEqual(try fixture.redis.int("ZCARD", Keys.retry), 0, "the redelivered run purged the straggler")
        XCTAssertEqual(try fixture.count("SELECT count(*) AS n FROM audit_logs WHERE action = 'account_deleted'"), 1)
        XCTAssertTrue(try eventually { try fixture.redis.workingKeys().isEmpty })
    }

    // MARK: - Scheduling and the sweep

    /// L9, GDPR Art. 12(3) "within one month": the deletion is scheduled on the same calendar day of the next month
    /// (the month's last day when it has none), minus the 2-day margin, in UTC. Fixed dates: 31 Jan → 26 Feb
    /// (28 Feb − 2 d; 27 Feb in the leap year 2028), 15 Mar → 13 Apr, 31 Dec → 29 Jan.
    func testScheduleDeletionEnqueuesWithinOneMonthOfTheRequest() throws {
        func utc(_ text: String) throws -> Date { try XCTUnwrap(ISO8601DateFormatter().date(from: text), text) }
        let cases = [("2027-01-31T10:00:00Z", "2027-02-26T10:00:00Z"), ("2028-01-31T10:00:00Z", "2028-02-27T10:00:00Z"),
                     ("2027-03-15T23:30:00Z", "2027-04-13T23:30:00Z"), ("2027-12-31T00:00:00Z", "2028-01-29T00:00:00Z")]
        XCTAssertEqual(PrivacyJobs.deletionMargin, 2 * 86_400)
        for (requested, expected) in cases {
            try fixture.redis.flush()
            let user = UUID(), request = UUID()
            let jid = try PrivacyJobs.scheduleDeletion(client: fixture.redis.client, userID: user, requestID: request,
                                                       requestedAt: try utc(requested))
            let scheduled = try fixture.redis.payloads(zset: Keys.schedule)
            XCTAssertEqual(scheduled.count, 1)
            XCTAssertEqual(scheduled.first?.jid, jid)
            XCTAssertEqual(scheduled.first?.className, "AccountDeletionJob")
            // The typed arguments' encoding (keys sorted: `JobArguments.sidekiqArgs()`).
            XCTAssertEqual(scheduled.first?.args, [.object(["request_id": .string(request.uuidString.lowercased()),
                                                            "user_id": .string(user.uuidString.lowercased())])])
            let score = try XCTUnwrap(fixture.redis.command("ZSCORE", Keys.schedule, scheduled[0].serialized()).double)
            XCTAssertEqual(score, try utc(expected).timeIntervalSince1970, accuracy: 0.001, "requested \(requested)")
        }
    }

    func testSweepEnqueuesDueRequestsWithoutAPendingJob() throws {
        var users: [SeededUser] = []
        for label in ["zqa", "zqb", "zqc", "zqd", "zqe", "zqf", "zqg", "zqh"] {
            users.append(try PrivacySeed.user(fixture, label: label))
        }
        let dueNoJob = try PrivacySeed.deletionRequest(fixture, user: users[0], scheduledIn: -60)
        let dueScheduled = try PrivacySeed.deletionRequest(fixture, user: users[1], scheduledIn: -60)
        let dueQueued = try PrivacySeed.deletionRequest(fixture, user: users[2], scheduledIn: -60)
        let dueRunning = try PrivacySeed.deletionRequest(fixture, user: users[3], scheduledIn: -60)
        let cancelled = try PrivacySeed.deletionRequest(fixture, user: users[4], scheduledIn: -60)
        try fixture.sql("UPDATE deletion_requests SET cancelled_at = now() WHERE id = $1", [cancelled])
        try fixture.sql("UPDATE users SET delete_requested = false WHERE id = $1", [users[4].id])
        _ = try PrivacySeed.deletionRequest(fixture, user: users[5], scheduledIn: 3600)            // not due
        let completed = try PrivacySeed.deletionRequest(fixture, user: users[6], scheduledIn: -60)
        try fixture.runDeletion(user: users[6].id, request: completed)
        let dueDead = try PrivacySeed.deletionRequest(fixture, user: users[7], scheduledIn: -60)

        let client = fixture.redis.client
        try client.enqueue(PrivacyJobs.deletionJob(userID: users[1].id, requestID: dueScheduled), at: Clock.now() + 3600)
        try client.enqueue(PrivacyJobs.deletionJob(userID: users[2].id, requestID: dueQueued))
        let running = try fixture.payload(AccountDeletionJob.className,
                                          args: PrivacyJobs.deletionJob(userID: users[3].id, requestID: dueRunning).args)
        try fixture.redis.command("LPUSH", Keys.working(queue: "default", identity: "host:1:0123456789ab"), running.serialized())
        let dead = try fixture.payload(AccountDeletionJob.className,
                                       args: PrivacyJobs.deletionJob(userID: users[7].id, requestID: dueDead).args)
        try fixture.redis.command("ZADD", Keys.dead, Clock.now(), dead.serialized())

        try fixture.run(fixture.payload(DueDeletionSweepJob.className, args: []))

        let enqueued = try fixture.redis.payloads(list: Keys.queue("default"))
            .filter { $0.className == AccountDeletionJob.className }
            .compactMap { $0.args.first?.objectValue?["request_id"]?.stringValue }
        XCTAssertEqual(Set(enqueued), Set([dueQueued, dueNoJob, dueDead].map { $0.uuidString.lowercased() }))
        XCTAssertEqual(enqueued.count, 3)

        // A second sweep finds every due request pending now: nothing more.
        try fixture.run(fixture.payload(DueDeletionSweepJob.className, args: []))
        XCTAssertEqual(try fixture.redis.int("LLEN", Keys.queue("default")), 3)
    }
}
