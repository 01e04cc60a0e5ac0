import CWorkersCurl

/// Process-wide libcurl set-up.
///
/// `curl_global_init` must run once before any other libcurl call. On a libcurl built thread-safe
/// (`CURL_VERSION_THREADSAFE`, libcurl ≥ 7.84 with atomics: Debian 12's 7.88 is) it may run on any thread at any
/// time, so it waits for the first transfer: it loads and configures OpenSSL, about 2.4 MB of resident memory that a
/// worker running no HTTP job never needs. On an older build it is not thread-safe and must run before other threads
/// start: `prepareAtStartup()` then runs it at once. Every path that makes a curl handle calls `initialize()` first
/// (`HTTPClient`'s handle pool, Mail's `SMTPSender.send`); a Swift `static let` runs once, other callers wait for it.
public enum CurlRuntime {
    private static let initResult: CURLcode = curl_global_init(Int(CURL_GLOBAL_ALL))

    /// Runs `curl_global_init(CURL_GLOBAL_ALL)` the first time; returns whether it succeeded.
    @discardableResult
    public static func initialize() -> Bool { initResult == CURLE_OK }

    /// Whether this libcurl's global initialisation is thread-safe, so it may wait for the first transfer.
    /// Reading the version information initialises nothing.
    public static var initializesSafelyOnDemand: Bool { ccurl_is_threadsafe() != 0 }

    /// Call from `main` before starting threads: initialises libcurl now when it must (a libcurl that is not
    /// thread-safe), otherwise leaves it to the first transfer. Returns false if an initialisation made now failed.
    @discardableResult
    public static func prepareAtStartup() -> Bool { initializesSafelyOnDemand ? true : initialize() }

    /// The libcurl version string, e.g. "libcurl/7.88.1 OpenSSL/3.0.11 ...".
    public static var version: String { String(cString: curl_version()) }
}

extension Duration {
    /// Whole milliseconds, at least 1 for any positive duration (libcurl treats 0 as "no timeout").
    /// `package`: Mail's `SMTPSender` sets its timeouts with it too.
    package var curlMilliseconds: Int {
        let (s, atto) = components
        let ms = s * 1000 + atto / 1_000_000_000_000_000
        if ms <= 0 { return (s > 0 || atto > 0) ? 1 : 0 }
        return Int(clamping: ms)
    }
}
