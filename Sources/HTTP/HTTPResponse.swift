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
    public let url: String
    /// Time from start to end of the transfer, as libcurl measured it.
    public let totalTime: Duration

    public init(status: Int, headers: HTTPHeaders, body: Data, method: String = "GET", url: String = "",
                totalTime: Duration = .zero) {
        self.status = status
        self.headers = headers
        self.body = body
        self.method = method
        self.url = url
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
