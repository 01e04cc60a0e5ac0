import Crypto
import _CryptoExtras
import Foundation
@testable import WorkersAppJobs
import Logging
import WorkersQueue
import WorkersStorage
import WorkersSubjectKeys
import WorkersTestServices
import Workers
import XCTest

/// Issue 50 point 1, "no opened value leaves the job by construction": every personal value of a
/// `ValidateReceiptJob` is a unique marker; the job is sealed on enqueue (`SubjectArgumentsSealer`), run by a real
/// worker (`TestWorker`: fetch, opener, registry, runner, retry/dead settlement, Redis with its AOF, PostgreSQL) against
/// every error answer the Apple (verifyReceipt, App Store Server API) and Google fakes can give — statuses, error
/// bodies, 429, 5xx, Retry-After, timeouts, dropped connections, malformed bodies — and the job's own refusals. Then no
/// marker may be found in the Redis RDB (`redis-cli --rdb`, uncompressed) or the AOF files, the captured log lines,
/// `workerctl jobs show --json`, or PostgreSQL, except where the job writes it on purpose (below, `allowedInPostgres`).
/// The test prints the receipts code's throw sites and rejection codes no scenario reached (computed from the sources).
final class PersonalMarkerTests: ReceiptsTestCase {
    override func makeFixture() throws -> JobsFixture {
        try JobsFixture(prefix: "personal_marker_test", redis: 82, fakes: .own([.apple, .google]))
    }

    let kek = KeyEncryptionKey.random(id: "kek-marker")
    var processes: [WorkerProcess] = []
    let logs = CapturedLogs()

    override func tearDown() {
        for process in processes { process.shutdown() }
        super.tearDown()
    }

    // MARK: markers

    /// The personal values of one job, each unique to this run (`label` names the scenario in messages).
    struct Markers {
        let label: String
        let user: UUID
        let transaction: String
        let original: String
        let receipt: String
        let token: String
        var signed: String

        init(label: String, user: UUID) {
            self.label = label
            self.user = user
            // Digits (the App Store's format), long and random enough never to occur by chance.
            transaction = "73" + String(format: "%014ld", Int.random(in: 0...99_999_999_999_999))
            original = "74" + String(format: "%014ld", Int.random(in: 0...99_999_999_999_999))
            receipt = "zqmarkrcpt" + UUID().uuidString.replacingOccurrences(of: "-", with: "")
            token = "zqmarktok" + UUID().uuidString.replacingOccurrences(of: "-", with: "")
            signed = "zqmarkjwsh.zqmarkjwsp.zqmarkjwss" + UUID().uuidString.replacingOccurrences(of: "-", with: "")
        }

        /// Each marker with its field name.
        var all: [(field: String, value: String)] {
            [("user_id", user.uuidString.lowercased()), ("transaction_id", transaction), ("original_transaction_id", original),
             ("receipt_data", receipt), ("purchase_token", token), ("signed_transaction", signed)]
        }
    }

    enum Proof { case receipt, signed, receiptAndSigned, google(package: String, product: String) }

    /// One error answer and the job that meets it.
    struct Scenario {
        let name: String
        var proof: Proof = .receipt
        /// The user exists (false: the job refuses the unknown `user_id`).
        var userExists = true
        /// Fake answers and registrations, given the job's markers.
        var setUp: (Markers) throws -> Void = { _ in }
    }

    /// What one scenario left.
    struct Outcome {
        let scenario: String
        let markers: Markers
        let jid: String
        let state: String
        let errorClass: String?
        let errorMessage: String?
    }

    // MARK: helpers

    func script(_ service: FakeService, _ spec: [String: Any]) throws { try fakes.script(service, spec) }

    let signer: TestAppleSigner = try! TestAppleSigner()
    var appleConfig: [String: Any] = [:]
    var googleConfig: [String: Any] = [:]
    var googleBase = ReceiptsConfiguration()

    /// Both fakes back to their defaults (no queued script, no registration) with this test's configuration.
    func resetFakes() throws {
        try fakes.reset(.apple)
        try fakes.reset(.google)
        if !appleConfig.isEmpty { try fakes.configure(.apple, appleConfig) }
        if !googleConfig.isEmpty { try fakes.configure(.google, googleConfig) }
    }

    func serverAPIConfiguration() throws -> ReceiptsConfiguration {
        appleConfig = ["api_jwt": ["issuer": "issuer-1", "key_id": "KEY123", "bundle_id": "com.example",
                                   "public_key_pem": try P256KeyPEM.publicKeyPEM(fromPrivate: try AppleFixtures.signingKeyPEM())]]
        try fakes.configure(.apple, appleConfig)
        var c = appleConfiguration(roots: [signer.rootDER])
        c.appleValidation = .serverAPI
        c.appleCredentials = AppStoreServerAPICredentials(issuerID: "issuer-1", keyID: "KEY123",
                                                          privateKey: Secret(try AppleFixtures.signingKeyPEM()))
        return c
    }

    func googleOnlyConfiguration() throws -> ReceiptsConfiguration {
        let key = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        let json = jsonString(["type": "service_account", "project_id": "demo", "private_key_id": "k1",
                               "private_key": key.pkcs8PEMRepresentation, "client_email": "worker@demo.iam.gserviceaccount.com",
                               "token_uri": fakes.googleTokenURL])
        googleConfig = ["service_account": ["client_email": "worker@demo.iam.gserviceaccount.com",
                                            "public_key_pem": key.publicKey.pemRepresentation]]
        try fakes.configure(.google, googleConfig)
        var c = appleConfiguration()
        c.googleServiceAccount = try GoogleServiceAccount(json: Secret(json))
        c.googlePlayAPIURL = fakes.googleAPIBaseURL
        c.googlePackageNames = ["com.example.app"]
        c.googleAcknowledgementRetry = .zero
        c.requestTimeout = .seconds(2)
        return c
    }

    func ms(_ d: Date) -> String { String(Int64(d.timeIntervalSince1970 * 1000)) }

    /// A verifyReceipt answer (status 0) whose one purchase is `entry` (defaults: the plan's product, the job's
    /// transaction, a month from yesterday).
    func verifyReceiptAnswer(_ m: Markers, _ entry: [String: Any] = [:], bundle: String = "com.example") -> [String: Any] {
        var e: [String: Any] = ["product_id": ReceiptsDatabase.appleProduct, "transaction_id": m.transaction,
                                "original_transaction_id": m.transaction, "purchase_date_ms": ms(Date().addingTimeInterval(-86400)),
                                "expires_date_ms": ms(Date().addingTimeInterval(20 * 86400)), "is_trial_period": "false"]
        for (k, v) in entry { e[k] = v }
        e = e.filter { !($0.value is NSNull) }
        return ["status": 0, "environment": "Production", "receipt": ["bundle_id": bundle],
                "latest_receipt_info": [e], "pending_renewal_info": [["original_transaction_id": m.transaction, "auto_renew_status": "1"]]]
    }

    func verifyReceiptScript(_ spec: [String: Any]) throws {
        var s = spec
        s["match"] = ["prefix": "/verifyReceipt"]
        try script(.apple, s)
    }

    // MARK: the scenarios

    /// verifyReceipt mode (`RECEIPTS_APPLE_VALIDATION=verifyReceipt`).
    func verifyReceiptScenarios() -> [Scenario] {
        var list: [Scenario] = []
        for status in [21000, 21001, 21002, 21003, 21004, 21005, 21009, 21010, 21100, 21199, 12345] {
            list.append(Scenario(name: "verifyReceipt status \(status)") { [self] _ in
                var answer: [String: Any] = ["status": status, "environment": "Production"]
                if status == 21199 { answer["is-retryable"] = 0 }
                if status == 21100 { answer["is-retryable"] = 1 }
                try verifyReceiptScript(["json": answer])
            })
        }
        list.append(Scenario(name: "verifyReceipt 21007/21008 bouncing") { [self] _ in
            try verifyReceiptScript(["json": ["status": 21007], "times": 3])
            try script(.apple, ["match": ["prefix": "/sandbox/verifyReceipt"], "json": ["status": 21008], "times": 3])
        })
        for status in [400, 401, 403, 404, 408, 429, 500, 502, 503] {
            list.append(Scenario(name: "verifyReceipt HTTP \(status)") { [self] _ in
                try verifyReceiptScript(["status": status, "body": "{\"error\": \"scripted \(status)\"}"])
            })
        }
        list.append(Scenario(name: "verifyReceipt HTTP 503 Retry-After") { [self] _ in
            try verifyReceiptScript(["status": 503, "retry_after": 120, "body": ""])
        })
        list.append(Scenario(name: "verifyReceipt malformed JSON") { [self] _ in try verifyReceiptScript(["malformed_json": true]) })
        list.append(Scenario(name: "verifyReceipt HTML body") { [self] _ in
            try verifyReceiptScript(["body": "<html>maintenance</html>"])
        })
        list.append(Scenario(name: "verifyReceipt JSON without status") { [self] _ in try verifyReceiptScript(["json": ["foo": 1]]) })
        list.append(Scenario(name: "verifyReceipt timeout") { [self] _ in try verifyReceiptScript(["hang": true, "delay": 6]) })
        list.append(Scenario(name: "verifyReceipt connection dropped") { [self] _ in try verifyReceiptScript(["close": true]) })
        list.append(Scenario(name: "verifyReceipt transaction not in the receipt (RCV-TXN)") { [self] m in
            try verifyReceiptScript(["json": verifyReceiptAnswer(m, ["product_id": "com.example.other", "transaction_id": "1000000000000001",
                                                                     "original_transaction_id": "1000000000000001"])])
        })
        list.append(Scenario(name: "verifyReceipt another bundle (RCV-BUNDLE)") { [self] m in
            try verifyReceiptScript(["json": verifyReceiptAnswer(m, bundle: "com.example.elsewhere")])
        })
        list.append(Scenario(name: "verifyReceipt another product (RCV-PRODUCT)") { [self] m in
            try verifyReceiptScript(["json": verifyReceiptAnswer(m, ["product_id": "com.example.other"])])
        })
        list.append(Scenario(name: "verifyReceipt no product id (RCV-DATA)") { [self] m in
            try verifyReceiptScript(["json": verifyReceiptAnswer(m, ["product_id": NSNull()])])
        })
        list.append(Scenario(name: "verifyReceipt another user's app_account_token (RCV-OWNER)") { [self] m in
            try verifyReceiptScript(["json": verifyReceiptAnswer(m, ["app_account_token": UUID().uuidString.lowercased()])])
        })
        list.append(Scenario(name: "unknown user_id", userExists: false))
        list.append(Scenario(name: "signed_transaction only in verifyReceipt mode", proof: .signed))
        return list
    }

    /// App Store Server API mode: the device's JWS (`signed_transaction`) is the proof, unless said otherwise.
    func serverAPIScenarios() -> [Scenario] {
        var list: [Scenario] = []
        /// The device's JWS for the job's transaction, registered with the fake (Get Transaction Info, statuses).
        func deviceJWS(_ m: inout Markers, accountToken: UUID? = nil, register: Bool = true) throws {
            let jws = try signer.subscriptionTransaction(id: m.transaction, original: m.transaction, accountToken: accountToken ?? m.user)
            m.signed = jws
            if register { try signer.register(jws, id: m.transaction, with: fakes) }
        }
        let transactions = "/inApps/v1/transactions/"
        let statuses = "/inApps/v1/subscriptions/"
        for (path, what) in [(transactions, "Get Transaction Info"), (statuses, "Get All Subscription Statuses")] {
            for status in [400, 401, 403, 404, 429, 500, 503] {
                list.append(Scenario(name: "\(what) HTTP \(status)", proof: .signed) { [self] m in
                    let body: [String: Any] = ["errorCode": status * 10000 + 1, "errorMessage": "scripted \(status)"]
                    try script(.apple, ["match": ["prefix": path], "status": status, "json": body, "times": status == 401 ? 2 : 1])
                    _ = m
                })
            }
            list.append(Scenario(name: "\(what) HTTP 503 Retry-After", proof: .signed) { [self] _ in
                try script(.apple, ["match": ["prefix": path], "status": 503, "retry_after": 90, "body": ""])
            })
            list.append(Scenario(name: "\(what) malformed JSON", proof: .signed) { [self] _ in
                try script(.apple, ["match": ["prefix": path], "malformed_json": true])
            })
            list.append(Scenario(name: "\(what) timeout", proof: .signed) { [self] _ in
                try script(.apple, ["match": ["prefix": path], "hang": true, "delay": 6])
            })
            list.append(Scenario(name: "\(what) connection dropped", proof: .signed) { [self] _ in
                // Twice: the client sends a request again once when a reused connection closes without an answer.
                try script(.apple, ["match": ["prefix": path], "close": true, "times": 2])
            })
            list.append(Scenario(name: "\(what) unverifiable signed data", proof: .signed) { [self] m in
                let json: [String: Any] = path == transactions ? ["signedTransactionInfo": "aaa.bbb.ccc"]
                    : ["environment": "Production", "data": [["lastTransactions": [["originalTransactionId": m.transaction, "status": 1,
                                                                                     "signedTransactionInfo": "aaa.bbb.ccc"]]]]]
                try script(.apple, ["match": ["prefix": path], "json": json])
            })
        }
        list.append(Scenario(name: "Server API rate limited (config)", proof: .signed) { [self] _ in
            try fakes.configure(.apple, appleConfig.merging(["rate_limited": 1]) { $1 })
        })
        list.append(Scenario(name: "device JWS does not verify (RCV-JWS)", proof: .signed))
        list.append(Scenario(name: "receipt only, unverifiable app receipt (RCV-RECEIPT)", proof: .receipt))
        list.append(Scenario(name: "unknown transaction (RCV-NOT-FOUND)", proof: .signed))
        list.append(Scenario(name: "JWS of another transaction (RCV-TXN)", proof: .signed))
        list.append(Scenario(name: "JWS naming another user (RCV-OWNER)", proof: .signed))
        list.append(Scenario(name: "Apple's transaction of another product (RCV-PRODUCT)", proof: .signed))
        // The scenarios above that need the device's JWS made per job: `setUpSigned` below.
        return list
    }

    /// The device JWS a Server API scenario sends, per scenario name (nil: the marker, which does not verify).
    func serverAPISigned(_ scenario: String, _ m: inout Markers) throws {
        switch scenario {
        case "device JWS does not verify (RCV-JWS)", "receipt only, unverifiable app receipt (RCV-RECEIPT)":
            if scenario.contains("receipt only") {
                // Apple knows the transaction (no appAccountToken): only the app receipt could bind it, and it is garbage.
                let jws = try signer.sign(["transactionId": m.transaction, "originalTransactionId": m.transaction,
                                           "bundleId": "com.example", "productId": ReceiptsDatabase.appleProduct,
                                           "environment": "Production", "signedDate": TestAppleSigner.ms(Date()),
                                           "purchaseDate": TestAppleSigner.ms(Date().addingTimeInterval(-86400)),
                                           "expiresDate": TestAppleSigner.ms(Date().addingTimeInterval(86400 * 20))])
                try signer.register(jws, id: m.transaction, with: fakes)
            }
        case "unknown transaction (RCV-NOT-FOUND)":
            m.signed = try signer.subscriptionTransaction(id: m.transaction, original: m.transaction, accountToken: m.user)
        case "JWS of another transaction (RCV-TXN)":
            m.signed = try signer.subscriptionTransaction(id: "1000000000000002", original: "1000000000000002", accountToken: m.user)
        case "JWS naming another user (RCV-OWNER)":
            m.signed = try signer.subscriptionTransaction(id: m.transaction, original: m.transaction, accountToken: UUID())
        case "Apple's transaction of another product (RCV-PRODUCT)":
            m.signed = try signer.subscriptionTransaction(id: m.transaction, original: m.transaction, accountToken: m.user)
            var tx: [String: Any] = ["transactionId": m.transaction, "originalTransactionId": m.transaction, "bundleId": "com.example",
                                     "productId": "com.example.other", "environment": "Production",
                                     "signedDate": TestAppleSigner.ms(Date()), "appAccountToken": m.user.uuidString.lowercased()]
            tx["expiresDate"] = TestAppleSigner.ms(Date().addingTimeInterval(86400 * 20))
            try fakes.admin(.apple, "POST", "apple/transactions", json: ["transaction_id": m.transaction,
                                                                          "signedTransactionInfo": try signer.sign(tx)])
        default:
            // An error answer of the API: the device's JWS verifies and Apple knows the transaction, so the request
            // that the script answers is the one the job makes.
            m.signed = try signer.subscriptionTransaction(id: m.transaction, original: m.transaction, accountToken: m.user)
            try signer.register(m.signed, id: m.transaction, with: fakes)
        }
    }

    /// Google Play (package com.example.app, the plan's product).
    func googleScenarios() -> [Scenario] {
        var list: [Scenario] = []
        let package = "com.example.app", product = ReceiptsDatabase.googleProduct
        let api = "/androidpublisher/"
        for name in ["invalidValue", "notFound", "concurrentUpdate", "subscriptionPurchaseNoLongerAvailable", "backendError", "unavailable"] {
            list.append(Scenario(name: "Google \(name)", proof: .google(package: package, product: product)) { [self] _ in
                try script(.google, ["match": ["prefix": api], "google_error": name])
            })
        }
        list.append(Scenario(name: "Google unavailable with Retry-After", proof: .google(package: package, product: product)) { [self] _ in
            try script(.google, ["match": ["prefix": api], "google_error": "unavailable", "retry_after": 90])
        })
        for status in [401, 403, 429] {
            list.append(Scenario(name: "Google HTTP \(status)", proof: .google(package: package, product: product)) { [self] _ in
                try script(.google, ["match": ["prefix": api], "status": status, "times": status == 401 ? 2 : 1,
                                     "json": ["error": ["code": status, "message": "scripted \(status)", "status": "X"]]])
            })
        }
        list.append(Scenario(name: "Google malformed JSON", proof: .google(package: package, product: product)) { [self] _ in
            try script(.google, ["match": ["prefix": api], "malformed_json": true])
        })
        list.append(Scenario(name: "Google timeout", proof: .google(package: package, product: product)) { [self] _ in
            try script(.google, ["match": ["prefix": api], "hang": true, "delay": 6])
        })
        list.append(Scenario(name: "Google connection dropped", proof: .google(package: package, product: product)) { [self] _ in
            try script(.google, ["match": ["prefix": api], "close": true])
        })
        for (status, error) in [(400, "invalid_grant"), (500, "internal")] {
            list.append(Scenario(name: "Google OAuth token HTTP \(status)", proof: .google(package: package, product: product)) { [self] m in
                try fakes.admin(.google, "POST", "google/expire_tokens")
                try script(.google, ["match": ["path": "/token"], "status": status, "json": ["error": error], "times": 3])
                _ = m
            })
        }
        list.append(Scenario(name: "Google unknown subscriptionState", proof: .google(package: package, product: product)) { [self] m in
            try fakes.admin(.google, "POST", "google/subscriptions", json: ["token": m.token, "productId": product,
                                                                           "subscriptionState": "SUBSCRIPTION_STATE_WEIRD"])
        })
        list.append(Scenario(name: "Google purchase of another product (RCV-PRODUCT)", proof: .google(package: package, product: product)) { [self] m in
            try fakes.admin(.google, "POST", "google/subscriptions", json: ["token": m.token, "productId": "other_product",
                                                                           "subscriptionState": "SUBSCRIPTION_STATE_WEIRD"])
        })
        list.append(Scenario(name: "Google purchase naming another user (RCV-OWNER)", proof: .google(package: package, product: product)) { [self] m in
            try fakes.admin(.google, "POST", "google/subscriptions", json: ["token": m.token, "productId": product,
                                                                           "obfuscatedExternalAccountId": GoogleAccountHash.of(UUID())])
        })
        list.append(Scenario(name: "Google package not configured", proof: .google(package: "com.example.elsewhere", product: product)))
        list.append(Scenario(name: "Google product not the plan's", proof: .google(package: package, product: "other_product")))
        return list
    }

    // MARK: running

    func registry(_ configuration: ReceiptsConfiguration, store: SubjectKeyStore) throws -> JobRegistry {
        var registry = JobRegistry()
        ReceiptJobs.register(into: &registry, services: try ReceiptServices(configuration: configuration, http: http))
        registry.personalArgumentsOpener = SubjectArgumentsOpener(store: store, redis: redis.pool)
        return registry
    }

    /// Runs `scenarios` one at a time on a worker of `configuration`: each job sealed, pushed, settled; an entry that
    /// lands in `retry` is moved a day ahead (kept in Redis, not run again by this test's worker).
    func run(_ scenarios: [Scenario], configuration: ReceiptsConfiguration, store: SubjectKeyStore,
             signed: ((String, inout Markers) throws -> Void)? = nil) throws -> [Outcome] {
        let worker = try TestWorker.start(redis: redis, registry: try registry(configuration, store: store),
                                          database: fixture.jobDatabase, concurrency: 1, logger: logs.logger(label: "marker-test"))
        processes.append(worker)
        defer { worker.shutdown() }
        let client = JobClient(pool: redis.pool, middleware: [SubjectArgumentsSealer(store: store, classes: DomainJobs.personalArgumentTypes)])
        var outcomes: [Outcome] = []
        for scenario in scenarios {
            try resetFakes()
            var m = Markers(label: scenario.name, user: scenario.userExists ? try db.newUser() : UUID())
            try signed?(scenario.name, &m)
            try scenario.setUp(m)
            let proof: ValidateReceiptArguments.Proof
            switch scenario.proof {
            case .receipt: proof = .apple(receiptData: m.receipt, transactionID: m.transaction, originalTransactionID: m.original, signedTransaction: nil)
            case .signed: proof = .apple(receiptData: nil, transactionID: m.transaction, originalTransactionID: m.original, signedTransaction: m.signed)
            case .receiptAndSigned:
                proof = .apple(receiptData: m.receipt, transactionID: m.transaction, originalTransactionID: m.original, signedTransaction: m.signed)
            case .google(let package, let product): proof = .google(packageName: package, productID: product, purchaseToken: m.token)
            }
            let before = worker.processedCount
            let jid = try client.enqueue(try NewJob(ValidateReceiptArguments(userID: m.user, appID: db.appID, planID: db.planID, proof: proof)))
            XCTAssertTrue(eventually(timeout: 60) { worker.processedCount > before }, "\(scenario.name): not settled")
            var outcome = Outcome(scenario: scenario.name, markers: m, jid: jid, state: "done", errorClass: nil, errorMessage: nil)
            for key in [Keys.dead, Keys.retry] {
                for raw in try redis.command("ZRANGE", key, 0, -1).strings {
                    let payload = try JobPayload(parsing: raw)
                    guard payload.jid == jid else { continue }
                    outcome = Outcome(scenario: scenario.name, markers: m, jid: jid, state: key == Keys.dead ? "dead" : "retry",
                                      errorClass: payload.fields["error_class"]?.stringValue,
                                      errorMessage: payload.fields["error_message"]?.stringValue)
                    if key == Keys.retry {
                        try redis.command("ZADD", Keys.retry, Date().timeIntervalSince1970 + 86400, raw)
                    }
                }
            }
            if outcome.state == "done",
               try redis.command("ZRANGE", Keys.schedule, 0, -1).strings.contains(where: { $0.contains(jid) }) {
                // Waiting in `schedule` (a limit, the key store): neither done nor failed; the table says so.
                outcome = Outcome(scenario: scenario.name, markers: m, jid: jid, state: "schedule", errorClass: nil, errorMessage: nil)
            }
            outcomes.append(outcome)
        }
        try resetFakes()  // frees a hung request
        return outcomes
    }

    // MARK: the search

    /// The markers (value → "scenario field") found in `text`.
    func found(_ outcomes: [Outcome], in text: String) -> [String] {
        outcomes.flatMap { o in o.markers.all.filter { text.contains($0.value) }.map { "\(o.scenario) \($0.field)" } }
    }

    func found(_ outcomes: [Outcome], in data: Data) -> [String] {
        outcomes.flatMap { o in o.markers.all.filter { data.range(of: Data($0.value.utf8)) != nil }.map { "\(o.scenario) \($0.field)" } }
    }

    /// Every column of every row of every table of the test database, as (table.column, text).
    func postgresCells() throws -> [(column: String, text: String)] {
        try pool.withConnection { c in
            let tables = try c.query("""
                SELECT quote_ident(table_name::text) AS t FROM information_schema.tables
                WHERE table_schema = 'public' AND table_type = 'BASE TABLE' ORDER BY 1
                """).map { try $0.string("t") }
            var cells: [(String, String)] = []
            for table in tables {
                for row in try c.query("SELECT row_to_json(t)::text AS j FROM \(table) t") {
                    let object = try JSONValue.parse(try row.string("j")).objectValue ?? [:]
                    for (column, value) in object where value != .null {
                        cells.append(("\(table).\(column)", value.stringValue ?? value.serialized()))
                    }
                }
            }
            return cells
        }
    }

    /// The typed enqueue still sends the values: sealed in Redis (the queue entry holds none of them), opened by the
    /// runner, decoded into the same arguments (`Personal` values equal), through the real registry and runner.
    func testATypedEnqueueCarriesThePersonalValuesSealedAndTheRunnerOpensThem() throws {
        let store = try SubjectKeyStore(pool: pool, current: kek)
        let m = Markers(label: "round trip", user: try db.newUser())
        let client = JobClient(pool: redis.pool, middleware: [SubjectArgumentsSealer(store: store, classes: DomainJobs.personalArgumentTypes)])
        for proof: ValidateReceiptArguments.Proof in [
            .apple(receiptData: m.receipt, transactionID: m.transaction, originalTransactionID: m.original, signedTransaction: m.signed),
            .google(packageName: "com.example.app", productID: ReceiptsDatabase.googleProduct, purchaseToken: m.token),
        ] {
            let arguments = try ValidateReceiptArguments(userID: m.user, appID: db.appID, planID: db.planID, proof: proof)
            let jid = try client.enqueue(try NewJob(arguments))
            let raw = try XCTUnwrap(try redis.command("LPOP", "queue:default").string)
            XCTAssertEqual(found([Outcome(scenario: "enqueued", markers: m, jid: jid, state: "", errorClass: nil, errorMessage: nil)], in: raw), [],
                           "a personal value in clear in the queue")
            let decoded = DecodedArguments()
            var registry = JobRegistry()
            registry.register(ArgumentsProbe<ValidateReceiptJob>(decoded: decoded))
            registry.personalArgumentsOpener = SubjectArgumentsOpener(store: store, redis: redis.pool)
            try fixture.driver(registry).run(try JobPayload(parsing: raw))
            let received = try XCTUnwrap(decoded.value(jid) as? ValidateReceiptArguments)
            XCTAssertEqual(received, arguments, "the job receives every value")
            XCTAssertEqual(received.userID.reveal(), m.user)
        }
    }

    func testNoMarkerLeavesTheJobThroughAnyErrorAnswerOfAnyFake() throws {
        let store = try SubjectKeyStore(pool: pool, current: kek)
        var outcomes: [Outcome] = []
        outcomes += try run(verifyReceiptScenarios(), configuration: appleConfiguration(), store: store)
        outcomes += try run(serverAPIScenarios(), configuration: try serverAPIConfiguration(), store: store,
                            signed: { [self] name, m in try serverAPISigned(name, &m) })
        appleConfig = [:]
        outcomes += try run(googleScenarios(), configuration: try googleOnlyConfiguration(), store: store)

        print("PersonalMarkerTests: \(outcomes.count) jobs")
        for o in outcomes {
            print("  \(o.state.padding(toLength: 8, withPad: " ", startingAt: 0)) \(o.scenario): \(o.errorClass ?? "-"): \(o.errorMessage ?? "-")")
        }
        let failed = outcomes.filter { $0.state == "retry" || $0.state == "dead" }
        XCTAssertGreaterThan(failed.count, outcomes.count * 3 / 4, "most scenarios end in retry or dead")

        // Redis: an RDB of the whole server, uncompressed (LZF would hide a marker from a byte search), and the AOF.
        let previous = try redis.command("CONFIG", "GET", "rdbcompression").strings.last ?? "yes"
        try redis.command("CONFIG", "SET", "rdbcompression", "no")
        defer { _ = try? redis.command("CONFIG", "SET", "rdbcompression", previous) }
        let rdb = FileManager.default.temporaryDirectory.appendingPathComponent("marker-\(UUID().uuidString).rdb")
        defer { try? FileManager.default.removeItem(at: rdb) }
        let cli = try ChildProcess.run(URL(fileURLWithPath: "/usr/bin/redis-cli"), ["-u", redis.url, "--rdb", rdb.path], timeout: 60)
        XCTAssertEqual(cli.status, 0, cli.stderr)
        let rdbData = try Data(contentsOf: rdb)
        for o in failed { XCTAssertNotNil(rdbData.range(of: Data(o.jid.utf8)), "the RDB holds the entry of \(o.scenario)") }
        XCTAssertEqual(found(outcomes, in: rdbData), [], "a marker in the RDB")

        let dir = try redis.command("CONFIG", "GET", "dir").strings[1]
        let aofName = try redis.command("CONFIG", "GET", "appenddirname").strings[1]
        let aofDirectory = URL(fileURLWithPath: dir).appendingPathComponent(aofName)
        var aof = Data()
        for file in try FileManager.default.contentsOfDirectory(atPath: aofDirectory.path) {
            aof.append(try Data(contentsOf: aofDirectory.appendingPathComponent(file)))
        }
        for o in failed { XCTAssertNotNil(aof.range(of: Data(o.jid.utf8)), "the AOF holds the entry of \(o.scenario)") }
        XCTAssertEqual(found(outcomes, in: aof), [], "a marker in the AOF")

        // The logs: every line's message and metadata.
        let lines = logs.all.map { "\($0.message) \($0.metadata)" }
        XCTAssertGreaterThan(lines.count, outcomes.count, "the run logged")
        XCTAssertEqual(found(outcomes, in: lines.joined(separator: "\n")), [], "a marker in a log line")

        // `workerctl jobs show --json` of every job in retry or dead.
        let environment = ["REDIS_URL": redis.url, "DATABASE_URL": fixture.database.url]
        for o in failed {
            let shown = try ChildProcess.run(TestServices.workerctl, ["jobs", "show", o.jid, "--json"], environment: environment, timeout: 30)
            XCTAssertEqual(shown.status, 0, shown.stderr)
            XCTAssertTrue(shown.stdout.contains(o.jid), "\(o.scenario): \(shown.stdout)")
            XCTAssertEqual(found(outcomes, in: shown.stdout + shown.stderr), [], "a marker in jobs show --json")
        }

        // PostgreSQL: every cell of every table. Where a marker is written on purpose:
        // - always, the user id in `users.id` (the test's own user rows: each scenario's user_id marker is a users.id);
        //   not in `subject_keys` (a key's person is a keyed digest, migration 0020);
        // - a rejected receipt (dead, `RCV-…` but `RCV-OWNER`, which records nothing) is recorded as invalid with the
        //   proof the user sent (`SubscriptionStore.invalidReceipt`, docs/jobs-receipts.md): `iap_receipts`' user,
        //   transaction and proof columns — domain data, detached and cleared by the erasure (docs/jobs-privacy.md,
        //   Deletion). Its `validation_error` never holds one (the runner's scrub of opened values does not reach
        //   PostgreSQL: only `Personal` keeps a value out of the text the job writes there);
        // - a validation that succeeded (a store answer that is not an error for the job: Get All Subscription Statuses
        //   404 is "no statuses", the purchase is granted without them) writes the subscription, its event and the
        //   receipt row, as every success does.
        // Nothing else: no ledger, outbox, audit or other row, and none of these tables for a job that failed otherwise.
        let always: Set<String> = ["users.id"]
        let receiptRow: Set<String> = ["iap_receipts.user_id", "iap_receipts.transaction_id", "iap_receipts.original_transaction_id",
                                       "iap_receipts.receipt_data"]
        let success: Set<String> = receiptRow.union(["subscriptions.user_id", "subscriptions.store_transaction_id",
                                                     "subscriptions.store_original_transaction_id", "subscriptions.store_receipt",
                                                     "subscription_events.event_data", "subscription_events.idempotency_key"])
        func allowed(_ o: Outcome) -> Set<String> {
            if o.state == "done" { return always.union(success) }
            if o.state == "dead", let message = o.errorMessage, message.hasPrefix("RCV-"), !message.hasPrefix("RCV-OWNER") {
                return always.union(receiptRow)
            }
            return always
        }
        var inPostgres: [String] = []
        var receiptRows: Set<String> = []
        for (column, text) in try postgresCells() {
            for o in outcomes {
                for (field, value) in o.markers.all where text.contains(value) {
                    if receiptRow.contains(column) { receiptRows.insert(o.scenario) }
                    if !allowed(o).contains(column) || (field != "user_id" && always.contains(column)) {
                        inPostgres.append("\(column): \(o.scenario) \(field)")
                    }
                }
            }
        }
        XCTAssertEqual(inPostgres, [], "a marker in PostgreSQL outside the rows the job writes on purpose")
        XCTAssertFalse(receiptRows.isEmpty, "the search finds the markers a rejected receipt's row holds (the search works)")

        // What no scenario reached, computed from the sources.
        let texts = outcomes.compactMap(\.errorMessage) + lines
        let report = UnreachedThrows.report(seen: texts)
        print("PersonalMarkerTests: rejection codes reached: \(report.codesSeen.sorted().joined(separator: " "))")
        print("PersonalMarkerTests: rejection codes never reached: \(report.codesMissed.sorted().joined(separator: " "))")
        print("PersonalMarkerTests: \(report.sitesMissed.count) of \(report.sites) throw sites never reached:")
        for site in report.sitesMissed { print("  \(site)") }
        print("PersonalMarkerTests: \(report.sitesWithoutText.count) throw sites without a text to recognise them by:")
        for site in report.sitesWithoutText { print("  \(site)") }
    }
}

/// The throw sites of the receipt job's request path, from the sources, and which of them the texts of a run show.
/// A site is reached when the longest literal part of its line (the text between the interpolations, 8 characters at
/// least) occurs in an error message or a log line; a site without such a literal (`throw error`, `throw .missingFields`)
/// cannot be told by text and is listed apart.
enum UnreachedThrows {
    static let files = ["ValidateReceiptJob.swift", "AppleVerifyReceipt.swift", "AppStoreServerAPI.swift", "GooglePlay.swift",
                        "GoogleAuth.swift", "StoreHTTP.swift", "ReceiptServices.swift"]

    struct Report {
        var sites = 0
        var sitesMissed: [String] = []
        var sitesWithoutText: [String] = []
        var codesSeen: Set<String> = []
        var codesMissed: Set<String> = []
    }

    /// The literal parts of the string literals of `line`: the text outside `\(…)` (nested parentheses and quotes in
    /// the interpolation skipped).
    static func literals(_ line: String) -> [String] {
        var parts: [String] = [], current = "", inString = false
        let chars = Array(line)
        var i = 0
        while i < chars.count {
            let c = chars[i]
            if !inString {
                if c == "\"" { inString = true; current = "" }
                i += 1
                continue
            }
            if c == "\\", i + 1 < chars.count, chars[i + 1] == "(" {
                parts.append(current); current = ""
                var depth = 0
                i += 1
                while i < chars.count {
                    if chars[i] == "(" { depth += 1 } else if chars[i] == ")" { depth -= 1; if depth == 0 { break } }
                    i += 1
                }
                i += 1
                continue
            }
            if c == "\\", i + 1 < chars.count { current.append(chars[i + 1]); i += 2; continue }
            if c == "\"" { parts.append(current); current = ""; inString = false; i += 1; continue }
            current.append(c)
            i += 1
        }
        return parts.filter { !$0.isEmpty }
    }

    static func report(seen texts: [String]) -> Report {
        let all = texts.joined(separator: "\n")
        var report = Report()
        let directory = TestServices.repositoryRoot.appendingPathComponent("Sources/Jobs/Receipts")
        var codes: Set<String> = []
        for file in files {
            guard let source = try? String(contentsOf: directory.appendingPathComponent(file), encoding: .utf8) else { continue }
            for (index, line) in source.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
                let text = String(line)
                let trimmed = text.trimmingCharacters(in: .whitespaces)
                if trimmed.hasPrefix("//") { continue }
                for match in text.matches(of: /RCV-[A-Z]+(-[A-Z]+)?/) { codes.insert(String(match.output.0)) }
                guard text.contains("throw ") || text.contains("Rejection(code:") else { continue }
                report.sites += 1
                let longest = literals(text).max { $0.count < $1.count } ?? ""
                let site = "\(file):\(index + 1): \(trimmed.prefix(140))"
                if longest.count < 8 {
                    report.sitesWithoutText.append(site)
                } else if !all.contains(longest) {
                    report.sitesMissed.append(site)
                }
            }
        }
        for code in codes {
            if all.contains(code) { report.codesSeen.insert(code) } else { report.codesMissed.insert(code) }
        }
        // `RCV-<verifyReceipt status>`, `RCV-GOOGLE-<HTTP status>` and `RCV-CONFIG-<status>` are families.
        if all.contains(/RCV-\d{5}/) { report.codesSeen.insert("RCV-<status>") }
        return report
    }
}
