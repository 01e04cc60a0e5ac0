import Foundation

/// An HTTP method token ("GET", "POST", ...).
public struct HTTPMethod: RawRepresentable, Sendable, Hashable, ExpressibleByStringLiteral, CustomStringConvertible {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue.uppercased() }
    public init(stringLiteral value: String) { self.init(rawValue: value) }
    public var description: String { rawValue }

    public static let get: HTTPMethod = "GET"
    public static let post: HTTPMethod = "POST"
    public static let put: HTTPMethod = "PUT"
    public static let patch: HTTPMethod = "PATCH"
    public static let delete: HTTPMethod = "DELETE"
    public static let head: HTTPMethod = "HEAD"
}

/// One HTTP request, as a value. Nothing here refers to libcurl.
///
/// Timeouts left nil use the client's defaults (`HTTPClientConfiguration`). `timeout` bounds the whole transfer
/// (connect + send + wait + receive); `connectTimeout` bounds DNS + TCP + TLS set-up.
public struct HTTPRequest: Sendable {
    public var method: HTTPMethod
    /// Absolute `http://` or `https://` URL, query included.
    public var url: String
    public var headers: HTTPHeaders
    /// Request body; nil sends none. A body on GET/HEAD is sent as given (unusual, but allowed).
    public var body: Data?
    public var connectTimeout: Duration?
    public var timeout: Duration?
    /// Checked during the transfer; when it fires, `send` throws `HTTPError.cancelled`.
    public var cancellation: HTTPCancellation?
    /// Overrides `HTTPClientConfiguration.maxResponseBytes` for this request.
    public var maxResponseBytes: Int?
    /// Secrets carried as whole segments of the URL path (a store purchase token): every description of this
    /// request — errors, logs, `HTTPResponse.url` — shows `…` in their place (see `URLRedaction`).
    public var secretPathSegments: [String] = []

    public init(method: HTTPMethod = .get, url: String, headers: HTTPHeaders = HTTPHeaders(), body: Data? = nil,
                connectTimeout: Duration? = nil, timeout: Duration? = nil, cancellation: HTTPCancellation? = nil,
                maxResponseBytes: Int? = nil) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
        self.connectTimeout = connectTimeout
        self.timeout = timeout
        self.cancellation = cancellation
        self.maxResponseBytes = maxResponseBytes
    }

    /// This request with `value` declared a secret path segment (raw, before percent-encoding).
    public func withSecretPathSegment(_ value: String) -> HTTPRequest {
        var copy = self
        copy.secretPathSegments.append(value)
        return copy
    }

    /// The URL as it may appear in errors and logs: `URLRedaction.redact(url, secretPathSegments:)`.
    public var redactedURL: String { URLRedaction.redact(url, secretPathSegments: secretPathSegments) }

    /// GET `url` with `query` form-encoded and appended.
    public static func get(_ url: String, query: [(String, String)] = [], headers: HTTPHeaders = HTTPHeaders())
        -> HTTPRequest {
        HTTPRequest(method: .get, url: FormEncoding.appendingQuery(query, to: url), headers: headers)
    }

    /// A request whose body is `value` encoded as compact JSON without escaped slashes,
    /// with `Content-Type: application/json` and `Accept: application/json` unless `headers` set them.
    public static func json(_ method: HTTPMethod = .post, _ url: String, body value: some Encodable,
                            headers: HTTPHeaders = HTTPHeaders()) throws(HTTPError) -> HTTPRequest {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.withoutEscapingSlashes, .sortedKeys]
        let data: Data
        do { data = try encoder.encode(value) } catch {
            throw .invalidRequest(HTTPErrorContext(method: method.rawValue, url: URLRedaction.redact(url),
                                                   message: "cannot encode JSON body: \(error)"))
        }
        return jsonRequest(method, url, data, headers)
    }

    /// A request whose body is a JSONSerialization-compatible object (`[String: Any]`, arrays, numbers, ...).
    public static func json(_ method: HTTPMethod = .post, _ url: String, object: Any,
                            headers: HTTPHeaders = HTTPHeaders()) throws(HTTPError) -> HTTPRequest {
        guard JSONSerialization.isValidJSONObject(object),
              let data = try? JSONSerialization.data(withJSONObject: object, options: [.withoutEscapingSlashes])
        else {
            throw .invalidRequest(HTTPErrorContext(method: method.rawValue, url: URLRedaction.redact(url),
                                                   message: "body is not a valid JSON object"))
        }
        return jsonRequest(method, url, data, headers)
    }

    /// POST `url` with an `application/x-www-form-urlencoded` body (e.g. an OAuth token request).
    public static func form(_ url: String, _ fields: [(String, String)], headers: HTTPHeaders = HTTPHeaders())
        -> HTTPRequest {
        var h = headers
        if !h.contains("Content-Type") { h["Content-Type"] = "application/x-www-form-urlencoded" }
        if !h.contains("Accept") { h["Accept"] = "application/json" }
        return HTTPRequest(method: .post, url: url, headers: h, body: FormEncoding.body(fields))
    }

    private static func jsonRequest(_ method: HTTPMethod, _ url: String, _ data: Data, _ headers: HTTPHeaders)
        -> HTTPRequest {
        var h = headers
        if !h.contains("Content-Type") { h["Content-Type"] = "application/json" }
        if !h.contains("Accept") { h["Accept"] = "application/json" }
        return HTTPRequest(method: method, url: url, headers: h, body: data)
    }

    /// Returns a copy with a header set (replacing any of the same name).
    public func with(header name: String, _ value: String) -> HTTPRequest {
        var r = self
        r.headers[name] = value
        return r
    }

    /// Returns a copy with both timeouts set.
    public func with(timeout: Duration, connectTimeout: Duration? = nil) -> HTTPRequest {
        var r = self
        r.timeout = timeout
        if let connectTimeout { r.connectTimeout = connectTimeout }
        return r
    }
}
