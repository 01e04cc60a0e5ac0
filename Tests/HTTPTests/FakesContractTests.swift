import Foundation
import WorkersTestServices
import XCTest
import WorkersHTTP
import Synchronization

/// The default behaviours of the fakes that the job tests rely on (shapes of the real APIs, admin API).
final class FakesContractTests: XCTestCase {
    private var fakes: FakeServers!
    private let client = HTTPClient(configuration: HTTPClientConfiguration(userAgent: "SwiftWorkers-tests/1.0",
                                                                          timeout: .seconds(10)))

    override func setUpWithError() throws {
        fakes = try FakeServers.shared()
        try fakes.resetAll()
    }

    private func verify(_ url: String, _ receipt: String) throws -> [String: Any] {
        try client.send(.json(.post, url, object: ["receipt-data": receipt, "password": "secret",
                                                   "exclude-old-transactions": true])).jsonObject()
    }

    func testAppleVerifyReceiptStatuses() throws {
        let prod = fakes.appleVerifyReceiptProductionURL, sandbox = fakes.appleVerifyReceiptSandboxURL
        let valid = try verify(prod, "MIIprod")
        XCTAssertEqual(valid["status"] as? Int, 0)
        XCTAssertEqual(valid["environment"] as? String, "Production")
        let info = try XCTUnwrap(valid["latest_receipt_info"] as? [[String: Any]])
        XCTAssertEqual(info.first?["product_id"] as? String, "com.example.premium.monthly")
        XCTAssertNotNil(info.first?["expires_date_ms"] as? String)

        XCTAssertEqual(try verify(prod, "sandbox-receipt")["status"] as? Int, 21007)
        XCTAssertEqual(try verify(sandbox, "sandbox-receipt")["status"] as? Int, 0)
        XCTAssertEqual(try verify(sandbox, "MIIprod")["status"] as? Int, 21008)
        XCTAssertEqual(try verify(prod, "status:21002")["status"] as? Int, 21002)
        XCTAssertEqual(try verify(prod, "status:21005")["status"] as? Int, 21005)
        let internalError = try verify(prod, "status:21100")
        XCTAssertEqual(internalError["is-retryable"] as? Int, 1)

        try fakes.admin(.apple, "POST", "apple/receipts", json: [
            "receipt-data": "trial", "status": 0, "product_id": "com.example.yearly", "transaction_id": "777",
        ])
        let registered = try verify(prod, "trial")
        XCTAssertEqual((registered["latest_receipt_info"] as? [[String: Any]])?.first?["transaction_id"] as? String,
                       "777")
        try fakes.configure(.apple, ["shared_secret": "other"])
        XCTAssertEqual(try verify(prod, "MIIprod")["status"] as? Int, 21004)
    }

    /// The App Store Server API fake answers as Apple documents (sources cited in fakes.py, `AppleService`).
    func testAppleServerAPI() throws {
        let auth: HTTPHeaders = ["Authorization": "Bearer h.c.s"]
        // An id nobody registered: 404 TransactionIdNotFoundError (4040010), never a 200 with placeholder data.
        let unknown = try client.get(fakes.appleServerAPIBaseURL + "/inApps/v1/transactions/2000000123", headers: auth)
        XCTAssertEqual(unknown.status, 404)
        XCTAssertEqual(try unknown.jsonObject()["errorCode"] as? Int, 4040010)
        XCTAssertEqual(try unknown.jsonObject()["errorMessage"] as? String, "Transaction id not found.")
        let unknownStatuses = try client.get(fakes.appleServerAPISandboxBaseURL + "/inApps/v1/subscriptions/2000000123",
                                             headers: auth)
        XCTAssertEqual(unknownStatuses.status, 404)
        XCTAssertEqual(try unknownStatuses.jsonObject()["errorCode"] as? Int, 4040010)

        let jws = try AppleFixtureFile.text("mock_signed_data/transactionInfo")
        try fakes.admin(.apple, "POST", "apple/transactions", json: ["transaction_id": "2000000123", "signedTransactionInfo": jws])
        let known = try client.get(fakes.appleServerAPIBaseURL + "/inApps/v1/transactions/2000000123", headers: auth)
        XCTAssertEqual(known.status, 200)
        XCTAssertEqual(try known.jsonObject()["signedTransactionInfo"] as? String, jws)

        XCTAssertEqual(try client.get(fakes.appleServerAPIBaseURL + "/inApps/v1/transactions/abc", headers: auth)
            .jsonObject()["errorCode"] as? Int, 4000006)
        // 401: Apple documents no body; no invented errorCode.
        let unauthorized = try client.get(fakes.appleServerAPIBaseURL + "/inApps/v1/transactions/1")
        XCTAssertEqual(unauthorized.status, 401)
        XCTAssertTrue(unauthorized.body.isEmpty, "401 carries no body")
        // 429 RateLimitExceededError with Apple's code.
        try fakes.configure(.apple, ["rate_limited": 1])
        let limited = try client.get(fakes.appleServerAPIBaseURL + "/inApps/v1/transactions/2000000123", headers: auth)
        XCTAssertEqual(limited.status, 429)
        XCTAssertEqual(try limited.jsonObject()["errorCode"] as? Int, 4290000)
        XCTAssertEqual(try client.get(fakes.appleServerAPIBaseURL + "/inApps/v1/transactions/2000000123", headers: auth).status, 200)
        // No invented "4040000" for paths outside the API.
        let elsewhere = try client.get(fakes.appleServerAPIBaseURL + "/inApps/v9/nothing", headers: auth)
        XCTAssertEqual(elsewhere.status, 404)
        XCTAssertTrue(elsewhere.body.isEmpty)
    }

    func testGoogleTokenSubscriptionAndAcknowledge() throws {
        let base = fakes.googleAPIBaseURL + "/androidpublisher/v3/applications/com.example.app/purchases"
        XCTAssertEqual(try client.get(base + "/subscriptionsv2/tokens/tok-1",
                                      headers: ["Authorization": "Bearer never-issued"]).status, 401)
        // The signature of every assertion is checked: an unsigned one (or any, with no key configured) is refused.
        let refused = try client.send(.form(fakes.googleTokenURL, [
            ("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer"), ("assertion", "a.b.c"),
        ]))
        XCTAssertEqual(refused.status, 400)
        XCTAssertEqual(try refused.jsonObject()["error"] as? String, "invalid_grant")
        // The purchase API's shapes, with any bearer token (signing is covered by ReceiptsGoogleTests).
        try fakes.configure(.google, ["require_issued_token": false])
        let auth: HTTPHeaders = ["Authorization": "Bearer any"]

        try fakes.admin(.google, "POST", "google/subscriptions", json: [
            "token": "tok-expired", "subscriptionState": "SUBSCRIPTION_STATE_EXPIRED",
            "expiryTime": "2024-01-01T00:00:00.000Z",
        ])
        let expired = try client.get(base + "/subscriptionsv2/tokens/tok-expired", headers: auth).jsonObject()
        XCTAssertEqual(expired["subscriptionState"] as? String, "SUBSCRIPTION_STATE_EXPIRED")
        XCTAssertEqual((expired["lineItems"] as? [[String: Any]])?.first?["expiryTime"] as? String,
                       "2024-01-01T00:00:00.000Z")

        // Unknown tokens are not purchases: 404 notFound, with Google's error envelope.
        let unknown = try client.get(base + "/subscriptionsv2/tokens/tok-1", headers: auth)
        XCTAssertEqual(unknown.status, 404)
        XCTAssertEqual(((try unknown.jsonObject()["error"] as? [String: Any])?["errors"] as? [[String: Any]])?.first?["reason"]
                       as? String, "notFound")
        try fakes.admin(.google, "POST", "google/subscriptions", json: ["token": "tok-1"])
        let active = try client.get(base + "/subscriptionsv2/tokens/tok-1", headers: auth).jsonObject()
        XCTAssertEqual(active["subscriptionState"] as? String, "SUBSCRIPTION_STATE_ACTIVE")
        XCTAssertEqual(active["acknowledgementState"] as? String, "ACKNOWLEDGEMENT_STATE_PENDING")
        let ackURL = base + "/subscriptions/premium/tokens/tok-1:acknowledge"
        try fakes.script(.google, ["match": ["path": "/androidpublisher/v3/applications/com.example.app/purchases/subscriptions/premium/tokens/tok-1:acknowledge"],
                                   "google_error": "concurrentUpdate"])
        let busy = try client.send(HTTPRequest(method: .post, url: ackURL, headers: auth))
        XCTAssertEqual(busy.status, 409)
        XCTAssertEqual(((try busy.jsonObject()["error"] as? [String: Any])?["errors"] as? [[String: Any]])?.first?["reason"]
                       as? String, "concurrentUpdate")
        let ack = try client.send(HTTPRequest(method: .post, url: ackURL, headers: auth))
        XCTAssertEqual(ack.status, 200)
        XCTAssertEqual(try client.get(base + "/subscriptionsv2/tokens/tok-1", headers: auth)
            .jsonObject()["acknowledgementState"] as? String, "ACKNOWLEDGEMENT_STATE_ACKNOWLEDGED")
        let again = try client.send(HTTPRequest(method: .post, url: ackURL, headers: auth))
        XCTAssertEqual(again.status, 400, "acknowledging an acknowledged purchase is refused")
        XCTAssertEqual(((try again.jsonObject()["error"] as? [String: Any])?["errors"] as? [[String: Any]])?.first?["reason"]
                       as? String, "invalidPurchaseState")
        let counts = try fakes.admin(.google, "GET", "google/acknowledgements")
        XCTAssertEqual((counts["acknowledgements"] as? [String: Int])?["tok-1"], 1)
        XCTAssertEqual((counts["attempts"] as? [String: Int])?["tok-1"], 2, "the scripted 409 never reached the handler")
        XCTAssertEqual(try client.get(base + "/subscriptionsv2/tokens/invalid-x", headers: auth).status, 400)
        XCTAssertEqual(try client.get(base + "/subscriptionsv2/tokens/gone-x", headers: auth).status, 410)
    }

    /// A fake that cannot check signatures refuses to start: `cryptography` made unimportable (a module of that name
    /// that raises, first on PYTHONPATH) → exit 3 with a clear message, no ports line.
    func testFakesRefuseToStartWithoutCryptography() throws {
        let shadow = FileManager.default.temporaryDirectory.appendingPathComponent("no-cryptography-\(UUID().uuidString)")
        let package = shadow.appendingPathComponent("cryptography")
        try FileManager.default.createDirectory(at: package, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: shadow) }
        try Data("raise ImportError('hidden by the test')\n".utf8).write(to: package.appendingPathComponent("__init__.py"))
        let script = TestServices.repositoryRoot.appendingPathComponent("Tests/Fakes/fakes.py").path
        let result = try ChildProcess.run(URL(fileURLWithPath: "/usr/bin/env"), ["python3", script, "--google"],
                                          environment: ["PYTHONPATH": shadow.path], timeout: 30)
        XCTAssertEqual(result.status, 3, result.stderr)
        XCTAssertTrue(result.stderr.contains("'cryptography' cannot be imported"), result.stderr)
        XCTAssertEqual(result.stdout, "", "no ports: nothing started")
    }

    /// The fake Nominatim follows the usage policy and the /reverse documentation (sources cited in fakes.py).
    func testNominatimUsagePolicyAndReverseAnswers() throws {
        let reverse = fakes.nominatimBaseURL + "/reverse"
        let identified: HTTPHeaders = ["User-Agent": "SwiftWorkers-tests/1.0 (contact: ops@example.org)"]
        func get(_ query: [(String, String)], _ headers: HTTPHeaders = identified) throws -> HTTPResponse {
            try client.get(reverse, query: query + [("format", "jsonv2")], headers: headers)
        }
        try fakes.configure(.nominatim, ["rate_limit_per_second": 0])  // the 1/s rule is checked at the end
        // 403 "Access blocked" for a User-Agent without contact, or a stock library one.
        for ua in ["SwiftWorkers-tests/1.0", "python-requests/2.31 (ops@example.org)", ""] {
            let blocked = try get([("lat", "52.52"), ("lon", "13.405")], ["User-Agent": ua])
            XCTAssertEqual(blocked.status, 403, ua)
            XCTAssertTrue(blocked.text.contains("Access blocked"), blocked.text)
        }
        XCTAssertEqual(try get([("lat", "52.52"), ("lon", "13.405")], ["User-Agent": "Quiz/2 (+https://quiz.example)"]).status, 200)
        // accept-language (parameter, else header) for the built-in places; local names without it.
        func country(_ response: HTTPResponse) throws -> String? {
            (try response.jsonObject()["address"] as? [String: Any])?["country"] as? String
        }
        XCTAssertEqual(try country(get([("lat", "52.52"), ("lon", "13.405")])), "Deutschland")
        XCTAssertEqual(try country(get([("lat", "52.52"), ("lon", "13.405"), ("accept-language", "en")])), "Germany")
        var english = identified
        english.add(name: "Accept-Language", value: "en-GB,en;q=0.8")
        XCTAssertEqual(try country(get([("lat", "52.52"), ("lon", "13.405")], english)), "Germany")
        // zoom below city level: no settlement in the address.
        let coarse = try get([("lat", "52.52"), ("lon", "13.405"), ("zoom", "5")]).jsonObject()["address"] as? [String: Any]
        XCTAssertNil(coarse?["city"])
        XCTAssertEqual(coarse?["country_code"] as? String, "de")
        // Open sea, and 0,0: HTTP 200 {"error":"Unable to geocode"}, not the nearest built-in place.
        for (lat, lon) in [("40.0", "-40.0"), ("0", "0")] {
            let nothing = try get([("lat", lat), ("lon", lon)])
            XCTAssertEqual(nothing.status, 200)
            XCTAssertEqual(try nothing.jsonObject()["error"] as? String, "Unable to geocode")
        }
        let village = try get([("lat", "47.07"), ("lon", "9.5")])
        XCTAssertEqual((try village.jsonObject()["address"] as? [String: Any])?["village"] as? String, "Triesen")
        XCTAssertEqual(try get([("lon", "9.5")]).status, 400)

        // Faster than 1 request/s (the default): 429 with Retry-After.
        try fakes.reset(.nominatim)
        XCTAssertEqual(try get([("lat", "1"), ("lon", "1")]).status, 200)
        let limited = try get([("lat", "1"), ("lon", "1")])
        XCTAssertEqual(limited.classification(), .rateLimited(retryAfter: 1))
        XCTAssertEqual(try fakes.maxRequestsInWindow(.nominatim, path: "/reverse", window: 1.0), 2)

        // block_all: every request is refused, as after an IP block.
        try fakes.configure(.nominatim, ["block_all": true, "rate_limit_per_second": 0])
        XCTAssertEqual(try get([("lat", "52.52"), ("lon", "13.405")]).status, 403)
    }

    /// The reward contract's headers (docs/jobs-geo-ads.md): `Idempotency-Key` as an sf-string, the user in
    /// `X-User-Id`, the seed's body.
    func earnRequest(_ body: [String: Any], key: String?, user: String = "u9") throws -> HTTPRequest {
        var headers: HTTPHeaders = ["X-User-Id": user]
        if let key { headers["Idempotency-Key"] = key }
        return try HTTPRequest.json(.post, fakes.subscriptionServiceBaseURL + "/subscription/v1/credits/earn",
                                    object: body, headers: headers)
    }

    func testSubscriptionServiceFailsThenSucceedsAndStaysIdempotent() throws {
        try fakes.script(.subscription, ["match": ["path": "/subscription/v1/credits/earn"], "status": 503,
                                         "times": 2, "json": ["error": "unavailable"]])
        let request = try earnRequest(["amount": 1, "source": "ad_reward", "reference_id": "ad-request-9"],
                                      key: "\"ad-view-9\"")
        XCTAssertEqual(try client.send(request).classification(), .transient(retryAfter: nil))
        XCTAssertEqual(try client.send(request).status, 503)
        XCTAssertEqual(try client.send(request).status, 201)
        XCTAssertEqual(try fakes.subscriptionCredits().applicationsByKey["ad-view-9"], 1)

        // A response lost after the credit was applied: the retry replays, never credits twice.
        try fakes.script(.subscription, ["passthrough": true, "close": true])
        let lost = try earnRequest(["amount": 10, "source": "promo", "reference": "campaign-3"], key: "\"campaign-3\"")
        // libcurl re-sends once on a fresh connection when a *reused* connection closes before any response
        // byte, so the first call either fails (transport) or already gets the replay.
        if let first = try? client.send(lost) { XCTAssertEqual(first.headers["Idempotent-Replayed"], "true") }
        XCTAssertEqual(try client.send(lost).headers["Idempotent-Replayed"], "true")
        XCTAssertEqual(try fakes.subscriptionCredits().applicationsByKey["campaign-3"], 1)

        let noKey = try earnRequest(["amount": 1, "source": "ad_reward", "reference_id": "r"], key: nil)
        XCTAssertEqual(try client.send(noKey).status, 400)
    }

    /// The draft's "Syntax" (an Item Structured Header whose value MUST be a String): a strict RFC 8941 parser
    /// refuses a Token (the unquoted key) and a field that fails parsing, with 400; the key is the String's value.
    func testSubscriptionServiceParsesTheKeyAsAStructuredFieldString() throws {
        let body: [String: Any] = ["amount": 1, "source": "ad_reward", "reference_id": "req-sf"]
        for (raw, title) in [("ad_reward:req-sf", "Idempotency-Key must be a String"),
                             ("\"ad_reward:req-sf", "Idempotency-Key is not a Structured Field"),
                             ("\"ad_reward:req-sf\" x", "Idempotency-Key is not a Structured Field"),
                             ("42", "Idempotency-Key must be a String")] {
            let answer = try client.send(try earnRequest(body, key: raw))
            XCTAssertEqual(answer.status, 400, raw)
            XCTAssertEqual(try answer.jsonObject()["title"] as? String, title, raw)
        }
        XCTAssertEqual(try fakes.subscriptionCredits().applicationsByKey, [:])
        XCTAssertEqual(try client.send(try earnRequest(body, key: "\"ad_reward:req-sf\"")).status, 201)
        // The same String with an escape and a parameter is the same key (RFC 8941 §4.2.5, §4.2.3.2).
        let replay = try client.send(try earnRequest(body, key: "\"ad_reward:req-sf\";v=1"))
        XCTAssertEqual(replay.headers["Idempotent-Replayed"], "true")
        XCTAssertEqual(try fakes.subscriptionCredits().applicationsByKey, ["ad_reward:req-sf": 1])
        let noUser = try HTTPRequest.json(.post, fakes.subscriptionServiceBaseURL + "/subscription/v1/credits/earn",
                                          object: body, headers: ["Idempotency-Key": "\"k-nouser\""])
        XCTAssertEqual(try client.send(noUser).status, 400, "the user to credit is required")
    }

    /// The contract's scope (per user, not per credential), fingerprint (the members' values, in any order) and key
    /// lifetime (7 days on the fake's clock, moved by the test).
    func testSubscriptionServiceScopesKeysPerUserAndExpiresThem() throws {
        try fakes.configure(.subscription, ["api_keys": ["ads-secret": "ads-service", "worker-secret": "worker"]])
        func send(_ json: String, user: String, credential: String) throws -> HTTPResponse {
            var request = HTTPRequest(method: .post, url: fakes.subscriptionServiceBaseURL + "/subscription/v1/credits/earn",
                                      headers: ["Content-Type": "application/json", "Idempotency-Key": "\"ad_reward:r1\"",
                                                "X-User-Id": user, "Authorization": "Bearer \(credential)"],
                                      body: Data(json.utf8))
            request.timeout = .seconds(5)
            return try client.send(request)
        }
        let seedOrder = #"{"amount": 1, "source": "ad_reward", "reference_id": "r1"}"#
        let sorted = #"{"amount":1,"reference_id":"r1","source":"ad_reward"}"#
        XCTAssertEqual(try send(seedOrder, user: "u1", credential: "ads-secret").status, 201)
        let replay = try send(sorted, user: "u1", credential: "worker-secret")
        XCTAssertEqual(replay.headers["Idempotent-Replayed"], "true", "another credential, same user: one request")
        XCTAssertEqual(try send(sorted, user: "u1", credential: "nobody").status, 401)
        XCTAssertEqual(try send(#"{"amount":1,"reference_id":"r1","source":"ad_reward","user_id":"u1"}"#, user: "u1",
                                credential: "worker-secret").status, 422, "another set of members: another payload")
        XCTAssertEqual(try send(sorted, user: "u2", credential: "worker-secret").headers["Idempotent-Replayed"], nil,
                       "another user's key space")
        XCTAssertEqual(try fakes.subscriptionCredits().applicationsByKey, ["ad_reward:r1": 2])

        try fakes.admin(.subscription, "POST", "subscription/clock", json: ["advance": 7 * 86_400 - 60])
        XCTAssertEqual(try send(sorted, user: "u1", credential: "worker-secret").headers["Idempotent-Replayed"], "true",
                       "still remembered just before 7 days")
        try fakes.admin(.subscription, "POST", "subscription/clock", json: ["advance": 120])
        XCTAssertEqual(try send(sorted, user: "u1", credential: "worker-secret").status, 201,
                       "after its lifetime the key is forgotten: a retry now credits again (the hazard L3 names)")
        XCTAssertEqual(try fakes.subscriptionCredits().applicationsByKey, ["ad_reward:r1": 3], "u1, u2, u1 again after expiry")
    }

    /// The Idempotency-Key draft's error scenarios (409 while the same key is in flight, 422 for a key reused with
    /// another payload) and the seed's vocabulary (unknown `source`, missing reference → 422).
    func testSubscriptionServiceConflictsReuseAndVocabulary() throws {
        let body: [String: Any] = ["amount": 1, "source": "ad_reward", "reference_id": "req-1"]
        let request = try earnRequest(body, key: "\"ad_reward:req-1\"", user: "u1")
        try fakes.admin(.subscription, "POST", "subscription/hold", json: ["key": "ad_reward:req-1", "stage": "before_credit"])
        let client = self.client
        let firstDone = DispatchSemaphore(value: 0)
        let firstStatus = Mutex<Int?>(nil)
        Thread.detachNewThread {
            let status = try? client.send(request).status
            firstStatus.withLock { $0 = status }
            firstDone.signal()
        }
        var held = false
        for _ in 0..<400 where !held {
            held = (try fakes.admin(.subscription, "GET", "subscription/held")["held"] as? [String]) == ["ad_reward:req-1"]
            if !held { Thread.sleep(forTimeInterval: 0.025) }
        }
        XCTAssertTrue(held, "the first request reached the fake")
        let conflict = try client.send(request)
        XCTAssertEqual(conflict.status, 409, "the same key while the first request is in flight")
        XCTAssertEqual(conflict.headers["Content-Type"], "application/problem+json")
        XCTAssertEqual(try conflict.jsonObject()["title"] as? String, "A request is outstanding for this Idempotency-Key")
        try fakes.admin(.subscription, "POST", "subscription/release")
        XCTAssertEqual(firstDone.wait(timeout: .now() + 20), .success)
        XCTAssertEqual(firstStatus.withLock { $0 }, 201)
        let replay = try client.send(request)
        XCTAssertEqual(replay.status, 201)
        XCTAssertEqual(replay.headers["Idempotent-Replayed"], "true")
        XCTAssertEqual(try fakes.subscriptionCredits().applicationsByKey, ["ad_reward:req-1": 1])

        var other = body
        other["amount"] = 2
        let reused = try client.send(try earnRequest(other, key: "\"ad_reward:req-1\"", user: "u1"))
        XCTAssertEqual(reused.status, 422, "a key reused with another payload")
        XCTAssertEqual(try reused.jsonObject()["title"] as? String, "Idempotency-Key is already used")

        var invented = body
        invented["source"] = "campaign_reward"
        let unknown = try client.send(try earnRequest(invented, key: "\"k-2\""))
        XCTAssertEqual(unknown.status, 422)
        XCTAssertEqual(try unknown.jsonObject()["error"] as? String, "invalid_source")
        var unnamed = body
        unnamed.removeValue(forKey: "reference_id")
        XCTAssertEqual(try client.send(try earnRequest(unnamed, key: "\"k-3\"")).status, 422)
        XCTAssertEqual(try fakes.subscriptionCredits().applicationsByKey, ["ad_reward:req-1": 1])
    }
}

/// Apple's published test data (`Tests/Fixtures/apple-app-store-server`).
enum AppleFixtureFile {
    static func text(_ relative: String) throws -> String {
        try String(contentsOf: TestServices.fixturesDirectory.appendingPathComponent("apple-app-store-server")
                    .appendingPathComponent(relative), encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
    }
}
