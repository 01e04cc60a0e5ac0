import CCurl

/// Process-wide libcurl set-up.
///
/// `curl_global_init` must run once before any other libcurl call and, on older libcurl builds, before other
/// threads start (it is not thread-safe there). Call `CurlRuntime.initialize()` from `main` early; every
/// `HTTPClient` / `SMTPSender` initialiser calls it too, which is harmless (a Swift `static let` runs once).
public enum CurlRuntime {
    private static let initResult: CURLcode = curl_global_init(Int(CURL_GLOBAL_ALL))

    /// Runs `curl_global_init(CURL_GLOBAL_ALL)` the first time; returns whether it succeeded.
    @discardableResult
    public static func initialize() -> Bool { initResult == CURLE_OK }

    /// The libcurl version string, e.g. "libcurl/7.88.1 OpenSSL/3.0.11 ...".
    public static var version: String { String(cString: curl_version()) }
}

extension Duration {
    /// Whole milliseconds, at least 1 for any positive duration (libcurl treats 0 as "no timeout").
    var curlMilliseconds: Int {
        let (s, atto) = components
        let ms = s * 1000 + atto / 1_000_000_000_000_000
        if ms <= 0 { return (s > 0 || atto > 0) ? 1 : 0 }
        return Int(clamping: ms)
    }
}
