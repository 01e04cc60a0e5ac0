import _CryptoExtras
import Foundation
import WorkersAppJobs
import WorkersQueue
import WorkersSubjectKeys
import WorkersTestServices
import Workers
import XCTest

/// Google receipts inside real `workerctl worker` processes: Redis (database 21), PostgreSQL, the Google fake.
/// The worker is configured from the environment as in production (`RECEIPTS_*`, `DATABASE_URL`); its stderr is
/// the log it writes.
final class ReceiptsGoogleWorkerTests: ReceiptsTestCase {
    var workers: [ChildProcess] = []

    override func makeFixture() throws -> JobsFixture {
        try JobsFixture(prefix: "receipts_test", redis: 21, fakes: .own([.google]))
    }

    override func tearDown() {
        for worker in workers where worker.isRunning {
            worker.signal(SIGTERM)
            worker.wait(timeout: 10)
        }
        super.tearDown()
    }

    /// A fresh service account whose public key the fake checks every assertion against, and the worker's
    /// environment for it. `playAPIURL` defaults to the fake.
    func environment(playAPIURL: String? = nil, extra: [String: String] = [:]) throws -> [String: String] {
        let key = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        try fakes.configure(.google, ["service_account": ["client_email": "worker@demo.iam.gserviceaccount.com",
                                                          "public_key_pem": key.publicKey.pemRepresentation]])
        let account = jsonString(["type": "service_account", "project_id": "demo", "private_key_id": "k1",
                                  "private_key": key.pkcs8PEMRepresentation,
                                  "client_email": "worker@demo.iam.gserviceaccount.com", "token_uri": fakes.googleTokenURL])
        return [
            "REDIS_URL": redis.url, "DATABASE_URL": db.database.url, "LOG_LEVEL": "info",
            "RECEIPTS_GOOGLE_SERVICE_ACCOUNT": account,
            "RECEIPTS_GOOGLE_PLAY_API_URL": playAPIURL ?? fakes.googleAPIBaseURL,
            "RECEIPTS_GOOGLE_PACKAGE_NAMES": "com.example.app",
            // A worker running ValidateReceiptJob (personal arguments) needs the key store (docs/jobs-privacy.md).
            "WORKERS_KEK": "test-1:" + Data(count: 32).base64EncodedString(),
        ].merging(extra) { $1 }
    }

    func startWorker(_ environment: [String: String]) throws -> ChildProcess {
        let worker = try ChildProcess(executable: TestServices.workerctl, arguments: [
            "worker", "--concurrency", "2", "--heartbeat-interval", "0.3", "--heartbeat-ttl", "2",
            "--orphan-sweep-interval", "0.5", "--poll-interval", "0.3"], environment: environment)
        workers.append(worker)
        return worker
    }

    func validation(user: UUID, token: String) throws -> NewJob {
        guard case .array(let args) = try JSONValue.parse(jsonString([[
            "user_id": user.uuidString, "app_id": db.appID.uuidString, "plan_id": db.planID.uuidString, "store": "google",
            "package_name": "com.example.app", "product_id": ReceiptsDatabase.googleProduct, "purchase_token": token]])) else {
            throw JobError.badInput("args")
        }
        return NewJob("ValidateReceiptJob", args: args)
    }

    func ackPath(_ token: String) -> String {
        "/androidpublisher/v3/applications/com.example.app/purchases/subscriptions/\(ReceiptsDatabase.googleProduct)/tokens/\(token):acknowledge"
    }

    func acknowledgements() throws -> [String: Int] {
        try fakes.admin(.google, "GET", "google/acknowledgements")["acknowledgements"] as? [String: Int] ?? [:]
    }

    /// The proof of issue 12 point 1: a worker SIGKILLed after the grant committed and while its acknowledgement is
    /// in flight (the fake holds the request open, so the kill lands there whatever the timing), then a new worker:
    /// the job's redelivery is skipped by the ledger, the owed acknowledgement is paid by the sweep, and exactly one
    /// acknowledgement reaches Google.
    func testWorkerKilledBetweenCommitAndAcknowledgementAcknowledgesOnceAfterRestart() throws {
        let user = try db.newUser()
        try fakes.admin(.google, "POST", "google/subscriptions", json: [
            "token": "tok-kill", "subscriptionState": "SUBSCRIPTION_STATE_ACTIVE", "productId": ReceiptsDatabase.googleProduct,
            "expiryTime": ISO8601DateFormatter().string(from: Date().addingTimeInterval(30 * 86400))])
        // Held until the fake is reset or stops: never answered, never applied.
        try fakes.script(.google, ["match": ["path": ackPath("tok-kill")], "hang": true, "delay": 3600])
        // The HTTP timeout is long so that only the kill ends the held request.
        let env = try environment(extra: ["RECEIPTS_HTTP_TIMEOUT_SECONDS": "120", "RECEIPTS_GOOGLE_ACK_RETRY_SECONDS": "1"])
        let jid = try redis.client.enqueue(try validation(user: user, token: "tok-kill"))

        let first = try startWorker(env)
        XCTAssertTrue(try eventually(timeout: 60) { try fakes.requests(.google, path: ackPath("tok-kill")).count == 1 }, first.stderr)
        // Between the commit and the acknowledgement: granted, debt recorded, nothing acknowledged.
        XCTAssertEqual(try db.subscriptionStatus(key: "tok-kill"), "active")
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM job_ledger WHERE jid = $1", [jid]), 1)
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM google_acknowledgements WHERE purchase_token = 'tok-kill' AND settled_at IS NULL"), 1)
        XCTAssertEqual(try acknowledgements(), [:])
        first.signal(SIGKILL)
        first.wait()

        let second = try startWorker(env)
        // Orphan recovery hands the job to the new worker; the ledger check acknowledges it without running it.
        XCTAssertTrue(try eventually(timeout: 60) { try redis.processed() >= 1 && redis.workingKeys().allSatisfy { key in
            try redis.int("LLEN", key) == 0 } }, second.stderr)
        XCTAssertTrue(second.stderr.contains("already applied; acknowledged without running"), second.stderr)
        XCTAssertEqual(try acknowledgements(), [:], "the job itself does not acknowledge again")
        // The scheduler enqueues the sweep every minute; here it is enqueued once the debt is due again.
        XCTAssertTrue(try eventually(timeout: 30) {
            try db.scalar("SELECT count(*) FROM google_acknowledgements WHERE settled_at IS NULL AND next_attempt_at <= now()") == 1
        })
        _ = try redis.client.enqueue(NewJob("GoogleAcknowledgementSweepJob", args: []))
        XCTAssertTrue(try eventually(timeout: 60) {
            try db.string("SELECT outcome AS v FROM google_acknowledgements WHERE purchase_token = 'tok-kill'") == "acknowledged"
        }, second.stderr)
        XCTAssertEqual(try acknowledgements(), ["tok-kill": 1])
        XCTAssertEqual(try db.subscriptionStatus(key: "tok-kill"), "active")
        XCTAssertEqual(try db.userStatus(user), "premium")
        XCTAssertEqual(try db.events(key: "tok-kill"), ["subscription_started"])
        XCTAssertEqual(try redis.int("ZCARD", Keys.retry) + redis.int("ZCARD", Keys.dead), 0)
    }

    /// Issue 12 point 10: a transport failure on a URL whose path carries the purchase token leaves the token out
    /// of the job's `error_message` in the retry set and out of the worker's log.
    func testTransportFailureKeepsThePurchaseTokenOutOfErrorsAndLogs() throws {
        let token = "tok-SECRET-7f3a9c51e2-distinctive"
        let user = try db.newUser()
        let env = try environment(playAPIURL: "http://127.0.0.1:\(try TestServices.closedPort())", extra: ["LOG_LEVEL": "debug"])
        _ = try redis.client.enqueue(try validation(user: user, token: token))
        let worker = try startWorker(env)
        XCTAssertTrue(try eventually(timeout: 60) { try redis.int("ZCARD", Keys.retry) == 1 }, worker.stderr)
        worker.signal(SIGTERM)
        worker.wait()
        let retried = try XCTUnwrap(redis.payloads(zset: Keys.retry).first)
        let message = try XCTUnwrap(retried.errorMessage)
        XCTAssertTrue(message.hasPrefix("Google Play API temporarily unavailable: HTTP connection_refused: GET http://127.0.0.1:"),
                      message)
        XCTAssertTrue(message.contains("/purchases/subscriptionsv2/tokens/…"), message)
        let log = worker.stderr
        XCTAssertTrue(log.contains("failed; retry scheduled") && log.contains("connection_refused"), log)
        for text in [message, log] {
            XCTAssertFalse(text.contains("7f3a9c51e2"), "the purchase token leaked: \(text)")
        }
    }

    /// Issue 50 point 4: a worker whose key store does not open at start — PostgreSQL's subject keys under KEK test-1
    /// (as after a restore from before a rotation), the worker configured with test-2 only — starts anyway and serves
    /// every class without personal arguments, while a sealed receipt job waits in `schedule` without spending a
    /// retry; the start logs `alert=key_store_unusable` and `/readyz` answers ready, `key_store` degraded. Restarted
    /// with the right KEK, the waiting job is opened and validated.
    func testAWorkerWhoseKeyStoreDoesNotOpenAtStartServesTheOtherClassesWhilePersonalJobsWait() throws {
        let env = try environment()
        let store = try SubjectKeyStore(pool: pool, current: try KeyEncryptionKey(parsing: try XCTUnwrap(env["WORKERS_KEK"])))
        let user = try db.newUser()
        try fakes.admin(.google, "POST", "google/subscriptions", json: [
            "token": "tok-wait", "subscriptionState": "SUBSCRIPTION_STATE_ACTIVE", "productId": ReceiptsDatabase.googleProduct,
            "expiryTime": ISO8601DateFormatter().string(from: Date().addingTimeInterval(30 * 86400))])
        let sealed = try SubjectArgumentsSealer(store: store, classes: DomainJobs.personalArgumentTypes)
            .sealed(try validation(user: user, token: "tok-wait"))
        let jid = try redis.client.enqueue(sealed)
        _ = try redis.client.enqueue(NewJob("Noop"))

        var wrong = env
        wrong["WORKERS_KEK"] = KeyEncryptionKey.random(id: "test-2").configurationText
        let first = try ChildProcess(executable: TestServices.workerctl, arguments: [
            "worker", "--concurrency", "2", "--poll-interval", "0.3", "--metrics-port", "0"], environment: wrong)
        workers.append(first)
        XCTAssertTrue(try eventually(timeout: 60) {
            try redis.payloads(zset: Keys.schedule).contains { $0.jid == jid && ($0.fields["key_store_waits"]?.intValue ?? 0) >= 1 }
        }, first.stderr)
        XCTAssertTrue(try eventually(timeout: 30) { try redis.processed() >= 1 }, "the class without personal arguments ran: \(first.stderr)")
        let waiting = try XCTUnwrap(try redis.payloads(zset: Keys.schedule).first { $0.jid == jid })
        XCTAssertNil(waiting.retryCount, "no retry spent")
        XCTAssertEqual(try redis.int("ZCARD", Keys.retry) + redis.int("ZCARD", Keys.dead), 0)
        XCTAssertTrue(first.stderr.contains("key_store_unusable") && first.stderr.contains("test-2"), first.stderr)
        let metrics = try XCTUnwrap(first.stderr.firstMatch(of: /"metrics_url":"([^"]+)"/).map { String($0.1) }, first.stderr)
        let readyz = try ChildProcess.run(URL(fileURLWithPath: "/usr/bin/curl"),
                                          ["-s", metrics.replacingOccurrences(of: "/metrics", with: "/readyz")])
        let body = try XCTUnwrap(try JSONValue.parse(readyz.stdout).objectValue, readyz.stdout)
        XCTAssertEqual(body["ready"]?.boolValue, true, readyz.stdout)
        XCTAssertTrue(body["checks"]?.objectValue?["key_store"]?.objectValue?["detail"]?.stringValue?
            .hasPrefix("degraded: the key store did not open at start") == true, readyz.stdout)
        first.signal(SIGTERM)
        first.wait()

        let second = try startWorker(env)
        XCTAssertTrue(try eventually(timeout: 60) { try db.userStatus(user) == "premium" }, second.stderr)
        XCTAssertEqual(try redis.int("ZCARD", Keys.retry) + redis.int("ZCARD", Keys.dead), 0)
    }
}
