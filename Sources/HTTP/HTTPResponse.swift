import Foundation

/// A complete HTTP response (any status). Immutable value.
public struct HTTPResponse: Sendable {
    /// The final status code (after redirects, when the client follows them).
    public let status: Int
    /// The final response's header fields, in order.
    public let headers: HTTPHeaders
    public let body: Data
    /// The request method and its redacted URL (for error messages and logs).
    public let method: String
    /// The redacted URL (`HTTPRequest.redactedURL`), made when read: a response that is only decoded never pays for
    /// the redaction (a tenth of a Google receipts job's CPU when every call made it; bench/receipts-cpu.sh).
    public var url: String {
        switch urlSource {
        case .redacted(let text): return text
        case .request(let url, let secrets): return URLRedaction.redact(url, secretPathSegments: secrets)
        }
    }
    /// Time from start to end of the transfer, as libcurl measured it.
    public let totalTime: Duration

    /// Where `url` comes from: a text already redacted, or the request's URL and secret path segments.
    private enum URLSource: Sendable {
        case redacted(String)
        case request(url: String, secretPathSegments: [String])
    }
    private let urlSource: URLSource

    /// `url`: already redacted (it is shown as given).
    public init(status: Int, headers: HTTPHeaders, body: Data, method: String = "GET", url: String = "",
                totalTime: Duration = .zero) {
        self.init(status: status, headers: headers, body: body, method: method, urlSource: .redacted(url), totalTime: totalTime)
    }

    /// The response to `request`; its `url` is the request's redacted URL.
    init(status: Int, headers: HTTPHeaders, body: Data, request: HTTPRequest, totalTime: Duration) {
        self.init(status: status, headers: headers, body: body, method: request.method.rawValue,
                  urlSource: .request(url: request.url, secretPathSegments: request.secretPathSegments), totalTime: totalTime)
    }

    private init(status: Int, headers: HTTPHeaders, body: Data, method: String, urlSource: URLSource, totalTime: Duration) {
        self.status = status
        self.headers = headers
        self.body = body
        self.method = method
        self.urlSource = urlSource
        self.totalTime = totalTime
    }

    /// 200...299.
    public var isSuccess: Bool { (200...299).contains(status) }

    /// The body as UTF-8 text (invalid sequences replaced).
    public var text: String { String(decoding: body, as: UTF8.self) }

    /// Retry/permanent triage of this status, reading `Retry-After` relative to `now`.
    public func classification(now: Date = Date()) -> HTTPResponseClass {
        HTTPResponseClass(status: status, headers: headers, now: now)
    }

    /// The parsed `Retry-After` header, if present and well-formed.
    public var retryAfter: RetryAfter? { headers["Retry-After"].flatMap { RetryAfter(headerValue: $0) } }

    /// The body parsed with `JSONSerialization` (fragments allowed). Throws `.decoding` when it is not JSON.
    public func json() throws(HTTPError) -> Any {
        do {
            return try JSONSerialization.jsonObject(with: body, options: [.fragmentsAllowed])
        } catch {
            throw decodingError("body is not valid JSON (\(body.count) bytes): \(error.localizedDescription)")
        }
    }

    /// The body as a JSON object (`{...}`). Throws `.decoding` for other JSON or invalid JSON.
    public func jsonObject() throws(HTTPError) -> [String: Any] {
        let value = try json()
        guard let object = value as? [String: Any] else {
            throw decodingError("expected a JSON object, got \(type(of: value))")
        }
        return object
    }

    /// The body decoded as `T` with `decoder`. Throws `.decoding` with the decoder's explanation.
    public func decode<T: Decodable>(_ type: T.Type, using decoder: JSONDecoder = JSONDecoder()) throws(HTTPError)
        -> T {
        do {
            return try decoder.decode(T.self, from: body)
        } catch let error as DecodingError {
            throw decodingError("cannot decode \(T.self): \(Self.describe(error))")
        } catch {
            throw decodingError("cannot decode \(T.self): \(error)")
        }
    }

    private func decodingError(_ message: String) -> HTTPError {
        .decoding(HTTPErrorContext(method: method, url: url, message: "HTTP \(status): " + message))
    }

    /// A DecodingError without the values it may quote.
    private static func describe(_ error: DecodingError) -> String {
        func path(_ c: DecodingError.Context) -> String {
            let p = c.codingPath.map { $0.intValue.map(String.init) ?? $0.stringValue }.joined(separator: ".")
            return p.isEmpty ? "<root>" : p
        }
        switch error {
        case .typeMismatch(let t, let c): return "type mismatch at \(path(c)), expected \(t)"
        case .valueNotFound(let t, let c): return "missing value at \(path(c)), expected \(t)"
        case .keyNotFound(let k, let c): return "missing key '\(k.stringValue)' at \(path(c))"
        case .dataCorrupted(let c): return "invalid data at \(path(c)): \(c.debugDescription)"
        @unknown default: return "\(error)"
        }
    }
}
