import Foundation
import XCTest
@testable import WorkersHTTP

/// Pure value tests: no network.
final class HTTPUnitTests: XCTestCase {
    func testHeadersAreCaseInsensitiveAndKeepDuplicates() {
        var h: HTTPHeaders = ["Content-Type": "application/json", "Set-Cookie": "a=1"]
        h.add(name: "set-cookie", value: "b=2")
        XCTAssertEqual(h["content-type"], "application/json")
        XCTAssertEqual(h["CONTENT-TYPE"], "application/json")
        XCTAssertEqual(h.values(for: "SET-COOKIE"), ["a=1", "b=2"])
        h["content-type"] = "text/plain"
        XCTAssertEqual(h.values(for: "Content-Type"), ["text/plain"])
        h["Authorization"] = "Bearer secret-token"
        XCTAssertFalse(h.description.contains("secret-token"))
    }

    func testRetryAfterParsesSecondsAndHTTPDates() {
        let now = Date(timeIntervalSince1970: 784_111_767)  // Sun, 06 Nov 1994 08:49:27 GMT
        XCTAssertEqual(RetryAfter(headerValue: "120"), .seconds(120))
        XCTAssertEqual(RetryAfter(headerValue: " 0 "), .seconds(0))
        XCTAssertEqual(RetryAfter(headerValue: "Sun, 06 Nov 1994 08:49:37 GMT")?.delay(from: now), 10)
        XCTAssertEqual(RetryAfter(headerValue: "Sunday, 06-Nov-94 08:49:37 GMT")?.delay(from: now), 10)
        XCTAssertEqual(RetryAfter(headerValue: "Sun Nov  6 08:49:37 1994")?.delay(from: now), 10)
        XCTAssertEqual(RetryAfter(headerValue: "Sun, 06 Nov 1994 08:00:00 GMT")?.delay(from: now), 0, "past => 0")
        XCTAssertNil(RetryAfter(headerValue: "soon"))
        XCTAssertNil(RetryAfter(headerValue: "-5"))
        XCTAssertNil(RetryAfter(headerValue: ""))
    }

    func testARetryAfterOfAnyLengthOrDateIsClampedToADay() {
        let now = Date(timeIntervalSince1970: 784_111_767)
        // 20 digits read as Int.max trapped `Int(seconds)` in the runner (review M9).
        XCTAssertEqual(RetryAfter(headerValue: "99999999999999999999"), .seconds(RetryAfter.maxSeconds))
        XCTAssertEqual(RetryAfter(headerValue: String(repeating: "9", count: 400)), .seconds(RetryAfter.maxSeconds))
        XCTAssertEqual(RetryAfter(headerValue: "31536000000"), .seconds(RetryAfter.maxSeconds))
        XCTAssertEqual(RetryAfter(headerValue: "86400"), .seconds(86_400))
        XCTAssertEqual(RetryAfter(headerValue: "Fri, 31 Dec 9999 23:59:59 GMT")?.delay(from: now), 86_400)
        XCTAssertEqual(RetryAfter.seconds(Int.max).delay(from: now), 86_400)
    }

    func testClassification() {
        let now = Date(timeIntervalSince1970: 784_111_767)
        XCTAssertEqual(HTTPResponseClass(status: 200), .success)
        XCTAssertEqual(HTTPResponseClass(status: 204), .success)
        XCTAssertEqual(HTTPResponseClass(status: 429, headers: ["Retry-After": "3"]), .rateLimited(retryAfter: 3))
        XCTAssertEqual(HTTPResponseClass(status: 429, headers: ["retry-after": "Sun, 06 Nov 1994 08:49:37 GMT"],
                                         now: now), .rateLimited(retryAfter: 10))
        XCTAssertEqual(HTTPResponseClass(status: 429), .rateLimited(retryAfter: nil))
        XCTAssertEqual(HTTPResponseClass(status: 503, headers: ["Retry-After": "30"]), .transient(retryAfter: 30))
        XCTAssertEqual(HTTPResponseClass(status: 500), .transient(retryAfter: nil))
        XCTAssertEqual(HTTPResponseClass(status: 408), .transient(retryAfter: nil))
        XCTAssertEqual(HTTPResponseClass(status: 404), .permanent)
        XCTAssertEqual(HTTPResponseClass(status: 401), .permanent)
        XCTAssertEqual(HTTPResponseClass(status: 301), .permanent)
        XCTAssertTrue(HTTPResponseClass(status: 502).isRetryable)
        XCTAssertFalse(HTTPResponseClass(status: 400).isRetryable)
    }

    func testFormEncoding() {
        let s = FormEncoding.encode([("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer"),
                                     ("assertion", "a.b_c-d~e f+g/h=é")])
        XCTAssertEqual(s, "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer"
                       + "&assertion=a.b_c-d%7Ee+f%2Bg%2Fh%3D%C3%A9")
        let back = FormEncoding.decode(s)
        XCTAssertEqual(back.map(\.0), ["grant_type", "assertion"])
        XCTAssertEqual(back[1].1, "a.b_c-d~e f+g/h=é")
        XCTAssertEqual(FormEncoding.appendingQuery([("lat", "1.5"), ("lon", "-2")], to: "http://x/reverse"),
                       "http://x/reverse?lat=1.5&lon=-2")
        XCTAssertEqual(FormEncoding.appendingQuery([("b", "2")], to: "http://x/r?a=1"), "http://x/r?a=1&b=2")
    }

    func testURLRedactionReplacesSecretPathSegments() {
        let url = "https://api.example.com/apps/pkg/tokens/abc%2Fdef:acknowledge?access_token=SECRET"
        XCTAssertEqual(URLRedaction.redact(url, secretPathSegments: ["abc/def"]), "https://api.example.com/apps/pkg/tokens/…:acknowledge")
        XCTAssertEqual(URLRedaction.redact("https://h/a/tok-1/b", secretPathSegments: ["tok-1"]), "https://h/a/…/b")
        XCTAssertEqual(URLRedaction.redact("https://h/a/tok-12/b", secretPathSegments: ["tok-1"]), "https://h/a/tok-12/b",
                       "only whole segments")
        XCTAssertEqual(URLRedaction.redact("https://h/pkg/x", secretPathSegments: ["pkg"]), "https://h/…/x")
        XCTAssertEqual(URLRedaction.redact("https://pkg/x", secretPathSegments: ["pkg"]), "https://pkg/x", "the host is not a path segment")
        XCTAssertEqual(HTTPRequest(method: .get, url: "https://h/t/SECRET").withSecretPathSegment("SECRET").redactedURL, "https://h/t/…")
    }

    func testURLRedactionDropsQueryAndUserinfo() {
        XCTAssertEqual(URLRedaction.redact("https://user:pw@api.example.com:8443/v1/x?key=SECRET#frag"),
                       "https://api.example.com:8443/v1/x")
        XCTAssertEqual(URLRedaction.redact("http://h/p?q"), "http://h/p")
        XCTAssertEqual(URLRedaction.redact("http://h"), "http://h")
    }

    func testJSONRequestBuilderDoesNotEscapeSlashes() throws {
        struct Body: Encodable { let url: String }
        let r = try HTTPRequest.json(.post, "http://h/x", body: Body(url: "a/b"))
        XCTAssertEqual(String(decoding: r.body ?? Data(), as: UTF8.self), #"{"url":"a/b"}"#)
        XCTAssertEqual(r.headers["content-type"], "application/json")
        XCTAssertThrowsError(try HTTPRequest.json(.post, "http://h/x", object: Date())) { error in
            guard case HTTPError.invalidRequest = error else { return XCTFail("\(error)") }
        }
    }

    func testDecodingErrorsAreTyped() {
        let r = HTTPResponse(status: 200, headers: [:], body: Data("{\"a\": ".utf8), method: "GET", url: "http://h/x")
        XCTAssertThrowsError(try r.json()) { e in
            guard case HTTPError.decoding(let c) = e else { return XCTFail("\(e)") }
            XCTAssertEqual(c.url, "http://h/x")
        }
        struct T: Decodable { let a: Int }
        let wrongType = HTTPResponse(status: 200, headers: [:], body: Data(#"{"a":"x"}"#.utf8))
        XCTAssertThrowsError(try wrongType.decode(T.self)) { e in
            guard case HTTPError.decoding(let c) = e else { return XCTFail("\(e)") }
            XCTAssertTrue(c.message.contains("type mismatch at a"), c.message)
        }
        XCTAssertThrowsError(try HTTPResponse(status: 200, headers: [:], body: Data("[1]".utf8)).jsonObject())
    }

    func testDurationMilliseconds() {
        XCTAssertEqual(Duration.milliseconds(1500).curlMilliseconds, 1500)
        XCTAssertEqual(Duration.microseconds(10).curlMilliseconds, 1, "positive durations never become 0")
        XCTAssertEqual(Duration.zero.curlMilliseconds, 0)
    }

    /// Header lines as libcurl hands them over (with their CR LF): the optional whitespace around name and value is
    /// cut (SP and HTAB only), a value keeps its inner spaces and colons, a line without a colon and the blank end
    /// line add nothing, and a new status line (after `100 Continue`) starts the header block again.
    func testHeaderLinesAreParsedOnTheirBytes() {
        let state = CurlTransferState()
        func feed(_ line: String) { Array(line.utf8).withUnsafeBufferPointer { state.headerLine($0) } }
        feed("HTTP/1.1 100 Continue\r\n")
        feed("X-Early: gone\r\n")
        feed("\r\n")
        feed("HTTP/1.1 429 Too Many Requests\r\n")
        feed("Retry-After: \t 120 \r\n")
        feed("Content-Type:application/json; charset=utf-8\r\n")
        feed("Link:  <https://example.com/a:b>; rel=\"next\"\t\r\n")
        feed("X-Empty:\r\n")
        feed("no colon here\r\n")
        feed("X-Ünïcode: wert ü\n")
        feed("\r\n")
        XCTAssertNil(state.headers["X-Early"], "a new status line starts the block again")
        XCTAssertEqual(state.headers["retry-after"], "120")
        XCTAssertEqual(state.headers["Content-Type"], "application/json; charset=utf-8")
        XCTAssertEqual(state.headers["Link"], "<https://example.com/a:b>; rel=\"next\"")
        XCTAssertEqual(state.headers["X-Empty"], "")
        XCTAssertEqual(state.headers["X-Ünïcode"], "wert ü")
        XCTAssertEqual(Array(state.headers).count, 5)
    }
}
