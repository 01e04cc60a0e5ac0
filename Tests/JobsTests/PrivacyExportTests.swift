import Foundation
@testable import WorkersAppJobs
import Logging
import WorkersMail
import WorkersQueue
import WorkersStorage
import WorkersTestServices
import Workers
import XCTest

/// PrivacyExportJob and ExportCleanupJob against real PostgreSQL, Redis db 30 and a fake SMTP server.
final class PrivacyExportTests: PrivacyTestCase {
    override func makeFixture() throws -> PrivacyFixture { try PrivacyFixture(prefix: "privacy_export_test", redisDatabase: 30) }

    private func document(_ export: UUID) throws -> (text: String, json: [String: Any]) {
        let path = fixture.directory.appendingPathComponent("\(export.uuidString.lowercased()).json").path
        let data = try Data(contentsOf: URL(fileURLWithPath: path))
        let json = try XCTUnwrap(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        return (String(decoding: data, as: UTF8.self), json)
    }

    // MARK: - Content

    func testExportHasEverySectionWithThisUsersDataOnlyAndNoSecrets() throws {
        let appID = UUID()
        let alice = try PrivacySeed.user(fixture, label: "zqalice", appID: appID)
        let bob = try PrivacySeed.user(fixture, label: "zqbob", appID: appID)
        let export = try PrivacySeed.export(fixture, user: alice)
        _ = try PrivacySeed.export(fixture, user: bob)

        try fixture.runExport(user: alice.id, export: export)

        let (text, json) = try document(export)
        XCTAssertEqual(json["schema_version"] as? Int, 2)
        XCTAssertEqual(json["export_id"] as? String, export.uuidString.lowercased())
        XCTAssertEqual(json["user_id"] as? String, alice.id.uuidString.lowercased())
        XCTAssertNotNil((json["generated_at"] as? String).flatMap { ISO8601DateFormatter().date(from: $0) })
        let sections = try XCTUnwrap(json["sections"] as? [String: Any])
        XCTAssertEqual(Set(sections.keys), Set(ExportSchema.sections.map(\.name)))
        func list(_ name: String) -> [[String: Any]] { sections[name] as? [[String: Any]] ?? [] }

        let profile = try XCTUnwrap(sections["profile"] as? [String: Any])
        XCTAssertEqual(profile["email"] as? String, alice.email)
        XCTAssertEqual(profile["first_name"] as? String, alice.firstName)
        XCTAssertEqual(profile["google_id"] as? String, alice.googleID)
        XCTAssertNil(profile["password_hash"])
        XCTAssertNil(profile["delete_cancellation_token"])
        XCTAssertEqual((sections["privacy_settings"] as? [String: Any])?["consent_geolocation"] as? Bool, true)
        XCTAssertEqual(list("oauth_connections").map { $0["provider_user_id"] as? String }, [alice.googleID])
        XCTAssertEqual(Set(list("oauth_connections").first?.keys.map { $0 } ?? []),
                       ["provider", "provider_user_id", "profile_data", "connected_at"])
        XCTAssertEqual(list("game_center_connections").first?["alias"] as? String, alice.alias)
        XCTAssertEqual((list("sessions").first?["device_info"] as? [String: Any])?["model"] as? String, alice.device)
        XCTAssertNil(list("sessions").first?["token_hash"])
        XCTAssertEqual(list("subscriptions").map { $0["store_transaction_id"] as? String }, [alice.transactionID])
        XCTAssertNil(list("subscriptions").first?["store_receipt"])
        XCTAssertEqual(list("subscription_events").map { $0["event_type"] as? String }, ["subscription_started"])
        XCTAssertEqual(list("receipts").map { $0["transaction_id"] as? String }, [alice.transactionID])
        XCTAssertNil(list("receipts").first?["receipt_data"])
        XCTAssertEqual(list("credit_transactions").map { $0["amount"] as? Int }, [5])
        XCTAssertEqual(list("pending_rewards").map { $0["reference"] as? String }, ["pr-zqalice"])
        XCTAssertEqual(list("campaign_participations").map { $0["campaign"] as? String }, ["campaign-zqalice"])
        XCTAssertEqual(list("quiz_history").count, 3)
        XCTAssertEqual(list("achievements").map { $0["achievement_id"] as? String }, ["ach-zqalice"])
        XCTAssertEqual(list("locations").first?["city"] as? String, alice.city)
        XCTAssertEqual(list("locations").first?["latitude"] as? Double, 48.8566)
        XCTAssertEqual(list("notifications").map { $0["title"] as? String }, ["Hi Firstzqalice"])
        XCTAssertEqual(list("ad_requests").map { $0["placement"] as? String }, ["place-zqalice"])
        XCTAssertEqual(list("ad_views").map { $0["placement"] as? String }, ["place-zqalice"])
        XCTAssertEqual(list("audit_log").map { $0["ip_address"] as? String }, [alice.ipAddress])
        XCTAssertEqual(list("privacy_exports").map { $0["id"] as? String }, [export.uuidString.lowercased()])
        XCTAssertEqual(list("deletion_requests").count, 0)

        // Nothing from the other user, no secret of either.
        XCTAssertFalse(text.contains("zqbob"), "another user's data leaked into the export")
        XCTAssertFalse(text.contains(bob.id.uuidString.lowercased()))
        for secret in alice.secrets { XCTAssertFalse(text.contains(secret), "secret in export: \(secret)") }
    }

    func testExportFileIsOwnerOnlyAtomicAndRowReadyWithSevenDayLink() throws {
        let alice = try PrivacySeed.user(fixture, label: "zqalice")
        let export = try PrivacySeed.export(fixture, user: alice)
        let before = Date()
        try fixture.runExport(user: alice.id, export: export)

        let path = fixture.directory.appendingPathComponent("\(export.uuidString.lowercased()).json").path
        let fileMode = try XCTUnwrap(FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int)
        XCTAssertEqual(fileMode & 0o777, 0o600)
        let dirMode = try XCTUnwrap(FileManager.default.attributesOfItem(atPath: fixture.directory.path)[.posixPermissions] as? Int)
        XCTAssertEqual(dirMode & 0o777, 0o700)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: fixture.directory.path),
                       ["\(export.uuidString.lowercased()).json"], "no temporary file may remain")

        let row = try XCTUnwrap(fixture.sql("SELECT * FROM privacy_exports WHERE id = $1", [export]).first)
        XCTAssertEqual(try row.string("status"), "ready")
        XCTAssertEqual(try row.int("schema_version"), 2)
        XCTAssertEqual(try row.string("file_path"), path)
        XCTAssertEqual(try row.int64("size_bytes"), Int64(try Data(contentsOf: URL(fileURLWithPath: path)).count))
        let expires = try row.date("expires_at")
        XCTAssertEqual(expires.timeIntervalSince(before), 7 * 86400, accuracy: 60)
        let url = try row.string("url")
        XCTAssertTrue(url.hasPrefix(PrivacyFixture.urlBase + "/\(export.uuidString.lowercased()).json?expires="))
        XCTAssertEqual(fixture.signer.verify(url: url, now: Date()), .valid)
        XCTAssertEqual(fixture.signer.verify(url: url, now: expires.addingTimeInterval(-1)), .valid)
        XCTAssertEqual(fixture.signer.verify(url: url, now: expires), .expired)
    }

    // MARK: - Mail

    func testEmailSentOnceWithLinkAndStableMessageIDWhenRunTwice() throws {
        let alice = try PrivacySeed.user(fixture, label: "zqalice")
        let export = try PrivacySeed.export(fixture, user: alice)
        let jid = Identifiers.jid()
        try fixture.runExport(user: alice.id, export: export, jid: jid)
        let firstURL = try fixture.sql("SELECT url FROM privacy_exports WHERE id = $1", [export]).first!.string("url")
        try fixture.runExport(user: alice.id, export: export, jid: jid)                 // redelivery
        try fixture.runExport(user: alice.id, export: export)                           // enqueued twice

        let mails = try fixture.mails()
        XCTAssertEqual(mails.count, 1)
        let mail = try XCTUnwrap(mails.first)
        XCTAssertEqual(mail.message.rcptTo, [alice.email])
        XCTAssertEqual(mail.message.mailFrom, "privacy@example.test")
        XCTAssertEqual(mail.message.subject, "Your data export is ready")
        XCTAssertEqual(mail.links, [firstURL])
        XCTAssertEqual(mail.message.messageID, "<privacy-export.\(export.uuidString.lowercased())@example.test>")
        let row = try XCTUnwrap(fixture.sql("SELECT * FROM privacy_exports WHERE id = $1", [export]).first)
        XCTAssertEqual(try row.string("url"), firstURL, "a rerun keeps the same link")
        XCTAssertNotNil(try row.optionalDate("email_intent_at"))
        XCTAssertNotNil(try row.optionalDate("email_sent_at"))
        XCTAssertEqual(try row.optionalString("email_message_id"), mail.message.messageID)
    }

    /// The crash window: the server accepted the mail, the process died before recording it. After the claim's
    /// lease the next run sends again, the same message (same Message-ID): the system errs towards a duplicate.
    func testCrashBetweenSendingAndRecordingResendsTheSameMessage() throws {
        let alice = try PrivacySeed.user(fixture, label: "zqalice")
        let export = try PrivacySeed.export(fixture, user: alice)
        try fixture.runExport(user: alice.id, export: export)
        try fixture.sql("""
            UPDATE privacy_exports SET email_sent_at = NULL, email_intent_at = now() - interval '1 hour' WHERE id = $1
            """, [export])
        try fixture.runExport(user: alice.id, export: export)
        let mails = try fixture.mails()
        XCTAssertEqual(mails.count, 2)
        XCTAssertEqual(mails[0].message.messageID, mails[1].message.messageID)
        XCTAssertEqual(mails[0].message.header("Date"), mails[1].message.header("Date"))
        XCTAssertEqual(mails[0].links, mails[1].links)
    }

    /// Another run holds a fresh claim (sending right now, or crashed seconds ago): defer, do not send.
    func testFreshClaimByAnotherRunDefersWithRetryAfter() throws {
        let alice = try PrivacySeed.user(fixture, label: "zqalice")
        let export = try PrivacySeed.export(fixture, user: alice)
        try fixture.runExport(user: alice.id, export: export)
        try fixture.sql("UPDATE privacy_exports SET email_sent_at = NULL, email_intent_at = now() WHERE id = $1", [export])
        XCTAssertThrowsError(try fixture.runExport(user: alice.id, export: export)) { Failure.isRetryAfter($0, atLeast: 120) }
        XCTAssertEqual(try fixture.mails().count, 1)
    }

    func testTransientSMTPFailureIsRetriedThenMailedOnce() throws {
        let alice = try PrivacySeed.user(fixture, label: "zqalice")
        let export = try PrivacySeed.export(fixture, user: alice)
        try fixture.fakes.script(.smtp, ["match": ["stage": "rcpt"], "status": 451, "message": "try later"])
        XCTAssertThrowsError(try fixture.runExport(user: alice.id, export: export)) {
            // A 4xx is retried with backoff: the mail error, not bad input or a permanent failure; no address in it.
            Failure.settled($0, in: .retry, errorClass: Failure.className(of: ExportMailError.self),
                            messagePrefix: "export mail not delivered yet: ", containing: ["451"], lacking: [alice.email])
        }
        let row = try XCTUnwrap(fixture.sql("SELECT * FROM privacy_exports WHERE id = $1", [export]).first)
        XCTAssertEqual(try row.string("status"), "ready", "the export itself is done")
        XCTAssertNil(try row.optionalDate("email_intent_at"), "a failed session releases its claim")
        XCTAssertEqual(try fixture.mails().count, 0)

        try fixture.runExport(user: alice.id, export: export)
        XCTAssertEqual(try fixture.mails().count, 1)
        XCTAssertNotNil(try fixture.sql("SELECT email_sent_at FROM privacy_exports WHERE id = $1", [export])
            .first!.optionalDate("email_sent_at"))
    }

    func testSMTPTimeoutIsRetried() throws {
        let alice = try PrivacySeed.user(fixture, label: "zqalice")
        let export = try PrivacySeed.export(fixture, user: alice)
        try fixture.fakes.script(.smtp, ["match": ["stage": "data"], "hang": true, "delay": 30])
        XCTAssertThrowsError(try fixture.runExport(user: alice.id, export: export)) {
            Failure.settled($0, in: .retry, errorClass: Failure.className(of: ExportMailError.self),
                            messagePrefix: "export mail not delivered yet: ")
        }
        try fixture.fakes.reset(.smtp)
        try fixture.runExport(user: alice.id, export: export)
        XCTAssertEqual(try fixture.mails().count, 1)
    }

    func testPermanentSMTPRejectionGoesDeadWithReasonAndNoAddress() throws {
        let alice = try PrivacySeed.user(fixture, label: "zqalice")
        let export = try PrivacySeed.export(fixture, user: alice)
        try fixture.fakes.script(.smtp, ["match": ["stage": "rcpt"], "status": 550, "message": "no such user"])
        XCTAssertThrowsError(try fixture.runExport(user: alice.id, export: export)) {
            Failure.settled($0, in: .dead, errorClass: "PermanentFailure", containing: ["550"], lacking: [alice.email])
        }
        let error = try fixture.sql("SELECT error FROM privacy_exports WHERE id = $1", [export]).first!.optionalString("error")
        XCTAssertTrue(error?.contains("550") == true, "\(error ?? "nil")")
    }

    func testUserWithoutEmailGetsReadyExportButNoMail() throws {
        let alice = try PrivacySeed.user(fixture, label: "zqalice")
        try fixture.sql("UPDATE users SET email = NULL WHERE id = $1", [alice.id])
        let export = try PrivacySeed.export(fixture, user: alice)
        try fixture.runExport(user: alice.id, export: export)
        let row = try XCTUnwrap(fixture.sql("SELECT * FROM privacy_exports WHERE id = $1", [export]).first)
        XCTAssertEqual(try row.string("status"), "ready")
        XCTAssertEqual(try row.optionalString("error"), "no email address on file: link not mailed")
        XCTAssertEqual(try fixture.mails().count, 0)
    }

    /// `SMTP_SECURITY=starttls` demands STARTTLS: the fake does not offer it, so nothing goes out in clear text.
    func testRequiredSTARTTLSNotOfferedRefusesToSendInClear() throws {
        let tls = try PrivacyFixture(prefix: "privacy_tls_test", redisDatabase: 31, security: .startTLS)
        defer { tls.tearDown() }
        let alice = try PrivacySeed.user(tls, label: "zqalice")
        let export = try PrivacySeed.export(tls, user: alice)
        XCTAssertThrowsError(try tls.runExport(user: alice.id, export: export)) {
            Failure.settled($0, in: .dead, errorClass: "PermanentFailure", containing: ["TLS"])
        }
        XCTAssertEqual(try tls.mails().count, 0)
    }

    /// The account was erased before the export ran: no file is written, no mail goes out.
    func testExportOfAnAnonymisedUserDoesNothing() throws {
        let alice = try PrivacySeed.user(fixture, label: "zqalice")
        let export = try PrivacySeed.export(fixture, user: alice)
        try fixture.sql("UPDATE users SET anonymized_at = now(), email = NULL WHERE id = $1", [alice.id])
        try fixture.runExport(user: alice.id, export: export)
        XCTAssertFalse(FileManager.default.fileExists(atPath: ExportFileStore(directory: fixture.directory)
            .finalPath(exportID: export)))
        XCTAssertEqual(try fixture.sql("SELECT status FROM privacy_exports WHERE id = $1", [export]).first!.string("status"),
                       "pending")
        XCTAssertEqual(try fixture.mails().count, 0)
    }

    // MARK: - Bad input

    func testBadInputGoesDeadWithReadableReason() throws {
        let alice = try PrivacySeed.user(fixture, label: "zqalice")
        let bob = try PrivacySeed.user(fixture, label: "zqbob")
        let export = try PrivacySeed.export(fixture, user: alice)

        XCTAssertThrowsError(try fixture.run(fixture.payload(PrivacyExportJob.className,
                                                             args: [.object(["user_id": "someone@example.com", "export_id": "x"])]))) {
            // An e-mail address sent where the id belongs: the reason names the field, never the value.
            Failure.settled($0, in: .dead, errorClass: "BadInput",
                            messagePrefix: "invalid arguments for \(PrivacyExportJob.className): ", containing: ["user_id must be a UUID"],
                            lacking: ["someone@example.com", "example.com"])
        }
        XCTAssertThrowsError(try fixture.run(fixture.payload(PrivacyExportJob.className, args: [.object(["user_id": "x"])]))) {
            Failure.settled($0, in: .dead, errorClass: "BadInput",
                            messagePrefix: "arguments do not fit \(PrivacyExportJob.className): ", containing: ["export_id"])
        }
        XCTAssertThrowsError(try fixture.runExport(user: alice.id, export: UUID())) {
            Failure.settled($0, in: .dead, errorClass: "BadInput", messagePrefix: "bad input: ", containing: ["does not exist"])
        }
        XCTAssertThrowsError(try fixture.runExport(user: bob.id, export: export)) {
            Failure.settled($0, in: .dead, errorClass: "BadInput", messagePrefix: "bad input: ", containing: ["another user"])
        }
        XCTAssertEqual(try fixture.mails().count, 0)
    }

    // MARK: - Cleanup

    func testCleanupRemovesExpiredOrphanedAndStaleTemporaryFiles() throws {
        let alice = try PrivacySeed.user(fixture, label: "zqalice")
        let expired = try PrivacySeed.export(fixture, user: alice)
        let fresh = try PrivacySeed.export(fixture, user: alice)
        try fixture.runExport(user: alice.id, export: expired)
        try fixture.runExport(user: alice.id, export: fresh)
        try fixture.sql("UPDATE privacy_exports SET expires_at = now() - interval '1 minute' WHERE id = $1", [expired])
        let store = ExportFileStore(directory: fixture.directory)
        // An orphan (no row) and a stale temporary file, both old; a young orphan that must stay.
        let old = Date().addingTimeInterval(-2 * 86400)
        let orphan = store.finalPath(exportID: UUID())
        let youngOrphan = store.finalPath(exportID: UUID())
        let temporary = fixture.directory.appendingPathComponent(".\(UUID().uuidString.lowercased()).abc.tmp").path
        for path in [orphan, youngOrphan, temporary] {
            XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: Data("{}".utf8)))
        }
        for path in [orphan, temporary] {
            try FileManager.default.setAttributes([.modificationDate: old], ofItemAtPath: path)
        }

        try fixture.run(fixture.payload(ExportCleanupJob.className, args: []))

        XCTAssertFalse(FileManager.default.fileExists(atPath: store.finalPath(exportID: expired)))
        XCTAssertTrue(FileManager.default.fileExists(atPath: store.finalPath(exportID: fresh)))
        XCTAssertFalse(FileManager.default.fileExists(atPath: orphan))
        XCTAssertFalse(FileManager.default.fileExists(atPath: temporary))
        XCTAssertTrue(FileManager.default.fileExists(atPath: youngOrphan))
        let row = try XCTUnwrap(fixture.sql("SELECT * FROM privacy_exports WHERE id = $1", [expired]).first)
        XCTAssertEqual(try row.string("status"), "expired")
        XCTAssertNotNil(try row.optionalDate("file_deleted_at"))
        XCTAssertEqual(try fixture.sql("SELECT status FROM privacy_exports WHERE id = $1", [fresh]).first!.string("status"), "ready")

        // Idempotent; and an expired export's job does nothing (no new file, no mail).
        try fixture.run(fixture.payload(ExportCleanupJob.className, args: []))
        try fixture.runExport(user: alice.id, export: expired)
        XCTAssertFalse(FileManager.default.fileExists(atPath: store.finalPath(exportID: expired)))
        XCTAssertEqual(try fixture.mails().count, 2)
    }

    // MARK: - End to end

    func testWorkerRunsExportDeliveredTwiceAndMailsOnce() throws {
        let alice = try PrivacySeed.user(fixture, label: "zqalice")
        let export = try PrivacySeed.export(fixture, user: alice)
        let payload = try fixture.payload(PrivacyExportJob.className,
                                          args: PrivacyJobs.exportJob(userID: alice.id, exportID: export).args)
        try fixture.redis.command("SADD", Keys.queues, "default")
        try fixture.redis.command("LPUSH", Keys.queue("default"), payload.serialized(), payload.serialized())
        // One thread: the second delivery runs after the first (a redelivery). Two deliveries running at the same
        // time are covered by testFreshClaimByAnotherRunDefersWithRetryAfter (the second one is retried later).
        let worker = try fixture.startWorker(concurrency: 1)
        defer { worker.shutdown() }
        XCTAssertTrue(try eventually { try fixture.redis.processed() == 2 })
        XCTAssertEqual(try fixture.mails().count, 1)
        XCTAssertEqual(try fixture.sql("SELECT status FROM privacy_exports WHERE id = $1", [export]).first!.string("status"), "ready")
        XCTAssertEqual(try fixture.redis.failed(), 0)
    }

    /// GDPR Art. 15(1): beside the data, the document says for every section why it is processed, on which
    /// basis, who receives it, how long it is kept and where it came from, plus the data subject's rights.
    /// Run by a real worker (the runner, not `perform`).
    func testExportCarriesArticle15InformationForEverySection() throws {
        let alice = try PrivacySeed.user(fixture, label: "zqalice")
        let export = try PrivacySeed.export(fixture, user: alice)
        try fixture.redis.client.enqueue(PrivacyJobs.exportJob(userID: alice.id, exportID: export))
        let worker = try fixture.startWorker(concurrency: 1)
        defer { worker.shutdown() }
        XCTAssertTrue(try eventually { try fixture.redis.processed() == 1 })

        let (_, json) = try document(export)
        XCTAssertEqual(json["schema_version"] as? Int, ExportSchema.version)
        XCTAssertEqual(ExportSchema.version, 2, "processing_information arrived with schema version 2")
        let info = try XCTUnwrap(json["processing_information"] as? [String: Any])
        let categories = try XCTUnwrap(info["categories"] as? [String: [String: Any]])
        XCTAssertEqual(Set(categories.keys), Set(ExportSchema.sections.map(\.name)), "one entry per exported section")
        for (name, category) in categories {
            XCTAssertFalse((category["purposes"] as? [String] ?? []).isEmpty, "\(name): purposes (Art. 15(1)(a))")
            XCTAssertNotNil(category["recipients"] as? [String], "\(name): recipients (Art. 15(1)(c))")
            for field in ["legal_basis", "retention", "source"] {
                XCTAssertFalse((category[field] as? String ?? "").isEmpty, "\(name): \(field)")
            }
        }
        XCTAssertTrue((categories["locations"]?["recipients"] as? [String] ?? []).contains { $0.contains("Nominatim") })
        let rights = try XCTUnwrap(info["rights"] as? [String: String])
        XCTAssertEqual(Set(rights.keys), ["rectification", "erasure", "restriction", "objection", "portability",
                                          "withdraw_consent", "complaint"])
        XCTAssertTrue(rights["complaint"]?.contains("Art. 77") ?? false)
        XCTAssertNotNil(info["automated_decision_making"] as? String)
        // Art. 15(2), L10: every recipient outside the EEA is named with its country: the stores, the ad network
        // (AdMob, Google LLC, US) and the OpenStreetMap Foundation (Nominatim, UK).
        let transfers = try XCTUnwrap(info["third_country_transfers"] as? String)
        for name in ["Apple", "Google LLC, United States", "AdMob", "Data Privacy Framework", "OpenStreetMap Foundation",
                     "United Kingdom", "Nominatim"] {
            XCTAssertTrue(transfers.contains(name), "third_country_transfers names \(name)")
        }
        for section in ["ad_requests", "ad_views"] {
            XCTAssertTrue((categories[section]?["recipients"] as? [String] ?? []).contains { $0.contains("AdMob") }, section)
        }
        XCTAssertEqual(try fixture.redis.failed(), 0)
    }

    // MARK: - Memory

    /// 100,000 rows exported through the cursor: the peak RSS grows by far less than the document's size
    /// (a non-streaming export would hold at least the whole document). Prints the figures.
    func testExportOf100kRowsRunsInBoundedMemory() throws {
        let alice = try PrivacySeed.user(fixture, label: "zqalice", quizRows: 70_000)
        try fixture.sql("""
            INSERT INTO user_locations (user_id, latitude, longitude, accuracy, source, city, created_at)
            SELECT $1, 48 + g / 100000.0, 2 + g / 100000.0, 10, 'gps', 'Paris', now() - g * interval '1 second'
            FROM generate_series(1, 15000) g
            """, [alice.id])
        try fixture.sql("""
            INSERT INTO ad_views (app_id, user_id, ad_type, provider, placement, display_duration_ms)
            SELECT $2, $1, 'banner', 'admob', 'home', g FROM generate_series(1, 15000) g
            """, [alice.id, alice.appID])
        let export = try PrivacySeed.export(fixture, user: alice)
        let rows = try fixture.count("""
            SELECT (SELECT count(*) FROM quiz_history WHERE user_id = $1) + (SELECT count(*) FROM user_locations WHERE user_id = $1)
                 + (SELECT count(*) FROM ad_views WHERE user_id = $1) AS n
            """, [alice.id])
        XCTAssertGreaterThanOrEqual(rows, 100_000)

        let resetWorked = ProcessMemory.resetPeak()
        let baseline = try XCTUnwrap(ProcessMemory.kilobytes(resetWorked ? "VmRSS" : "VmHWM"))
        try fixture.runExport(user: alice.id, export: export)
        let peak = try XCTUnwrap(ProcessMemory.kilobytes("VmHWM"))
        let size = try fixture.sql("SELECT size_bytes FROM privacy_exports WHERE id = $1", [export]).first!.int64("size_bytes")
        let growthKB = peak - baseline
        print("privacy export memory: rows=\(rows) file=\(size / 1024) kB baseline=\(baseline) kB peak(VmHWM)=\(peak) kB "
              + "growth=\(growthKB) kB (peak reset: \(resetWorked))")
        XCTAssertGreaterThan(size, 8_000_000, "the document must be large enough for the bound to mean something")
        XCTAssertLessThan(Int64(growthKB) * 1024, size / 2, "peak memory grew by \(growthKB) kB for a \(size / 1024) kB document")
        let (_, json) = try document(export)
        let sections = try XCTUnwrap(json["sections"] as? [String: Any])
        XCTAssertEqual((sections["quiz_history"] as? [Any])?.count, 70_000)
        XCTAssertEqual((sections["locations"] as? [Any])?.count, 15_001)
    }
}
