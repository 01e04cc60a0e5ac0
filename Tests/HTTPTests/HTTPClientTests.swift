import Foundation
import WorkersTestServices
import XCTest
@testable import WorkersHTTP
#if canImport(Glibc)
import Glibc
#endif

/// `HTTPClient` against the Python fakes (`Tests/Fakes/fakes.py`), started once per test process.
final class HTTPClientTests: XCTestCase {
    private var fakes: FakeServers!
    private let client = HTTPClient(configuration: HTTPClientConfiguration(
        userAgent: "SwiftWorkers-tests/1.0 (ops@example.com)", connectTimeout: .seconds(2), timeout: .seconds(10)))

    override func setUpWithError() throws {
        fakes = try FakeServers.shared()
        try fakes.resetAll()
    }

    // MARK: - Requests and responses

    func testGetJSONWithQueryAndUserAgent() throws {
        let r = try client.send(.get(fakes.nominatimBaseURL + "/reverse",
                                     query: [("lat", "48.857"), ("lon", "2.35"), ("format", "jsonv2")]))
        XCTAssertEqual(r.status, 200)
        XCTAssertEqual(r.classification(), .success)
        XCTAssertEqual(r.headers["content-type"], "application/json")
        let object = try r.jsonObject()
        let address = try XCTUnwrap(object["address"] as? [String: Any])
        XCTAssertEqual(address["city"] as? String, "Paris")
        XCTAssertEqual(address["country_code"] as? String, "fr")

        let recorded = try fakes.requests(.nominatim, path: "/reverse")
        XCTAssertEqual(recorded.count, 1)
        XCTAssertEqual(recorded[0].method, "GET")
        XCTAssertEqual(recorded[0].query, "lat=48.857&lon=2.35&format=jsonv2")
        XCTAssertEqual(recorded[0].header("user-agent"), "SwiftWorkers-tests/1.0 (ops@example.com)")
    }

    func testNominatimErrorShapeAndMissingUserAgent() throws {
        let r = try client.send(.get(fakes.nominatimBaseURL + "/reverse", query: [("lat", "0"), ("lon", "0"),
                                                                                ("format", "jsonv2")]))
        XCTAssertEqual(r.status, 200)
        XCTAssertEqual(try r.jsonObject()["error"] as? String, "Unable to geocode")
        let anonymous = HTTPClient()
        let blocked = try anonymous.send(.get(fakes.nominatimBaseURL + "/reverse?lat=1&lon=1&format=jsonv2"))
        XCTAssertEqual(blocked.status, 403)
        XCTAssertEqual(blocked.classification(), .permanent)
    }

    func testPostJSONDecodesAndSendsHeaders() throws {
        // The reward contract (docs/jobs-geo-ads.md): the seed's body, the key as an sf-string, the user in X-User-Id.
        struct Earn: Encodable { let amount: Int; let source: String; let reference: String }
        struct Credit: Decodable { let transaction_id: String; let amount: Int; let balance: Int }
        let url = fakes.subscriptionServiceBaseURL + "/subscription/v1/credits/earn"
        let request = try HTTPRequest.json(.post, url, body: Earn(amount: 10, source: "promo", reference: "camp/7"),
                                           headers: ["Idempotency-Key": "\"reward-7\"", "X-User-Id": "u1"])
        let first = try client.send(request)
        XCTAssertEqual(first.status, 201)
        let credit = try first.decode(Credit.self)
        XCTAssertEqual(credit.amount, 10)
        XCTAssertEqual(credit.balance, 10)
        XCTAssertNil(first.headers["idempotent-replayed"])

        let replay = try client.send(request)
        XCTAssertEqual(replay.status, 201)
        XCTAssertEqual(replay.headers["IDEMPOTENT-REPLAYED"], "true")
        XCTAssertEqual(try replay.decode(Credit.self).transaction_id, credit.transaction_id)

        let ledger = try fakes.subscriptionCredits()
        XCTAssertEqual(ledger.creditedByKey["reward-7"], 10)
        XCTAssertEqual(ledger.applicationsByKey["reward-7"], 1, "a replayed key must not credit twice")

        let recorded = try fakes.requests(.subscription, path: "/subscription/v1/credits/earn")
        XCTAssertEqual(recorded.first?.header("content-type"), "application/json")
        XCTAssertEqual(recorded.first?.header("idempotency-key"), "\"reward-7\"")
        XCTAssertEqual(recorded.first?.body, #"{"amount":10,"reference":"camp/7","source":"promo"}"#)
    }

    func testFormPostForOAuthToken() throws {
        let r = try client.send(.form(fakes.googleTokenURL, [
            ("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer"), ("assertion", "header.claims.sig"),
        ]))
        // The fake checks the assertion's RS256 signature as Google does: this unsigned one is refused, in OAuth's
        // error shape (signed assertions are covered by ReceiptsGoogleTests).
        XCTAssertEqual(r.status, 400)
        XCTAssertEqual(try r.jsonObject()["error"] as? String, "invalid_grant")
        let body = try XCTUnwrap(fakes.requests(.google, path: "/token").first)
        XCTAssertEqual(body.header("Content-Type"), "application/x-www-form-urlencoded")
        XCTAssertEqual(body.body, "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer"
                       + "&assertion=header.claims.sig")

        let bad = try client.send(.form(fakes.googleTokenURL, [("grant_type", "password")]))
        XCTAssertEqual(bad.status, 400)
        XCTAssertEqual(try bad.jsonObject()["error"] as? String, "unsupported_grant_type")
    }

    func testOtherMethodsAndEmptyBodies() throws {
        let url = fakes.nominatimBaseURL + "/anything"
        _ = try client.send(HTTPRequest(method: .put, url: url, body: Data("x=1".utf8)))
        _ = try client.send(HTTPRequest(method: .delete, url: url))
        _ = try client.send(HTTPRequest(method: .post, url: url))
        let head = try client.send(HTTPRequest(method: .head, url: url))
        XCTAssertEqual(head.status, 404)
        XCTAssertTrue(head.body.isEmpty)
        let recorded = try fakes.requests(.nominatim, path: "/anything")
        XCTAssertEqual(recorded.map(\.method), ["PUT", "DELETE", "POST", "HEAD"])
        XCTAssertEqual(recorded[0].body, "x=1")
        XCTAssertEqual(recorded[2].header("content-length"), "0")
    }

    // MARK: - Status triage

    func testStatusClassificationFromServers() throws {
        let missing = try client.send(.get(fakes.appleServerAPIBaseURL + "/inApps/v1/transactions/404",
                                           headers: ["Authorization": "Bearer a.b.c"]))
        XCTAssertEqual(missing.status, 404)
        XCTAssertEqual(missing.classification(), .permanent)
        XCTAssertEqual(try missing.jsonObject()["errorCode"] as? Int, 4040010)

        try fakes.script(.apple, ["match": ["prefix": "/inApps/"], "status": 500,
                                  "fixture": "models/apiException.json"])
        let failed = try client.send(.get(fakes.appleServerAPIBaseURL + "/inApps/v1/transactions/1",
                                          headers: ["Authorization": "Bearer a.b.c"]))
        XCTAssertEqual(failed.status, 500)
        XCTAssertEqual(failed.classification(), .transient(retryAfter: nil))
        XCTAssertEqual(try failed.jsonObject()["errorCode"] as? Int, 5000000)

        try fakes.script(.apple, ["status": 429, "retry_after": 7, "fixture": "models/apiTooManyRequestsException.json"])
        let limited = try client.send(.get(fakes.appleServerAPIBaseURL + "/inApps/v1/transactions/1",
                                           headers: ["Authorization": "Bearer a.b.c"]))
        XCTAssertEqual(limited.status, 429)
        XCTAssertEqual(limited.retryAfter, .seconds(7))
        XCTAssertEqual(limited.classification(), .rateLimited(retryAfter: 7))

        try fakes.script(.apple, ["status": 503, "retry_after": "Wed, 21 Oct 2099 07:28:00 GMT", "body": "busy"])
        let busy = try client.send(.get(fakes.appleServerAPIBaseURL + "/inApps/v1/transactions/1"))
        let now = Date(timeIntervalSince1970: 4_096_250_870)  // 10 s before that date
        XCTAssertEqual(busy.classification(now: now), .transient(retryAfter: 10))

        let unauthorized = try client.send(.get(fakes.appleServerAPIBaseURL + "/inApps/v1/transactions/1"))
        XCTAssertEqual(unauthorized.status, 401, "the App Store Server API fake requires a Bearer token")
    }

    func testMalformedJSONSurfacesAsDecodingError() throws {
        try fakes.script(.apple, ["match": ["path": "/verifyReceipt"], "malformed_json": true])
        let r = try client.send(HTTPRequest.json(.post, fakes.appleVerifyReceiptProductionURL,
                                                 object: ["receipt-data": "abc", "password": "s"]))
        XCTAssertEqual(r.status, 200)
        XCTAssertThrowsError(try r.json()) { error in
            guard case HTTPError.decoding(let c) = error else { return XCTFail("\(error)") }
            XCTAssertFalse((error as? HTTPError)?.isRetryable ?? true)
            XCTAssertTrue(c.url.hasSuffix("/verifyReceipt"))
        }
        struct Status: Decodable { let status: Int }
        XCTAssertThrowsError(try r.decode(Status.self)) { error in
            guard case HTTPError.decoding = error else { return XCTFail("\(error)") }
        }
    }

    // MARK: - Failures

    func testTimeoutIsHonoured() throws {
        try fakes.script(.nominatim, ["match": ["path": "/reverse"], "hang": true, "delay": 10])
        // The fake answers after 10 s: only the 500 ms timeout can make this a `.timeout`.
        XCTAssertThrowsError(try client.send(.get(fakes.nominatimBaseURL + "/reverse?lat=1&lon=1&key=SECRET")
                                                .with(timeout: .milliseconds(500)))) { error in
            guard case HTTPError.timeout(let c) = error else { return XCTFail("\(error)") }
            XCTAssertTrue((error as? HTTPError)?.isRetryable ?? false)
            XCTAssertFalse("\(error)".contains("SECRET"), "\(error)")
            XCTAssertEqual(c.method, "GET")
            XCTAssertTrue(c.url.hasSuffix("/reverse"))
        }
    }

    func testConnectionRefused() throws {
        let port = try TestServices.closedPort()
        XCTAssertThrowsError(try client.get("http://127.0.0.1:\(port)/x?token=SECRET")) { error in
            guard case HTTPError.connectionRefused(let c) = error else { return XCTFail("\(error)") }
            XCTAssertTrue((error as? HTTPError)?.isRetryable ?? false)
            XCTAssertEqual(c.url, "http://127.0.0.1:\(port)/x")
            XCTAssertFalse(c.message.isEmpty)
            XCTAssertFalse("\(error)".contains("SECRET"))
        }
    }

    func testSecretPathSegmentNeverReachesAnError() throws {
        let port = try TestServices.closedPort()
        let token = "PURCHASE-TOKEN-4f7c/x+y"  // needs percent-encoding in a path segment
        let segment = "PURCHASE-TOKEN-4f7c%2Fx%2By"
        let url = "http://127.0.0.1:\(port)/androidpublisher/v3/applications/pkg/purchases/subscriptions/p/tokens/\(segment):acknowledge?key=SECRET"
        let request = HTTPRequest(method: .post, url: url).withSecretPathSegment(token)
        XCTAssertThrowsError(try client.send(request)) { error in
            guard case HTTPError.connectionRefused(let c) = error else { return XCTFail("\(error)") }
            XCTAssertEqual(c.url, "http://127.0.0.1:\(port)/androidpublisher/v3/applications/pkg/purchases/subscriptions/p/tokens/…:acknowledge")
            for text in ["\(error)", c.message, String(reflecting: error)] {
                XCTAssertFalse(text.contains("PURCHASE-TOKEN") || text.contains("SECRET"), text)
            }
        }
        try fakes.script(.nominatim, ["match": ["prefix": "/tok/"], "hang": true, "delay": 10])
        XCTAssertThrowsError(try client.send(HTTPRequest(method: .get, url: fakes.nominatimBaseURL + "/tok/" + segment)
            .withSecretPathSegment(token).with(timeout: .milliseconds(300)))) { error in
            guard case HTTPError.timeout(let c) = error else { return XCTFail("\(error)") }
            XCTAssertTrue(c.url.hasSuffix("/tok/…"), c.url)
            XCTAssertFalse("\(error)".contains("PURCHASE-TOKEN"), "\(error)")
        }
    }

    /// The response's URL, read when an error describes it, is redacted too (it is made when read, not per call).
    func testSecretPathSegmentNeverReachesAResponsesURL() throws {
        let token = "PURCHASE-TOKEN-4f7c/x+y", segment = "PURCHASE-TOKEN-4f7c%2Fx%2By"
        try fakes.script(.nominatim, ["match": ["prefix": "/tok/"], "status": 200, "body": "not json"])
        let response = try client.send(HTTPRequest(method: .get, url: fakes.nominatimBaseURL + "/tok/" + segment + "?key=SECRET")
            .withSecretPathSegment(token))
        XCTAssertEqual(response.url, fakes.nominatimBaseURL + "/tok/…")
        struct Answer: Decodable { let a: Int }
        XCTAssertThrowsError(try response.decode(Answer.self)) { error in
            guard case HTTPError.decoding(let c) = error else { return XCTFail("\(error)") }
            XCTAssertEqual(c.url, fakes.nominatimBaseURL + "/tok/…")
            XCTAssertFalse("\(error)".contains("PURCHASE-TOKEN") || "\(error)".contains("SECRET"), "\(error)")
        }
    }

    func testDroppedConnectionIsRetryableTransportError() throws {
        // Twice: libcurl re-sends once on a fresh connection when a reused one closes before any response byte.
        try fakes.script(.nominatim, ["close": true, "times": 2])
        XCTAssertThrowsError(try client.get(fakes.nominatimBaseURL + "/reverse")) { error in
            guard case HTTPError.transport = error else { return XCTFail("\(error)") }
            XCTAssertTrue((error as? HTTPError)?.isRetryable ?? false)
        }
    }

    func testInvalidURLs() {
        for url in ["ftp://example.com/x", "not a url", "", "http://", "file:///etc/passwd"] {
            XCTAssertThrowsError(try client.get(url), url) { error in
                guard case HTTPError.invalidURL = error else { return XCTFail("\(url): \(error)") }
            }
        }
        XCTAssertThrowsError(try client.send(.get("http://127.0.0.1:1/", headers: ["X-Bad": "a\r\nInjected: 1"]))) {
            guard case HTTPError.invalidRequest = $0 else { return XCTFail("\($0)") }
        }
    }

    func testTLSAgainstPlainServerIsTLSError() throws {
        let url = fakes.nominatimBaseURL.replacingOccurrences(of: "http://", with: "https://") + "/reverse"
        XCTAssertThrowsError(try client.get(url)) { error in
            guard case HTTPError.tls = error else { return XCTFail("\(error)") }
            XCTAssertFalse((error as? HTTPError)?.isRetryable ?? true)
        }
    }

    func testResponseTooLarge() throws {
        var request = HTTPRequest.get(fakes.nominatimBaseURL + "/reverse?lat=1&lon=1&format=jsonv2")
        request.maxResponseBytes = 16
        XCTAssertThrowsError(try client.send(request)) { error in
            guard case HTTPError.responseTooLarge = error else { return XCTFail("\(error)") }
        }
    }

    // MARK: - Cancellation

    func testCancellationAbortsTransfer() throws {
        try fakes.script(.nominatim, ["hang": true, "delay": 30])
        let cancellation = HTTPCancellation()
        var request = HTTPRequest.get(fakes.nominatimBaseURL + "/reverse")
        request.cancellation = cancellation
        DispatchQueue.global().asyncAfter(deadline: .now() + 0.3) { cancellation.cancel() }
        // The fake answers after 30 s and the request timeout is 10 s: `.cancelled` can only come from the flag.
        XCTAssertThrowsError(try client.send(request)) { error in
            guard case HTTPError.cancelled = error else { return XCTFail("\(error)") }
            XCTAssertFalse((error as? HTTPError)?.isRetryable ?? true)
        }
        XCTAssertTrue(cancellation.isCancelled)
    }

    func testCancellationByDeadlineAndClosure() throws {
        try fakes.script(.nominatim, ["hang": true, "delay": 30, "times": 2])
        var request = HTTPRequest.get(fakes.nominatimBaseURL + "/reverse")
        request.cancellation = HTTPCancellation(deadline: .now + .milliseconds(300))
        XCTAssertThrowsError(try client.send(request)) { guard case HTTPError.cancelled = $0 else {
            return XCTFail("\($0)") } }

        let stopAt = ContinuousClock.now + .milliseconds(300)
        request.cancellation = HTTPCancellation(isCancelled: { ContinuousClock.now >= stopAt })
        XCTAssertThrowsError(try client.send(request)) { guard case HTTPError.cancelled = $0 else {
            return XCTFail("\($0)") } }
    }

    // MARK: - Concurrency and connection reuse

    /// 32 threads call at once, and each round all 32 return their handles before any takes one again (as a
    /// worker's threads do when answers arrive together and the threads go back to their queue): with the old cap
    /// of 16 idle handles, 16 handles were freed each round, their connections closed, and 16 new ones opened.
    func testConcurrentCallersKeepTheirConnectionsOpenPastSixteenAtOnce() throws {
        let threads = 32, rounds = 10
        // The fake Nominatim enforces the usage policy's 1 request/s by default; this test is about the client. Each
        // answer held 20 ms (a scripted delay), so that the 32 calls of a round are in flight at once; its body is
        // the part of Nominatim's /reverse answer this test reads (`address.city`: nominatim.org/release-docs/latest/
        // api/Reverse/, "Example with format=jsonv2").
        try fakes.configure(.nominatim, ["rate_limit_per_second": 0])
        try fakes.script(.nominatim, ["match": ["path": "/reverse"], "times": -1, "delay": 0.02,
                                      "json": ["address": ["city": "London"]]])
        let url = fakes.nominatimBaseURL + "/reverse?lat=51.5&lon=-0.12&format=jsonv2"
        let failures = Failures()
        let group = DispatchGroup()
        let roundEnd = Barrier(threads)
        let client = self.client
        for _ in 0..<threads {
            group.enter()
            let t = Thread {
                for _ in 0..<rounds {
                    do {
                        let r = try client.get(url)
                        let city = (try r.jsonObject()["address"] as? [String: Any])?["city"] as? String
                        if r.status != 200 || city != "London" { failures.add("status \(r.status) city \(city ?? "-")") }
                    } catch {
                        failures.add("\(error)")
                    }
                    roundEnd.wait()
                }
                group.leave()
            }
            t.start()
        }
        XCTAssertEqual(group.wait(timeout: .now() + 60), .success)
        XCTAssertEqual(failures.all, [])
        let recorded = try fakes.requests(.nominatim, path: "/reverse")
        XCTAssertEqual(recorded.count, threads * rounds)
        let connections = Set(recorded.map(\.clientPort)).count
        XCTAssertLessThanOrEqual(connections, threads + threads / 4, "keep-alive connections are reused across rounds")
    }

    func testSequentialRequestsReuseOneConnection() throws {
        for _ in 0..<5 { _ = try client.get(fakes.nominatimBaseURL + "/reverse?lat=52.5&lon=13.4") }
        let ports = Set(try fakes.requests(.nominatim, path: "/reverse").map(\.clientPort))
        XCTAssertEqual(ports.count, 1)
    }

    // MARK: - Helpers

}

/// Failure messages collected from several threads.
final class Failures: @unchecked Sendable {
    private let lock = NSLock()
    private var items: [String] = []
    func add(_ s: String) { lock.withLock { items.append(s) } }
    var all: [String] { lock.withLock { items } }
}
