import CWorkersCurl
import Foundation
import Synchronization
import Logging
import WorkersTelemetry
import Tracing

/// Settings shared by every request an `HTTPClient` sends.
public struct HTTPClientConfiguration: Sendable {
    /// Sent as `User-Agent` unless a request sets its own (Nominatim requires an identifying one).
    public var userAgent: String?
    /// PEM bundle of trusted CAs (`CURLOPT_CAINFO`); nil uses the system bundle. Verification is always on.
    public var caFile: String?
    /// Directory of hashed CA certificates (`CURLOPT_CAPATH`); nil uses the system default.
    public var caPath: String?
    /// Defaults for requests that leave their timeouts nil.
    public var connectTimeout: Duration
    public var timeout: Duration
    /// Largest response body accepted before the transfer is aborted with `.responseTooLarge`.
    public var maxResponseBytes: Int
    /// Idle curl easy handles (each keeps its open connections) kept for reuse. The pool only makes a handle when
    /// none is idle, so it holds as many as were in use at once, at most this many: the default keeps every one for
    /// a worker's whole concurrency. A smaller cap frees each handle past it after its call, closing its connection,
    /// so the next call pays a new handle, a TCP connect and (HTTPS) a handshake (issue 38: at 1,000 calls in flight
    /// the old default of 16 opened 10,000–15,600 connections for 20,000 calls).
    public var maxIdleHandles: Int
    /// Follow 3xx redirects (at most 5, http/https only). Off by default: these APIs do not redirect.
    public var followRedirects: Bool
    /// Logs each request at debug level (method, redacted URL, status, duration) when set.
    public var logger: Logger?

    public init(userAgent: String? = nil, caFile: String? = nil, caPath: String? = nil,
                connectTimeout: Duration = .seconds(5), timeout: Duration = .seconds(30),
                maxResponseBytes: Int = 32 << 20, maxIdleHandles: Int = 4096, followRedirects: Bool = false,
                logger: Logger? = nil) {
        self.userAgent = userAgent
        self.caFile = caFile
        self.caPath = caPath
        self.connectTimeout = connectTimeout
        self.timeout = timeout
        self.maxResponseBytes = maxResponseBytes
        self.maxIdleHandles = maxIdleHandles
        self.followRedirects = followRedirects
        self.logger = logger
    }
}

/// A blocking HTTP/HTTPS client over libcurl.
///
/// Thread rules: one `HTTPClient` may be shared by any number of threads; `send` is reentrant. Each call checks
/// out a curl easy handle *exclusively* from an internal pool and returns it when done, so a handle is never
/// used by two threads at once. Handles keep their connections open, so the next request to the same host
/// reuses a connection (keep-alive); up to `maxIdleHandles` idle handles are kept. All handles join one curl
/// share handle for the DNS cache and TLS session cache, guarded by locks (`ShareLocks`).
/// `send` blocks the calling thread for at most the request's `timeout` (plus ~1 s for cancellation checks);
/// do not call it on a thread that must stay responsive.
///
/// Delivery: libcurl re-sends a request once, on a fresh connection, when a *reused* keep-alive connection
/// closes before any response byte arrives (it cannot tell a stale connection from a server that died mid-request).
/// A non-idempotent POST must therefore be safe to repeat (idempotency key, natural idempotency) — which every job
/// needs anyway for its own retries.
///
/// Invariants: libcurl is initialised (`CurlRuntime`, on the first checkout) before the first handle is made; every pooled handle has
/// been `curl_easy_reset` (no pointers into a finished transfer's state remain); the share handle outlives all
/// easy handles (they are cleaned up first in `deinit`).
public final class HTTPClient: @unchecked Sendable {
    public let configuration: HTTPClientConfiguration
    private let pool: EasyHandlePool

    public init(configuration: HTTPClientConfiguration = HTTPClientConfiguration()) {
        self.configuration = configuration
        self.pool = EasyHandlePool(maxIdle: configuration.maxIdleHandles)
    }

    /// Sends `request` and returns the response, whatever its status.
    ///
    /// Throws `HTTPError` only when no complete response arrived (timeout, connection, TLS, cancellation,
    /// invalid URL/request, oversize body). Errors carry the redacted URL and libcurl's message.
    ///
    /// Inside a traced enqueue or job run (docs/tracing.md) the call is a client span that records the
    /// method, the host and port and the status, never the path or query (they may hold personal data).
    public func send(_ request: HTTPRequest) throws(HTTPError) -> HTTPResponse {
        guard let span = JobTracing.startChildSpan("HTTP \(request.method.rawValue)", ofKind: .client) else {
            return try sendUntraced(request)
        }
        defer { span.end() }
        span.attributes["http.request.method"] = request.method.rawValue
        if let components = URLComponents(string: request.url) {
            if let host = components.host { span.attributes["server.address"] = host }
            if let port = components.port { span.attributes["server.port"] = Int64(port) }
        }
        do {
            let response = try sendUntraced(request)
            span.attributes["http.response.status_code"] = Int64(response.status)
            if response.status >= 400 { span.setStatus(SpanStatus(code: .error)) }
            return response
        } catch {
            // The kind only (`timeout`, `tls`…): the error's context holds the URL.
            span.attributes["error.type"] = error.kind
            span.setStatus(SpanStatus(code: .error))
            throw error
        }
    }

    private func sendUntraced(_ request: HTTPRequest) throws(HTTPError) -> HTTPResponse {
        // The redacted URL is made only where it is shown (errors, debug logs, `HTTPResponse.url` when read).
        let method = request.method.rawValue
        func context(_ message: String, _ code: CURLcode? = nil) -> HTTPErrorContext {
            HTTPErrorContext(method: method, url: request.redactedURL, message: scrub(message, request: request),
                             curlCode: code.map { Int($0.rawValue) })
        }
        try validate(request, context: context)

        guard let handle = pool.checkout() else { throw .internalError(context("curl_easy_init failed")) }
        defer { pool.checkin(handle) }
        let h = handle.raw
        let state = CurlTransferState(maxBodyBytes: request.maxResponseBytes ?? configuration.maxResponseBytes,
                                      cancellation: request.cancellation)
        var headerList: UnsafeMutablePointer<curl_slist>?
        defer { curl_slist_free_all(headerList) }

        let code: CURLcode = withExtendedLifetime(state) {
            configure(h, request, &headerList)
            state.install(on: h)
            return curl_easy_perform(h)
        }

        guard code == CURLE_OK else {
            let message = CurlFailure.message(code, state: state)
            let ctx = context(message, code)
            configuration.logger?.debug("http failed", metadata: ["method": "\(method)", "url": "\(request.redactedURL)",
                                                                  "error": "\(message)"])
            switch CurlFailure.classify(code, handle: h, state: state) {
            case .invalidURL: throw .invalidURL(ctx)
            case .timeout: throw .timeout(ctx)
            case .connectionRefused: throw .connectionRefused(ctx)
            case .connectionFailed: throw .connectionFailed(ctx)
            case .tls: throw .tls(ctx)
            case .transport: throw .transport(ctx)
            case .cancelled: throw .cancelled(context("cancelled: " + message, code))
            case .tooLarge:
                throw .responseTooLarge(context("response body exceeds \(state.maxBodyBytes) bytes", code))
            case .loginDenied, .internalError: throw .internalError(ctx)
            }
        }
        var status = 0
        _ = ccurl_getinfo_long(h, CURLINFO_RESPONSE_CODE, &status)
        var seconds = 0.0
        _ = ccurl_getinfo_double(h, CURLINFO_TOTAL_TIME, &seconds)
        let elapsed = Duration.milliseconds(Int64(seconds * 1000))
        configuration.logger?.debug("http", metadata: ["method": "\(method)", "url": "\(request.redactedURL)",
                                                       "status": "\(status)", "ms": "\(Int(seconds * 1000))"])
        return HTTPResponse(status: status, headers: state.headers, body: state.body, request: request, totalTime: elapsed)
    }

    /// Convenience: GET `url` (with `query`), default timeouts.
    public func get(_ url: String, query: [(String, String)] = [], headers: HTTPHeaders = HTTPHeaders())
        throws(HTTPError) -> HTTPResponse {
        try send(.get(url, query: query, headers: headers))
    }

    // MARK: - Internals

    private func validate(_ request: HTTPRequest, context: (String, CURLcode?) -> HTTPErrorContext) throws(HTTPError) {
        let lower = request.url.lowercased()
        guard lower.hasPrefix("http://") || lower.hasPrefix("https://"), request.url.count > 8,
              !request.url.unicodeScalars.contains(where: { $0.value <= 0x20 || $0.value == 0x7F }) else {
            throw .invalidURL(context("URL must be an absolute http(s) URL without spaces", nil))
        }
        for f in request.headers {
            let bad = f.name.isEmpty || f.name.contains(where: { $0 == ":" || $0.isWhitespace || !$0.isASCII })
                || f.value.containsLineBreakOrNUL
            if bad { throw .invalidRequest(context("invalid header field '\(f.name)'", nil)) }
        }
        guard request.method.rawValue.allSatisfy({ $0.isLetter }) && !request.method.rawValue.isEmpty else {
            throw .invalidRequest(context("invalid method", nil))
        }
    }

    /// Sets every option for one transfer on a freshly reset handle. String options are copied by libcurl.
    private func configure(_ h: UnsafeMutableRawPointer, _ request: HTTPRequest,
                           _ headerList: inout UnsafeMutablePointer<curl_slist>?) {
        pool.attachShare(h)
        _ = ccurl_setopt_str(h, CURLOPT_URL, request.url)
        _ = ccurl_setopt_long(h, CURLOPT_NOSIGNAL, 1)
        _ = ccurl_setopt_str(h, CURLOPT_PROTOCOLS_STR, "http,https")
        _ = ccurl_setopt_long(h, CURLOPT_TCP_KEEPALIVE, 1)
        _ = ccurl_setopt_long(h, CURLOPT_CONNECTTIMEOUT_MS,
                              (request.connectTimeout ?? configuration.connectTimeout).curlMilliseconds)
        _ = ccurl_setopt_long(h, CURLOPT_TIMEOUT_MS, (request.timeout ?? configuration.timeout).curlMilliseconds)
        _ = ccurl_setopt_long(h, CURLOPT_SSL_VERIFYPEER, 1)
        _ = ccurl_setopt_long(h, CURLOPT_SSL_VERIFYHOST, 2)
        if let ca = configuration.caFile { _ = ccurl_setopt_str(h, CURLOPT_CAINFO, ca) }
        if let ca = configuration.caPath { _ = ccurl_setopt_str(h, CURLOPT_CAPATH, ca) }
        if configuration.followRedirects {
            _ = ccurl_setopt_long(h, CURLOPT_FOLLOWLOCATION, 1)
            _ = ccurl_setopt_long(h, CURLOPT_MAXREDIRS, 5)
            _ = ccurl_setopt_str(h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https")
        }
        if let ua = configuration.userAgent, !request.headers.contains("User-Agent") {
            _ = ccurl_setopt_str(h, CURLOPT_USERAGENT, ua)
        }
        if !request.headers.contains("Accept-Encoding") {
            _ = ccurl_setopt_str(h, CURLOPT_ACCEPT_ENCODING, "")  // every encoding libcurl can decode
        }

        let method = request.method
        if let body = request.body {
            _ = ccurl_setopt_off(h, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(body.count))
            if body.isEmpty {
                _ = ccurl_setopt_str(h, CURLOPT_COPYPOSTFIELDS, "")
            } else {
                body.withUnsafeBytes { raw in _ = ccurl_setopt_ptr(h, CURLOPT_COPYPOSTFIELDS, raw.baseAddress) }
            }
            if method != .post { _ = ccurl_setopt_str(h, CURLOPT_CUSTOMREQUEST, method.rawValue) }
        } else if method == .get {
            _ = ccurl_setopt_long(h, CURLOPT_HTTPGET, 1)
        } else if method == .head {
            _ = ccurl_setopt_long(h, CURLOPT_NOBODY, 1)
        } else if method == .post {
            _ = ccurl_setopt_long(h, CURLOPT_POST, 1)
            _ = ccurl_setopt_off(h, CURLOPT_POSTFIELDSIZE_LARGE, 0)
            _ = ccurl_setopt_str(h, CURLOPT_COPYPOSTFIELDS, "")
        } else {
            _ = ccurl_setopt_str(h, CURLOPT_CUSTOMREQUEST, method.rawValue)
        }

        for f in request.headers {
            // "Name;" sends an empty header; "Name:" would remove it.
            let line = f.value.isEmpty ? "\(f.name);" : "\(f.name): \(f.value)"
            headerList = curl_slist_append(headerList, line)
        }
        if !request.headers.contains("Expect") { headerList = curl_slist_append(headerList, "Expect:") }
        _ = ccurl_setopt_slist(h, CURLOPT_HTTPHEADER, headerList)
    }

    /// Removes the query string (and userinfo) of `url` from libcurl's message, should it quote the URL.
    private func scrub(_ message: String, request: HTTPRequest) -> String {
        let url = request.url
        var m = message
        // libcurl may quote the URL or a part of it: no secret path segment survives, in any encoding.
        for form in URLRedaction.secretForms(in: url, secretPathSegments: request.secretPathSegments) {
            m = m.replacingOccurrences(of: form, with: URLRedaction.placeholder)
        }
        if let q = url.firstIndex(of: "?") { m = m.replacingOccurrences(of: String(url[q...]), with: "?…") }
        if let schemeEnd = url.range(of: "://"),
           let at = url[schemeEnd.upperBound...].prefix(while: { $0 != "/" }).lastIndex(of: "@") {
            m = m.replacingOccurrences(of: String(url[schemeEnd.upperBound..<at]), with: "…")
        }
        return m
    }
}

/// A curl easy handle owned by exactly one party at a time (the pool, or one `send` call).
struct EasyHandle: @unchecked Sendable {
    let raw: UnsafeMutableRawPointer
}

/// Idle easy handles plus the share handle they all join.
///
/// The idle handles are kept in `stripes` (up to 16) of their own, each behind its own lock; a thread checks out
/// from and checks in to the stripe its thread id picks, and looks in the others only when that one is empty, before
/// making a new handle. One list behind one lock was the busiest lock of a worker at 1,000 calls in flight (its
/// waits went through the kernel: issue 38, `perf` of bench/http-bound.sh).
///
/// Thread rules: `checkout`/`checkin` may be called from any thread (each stripe guarded by its mutex); a checked-out
/// handle belongs to its caller until `checkin`. The share handle's own locking is `ShareLocks`.
/// Invariant: at most `maxIdle` idle handles in all (`perStripe` in each stripe).
final class EasyHandlePool: @unchecked Sendable {
    /// One stripe's idle handles.
    private final class Stripe: Sendable {
        let idle = Mutex<[EasyHandle]>([])
    }

    private let stripes: [Stripe]
    private let perStripe: Int
    private let share: UnsafeMutableRawPointer?
    private let shareLocks = ShareLocks()

    init(maxIdle: Int) {
        let maxIdle = max(0, maxIdle)
        let count = max(1, min(16, maxIdle))
        stripes = (0..<count).map { _ in Stripe() }
        perStripe = maxIdle / count
        share = curl_share_init()
        if let share {
            _ = ccurl_share_setopt_ptr(share, CURLSHOPT_USERDATA, Unmanaged.passUnretained(shareLocks).toOpaque())
            _ = ccurl_share_setopt_lockcb(share) { _, data, _, user in
                Unmanaged<ShareLocks>.fromOpaque(user!).takeUnretainedValue().lock(data.rawValue)
            }
            _ = ccurl_share_setopt_unlockcb(share) { _, data, user in
                Unmanaged<ShareLocks>.fromOpaque(user!).takeUnretainedValue().unlock(data.rawValue)
            }
            _ = ccurl_share_setopt_long(share, CURLSHOPT_SHARE, Int(CURL_LOCK_DATA_DNS.rawValue))
            _ = ccurl_share_setopt_long(share, CURLSHOPT_SHARE, Int(CURL_LOCK_DATA_SSL_SESSION.rawValue))
        }
    }

    deinit {
        for stripe in stripes {
            stripe.idle.withLock { handles in
                for h in handles { curl_easy_cleanup(h.raw) }
                handles.removeAll()
            }
        }
        if let share { curl_share_cleanup(share) }
    }

    /// The calling thread's stripe (its pthread id, mixed: ids are aligned addresses).
    private var home: Int {
        stripes.count == 1 ? 0 : Int((UInt64(pthread_self()) &* 0x9E37_79B9_7F4A_7C15) >> 40) % stripes.count
    }

    /// An idle handle (its connections still open) or a new one; nil only if libcurl cannot allocate.
    func checkout() -> EasyHandle? {
        let first = home
        for offset in 0..<stripes.count {
            if let h = stripes[(first + offset) % stripes.count].idle.withLock({ $0.popLast() }) { return h }
        }
        guard CurlRuntime.initialize() else { return nil }
        return curl_easy_init().map(EasyHandle.init)
    }

    /// Resets `h` (keeps its connection and caches) and keeps it for reuse in the thread's stripe, or frees it when
    /// that stripe is full.
    func checkin(_ h: EasyHandle) {
        curl_easy_reset(h.raw)
        let kept = stripes[home].idle.withLock { idle -> Bool in
            guard idle.count < perStripe else { return false }
            idle.append(h)
            return true
        }
        if !kept { curl_easy_cleanup(h.raw) }
    }

    func attachShare(_ h: UnsafeMutableRawPointer) {
        if let share { _ = ccurl_setopt_ptr(h, CURLOPT_SHARE, share) }
    }
}

/// One lock per `curl_lock_data` kind, for the share handle's lock/unlock callbacks.
/// NSLock, not `Mutex`: libcurl locks in one callback and unlocks in another, which `Mutex.withLock` cannot express.
final class ShareLocks: @unchecked Sendable {
    private let locks: [NSLock] = (0..<16).map { _ in NSLock() }
    func lock(_ kind: UInt32) { locks[Int(kind) % locks.count].lock() }
    func unlock(_ kind: UInt32) { locks[Int(kind) % locks.count].unlock() }
}
