import Foundation
import TestSupport
import XCTest
import HTTP

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

    func testAppleServerAPI() throws {
        let auth: HTTPHeaders = ["Authorization": "Bearer h.c.s"]
        let tx = try client.get(fakes.appleServerAPIBaseURL + "/inApps/v1/transactions/2000000123", headers: auth)
        XCTAssertEqual(tx.status, 200)
        let jws = try XCTUnwrap(tx.jsonObject()["signedTransactionInfo"] as? String)
        XCTAssertEqual(jws.split(separator: ".").count, 3, "the fixture's compact JWS")
        let subs = try client.get(fakes.appleServerAPISandboxBaseURL + "/inApps/v1/subscriptions/2000000123",
                                  headers: auth)
        XCTAssertEqual((try subs.jsonObject()["data"] as? [Any])?.isEmpty, false)
        XCTAssertEqual(try client.get(fakes.appleServerAPIBaseURL + "/inApps/v1/transactions/abc", headers: auth)
            .jsonObject()["errorCode"] as? Int, 4000006)
        XCTAssertEqual(try client.get(fakes.appleServerAPIBaseURL + "/inApps/v1/transactions/1").status, 401)
    }

    func testGoogleTokenSubscriptionAndAcknowledge() throws {
        let base = fakes.googleAPIBaseURL + "/androidpublisher/v3/applications/com.example.app/purchases"
        XCTAssertEqual(try client.get(base + "/subscriptionsv2/tokens/tok-1",
                                      headers: ["Authorization": "Bearer never-issued"]).status, 401)
        let token = try client.send(.form(fakes.googleTokenURL, [
            ("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer"), ("assertion", "a.b.c"),
        ])).jsonObject()["access_token"] as? String
        let auth: HTTPHeaders = ["Authorization": "Bearer \(try XCTUnwrap(token))"]

        try fakes.admin(.google, "POST", "google/subscriptions", json: [
            "token": "tok-expired", "subscriptionState": "SUBSCRIPTION_STATE_EXPIRED",
            "expiryTime": "2024-01-01T00:00:00.000Z",
        ])
        let expired = try client.get(base + "/subscriptionsv2/tokens/tok-expired", headers: auth).jsonObject()
        XCTAssertEqual(expired["subscriptionState"] as? String, "SUBSCRIPTION_STATE_EXPIRED")
        XCTAssertEqual((expired["lineItems"] as? [[String: Any]])?.first?["expiryTime"] as? String,
                       "2024-01-01T00:00:00.000Z")

        let active = try client.get(base + "/subscriptionsv2/tokens/tok-1", headers: auth).jsonObject()
        XCTAssertEqual(active["subscriptionState"] as? String, "SUBSCRIPTION_STATE_ACTIVE")
        XCTAssertEqual(active["acknowledgementState"] as? String, "ACKNOWLEDGEMENT_STATE_PENDING")
        let ack = try client.send(HTTPRequest(method: .post, url: base + "/subscriptions/premium/tokens/tok-1:acknowledge",
                                              headers: auth))
        XCTAssertEqual(ack.status, 200)
        XCTAssertEqual(try client.get(base + "/subscriptionsv2/tokens/tok-1", headers: auth)
            .jsonObject()["acknowledgementState"] as? String, "ACKNOWLEDGEMENT_STATE_ACKNOWLEDGED")
        let acks = try fakes.admin(.google, "GET", "google/acknowledgements")["acknowledgements"] as? [String: Int]
        XCTAssertEqual(acks?["tok-1"], 1)
        XCTAssertEqual(try client.get(base + "/subscriptionsv2/tokens/invalid-x", headers: auth).status, 400)
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

    func testSubscriptionServiceFailsThenSucceedsAndStaysIdempotent() throws {
        let url = fakes.subscriptionServiceBaseURL + "/subscription/v1/credits/earn"
        try fakes.script(.subscription, ["match": ["path": "/subscription/v1/credits/earn"], "status": 503,
                                         "times": 2, "json": ["error": "unavailable"]])
        let request = try HTTPRequest.json(.post, url, object: ["user_id": "u9", "amount": 1, "source": "ad"],
                                           headers: ["Idempotency-Key": "ad-view-9"])
        XCTAssertEqual(try client.send(request).classification(), .transient(retryAfter: nil))
        XCTAssertEqual(try client.send(request).status, 503)
        XCTAssertEqual(try client.send(request).status, 201)
        XCTAssertEqual(try fakes.subscriptionCredits().applicationsByKey["ad-view-9"], 1)

        // A response lost after the credit was applied: the retry replays, never credits twice.
        try fakes.script(.subscription, ["passthrough": true, "close": true])
        let lost = try HTTPRequest.json(.post, url, object: ["user_id": "u9", "amount": 10, "source": "campaign"],
                                        headers: ["Idempotency-Key": "campaign-3"])
        // libcurl re-sends once on a fresh connection when a *reused* connection closes before any response
        // byte, so the first call either fails (transport) or already gets the replay.
        if let first = try? client.send(lost) { XCTAssertEqual(first.headers["Idempotent-Replayed"], "true") }
        XCTAssertEqual(try client.send(lost).headers["Idempotent-Replayed"], "true")
        XCTAssertEqual(try fakes.subscriptionCredits().applicationsByKey["campaign-3"], 1)

        let noKey = try HTTPRequest.json(.post, url, object: ["user_id": "u9", "amount": 1])
        XCTAssertEqual(try client.send(noKey).status, 400)
    }
}
