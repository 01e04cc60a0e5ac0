import Foundation
import WorkersQueue
import Synchronization

/// The dashboard's two checks, fixed for the life of the process (immutable, so any request task may read it).
///
/// - Credential: when set (`WORKERCTL_WEB_TOKEN` or `--password-file`), every request must carry it, as a Bearer
///   token or as the password of HTTP Basic (any user name, so a browser's login prompt works). Required for any
///   host other than loopback (`WebConfiguration.validate`).
/// - CSRF: every state-changing request is a POST whose form carries `csrf` equal to this process's random token
///   (32 bytes from the system's CSPRNG, hex). The pages embed it in their forms; another site cannot read it.
/// Both comparisons are constant-time.
struct WebSecurity: Sendable {
    let credential: String?
    let csrfToken: String

    init(credential: String?) {
        self.credential = credential
        var generator = SystemRandomNumberGenerator()
        self.csrfToken = (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &generator)) }.joined()
    }

    /// Whether the `Authorization` header value carries the credential (always true without one).
    func authorizes(_ authorization: String?) -> Bool {
        guard let credential else { return true }
        guard let authorization else { return false }
        if authorization.hasPrefix("Bearer ") {
            return Self.constantTimeEqual(String(authorization.dropFirst(7)), credential)
        }
        if authorization.hasPrefix("Basic "),
           let decoded = Data(base64Encoded: String(authorization.dropFirst(6))).flatMap({ String(data: $0, encoding: .utf8) }),
           let colon = decoded.firstIndex(of: ":") {
            return Self.constantTimeEqual(String(decoded[decoded.index(after: colon)...]), credential)
        }
        return false
    }

    /// Whether a submitted form's `csrf` field is this process's token.
    func acceptsCSRF(_ submitted: String?) -> Bool {
        guard let submitted else { return false }
        return Self.constantTimeEqual(submitted, csrfToken)
    }

    /// Compares every byte of the longer input (no early exit on the first difference).
    static func constantTimeEqual(_ a: String, _ b: String) -> Bool {
        let x = Array(a.utf8), y = Array(b.utf8)
        var difference = UInt8(x.count == y.count ? 0 : 1)
        for index in 0..<max(x.count, y.count) {
            difference |= (index < x.count ? x[index] : 0) ^ (index < y.count ? y[index] : 0)
        }
        return difference == 0
    }
}

extension WebSecurity {
    /// The hosts a dashboard without a credential answers to (DNS-rebinding guard, review M4): a page on another
    /// site whose name was rebound to 127.0.0.1 sends its own name as `Host`, so it gets 421, not a page.
    static let loopbackHostNames: Set<String> = ["127.0.0.1", "localhost", "[::1]"]

    /// Whether `authority` (the request's `Host`) is `127.0.0.1`, `localhost` or `[::1]` with `port` (the port the
    /// server is bound to; a missing port means 80). Any other name, an IP other than these, a different port or a
    /// malformed value is false. The port is read through `Bounded` (never a trap).
    static func isLoopbackAuthority(_ authority: String?, port: Int) -> Bool {
        guard let authority, port > 0 else { return false }
        let host: Substring
        let portText: Substring?
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { return false }
            host = authority[...close]
            let rest = authority[authority.index(after: close)...]
            if rest.isEmpty { portText = nil } else {
                guard rest.first == ":" else { return false }
                portText = rest.dropFirst()
            }
        } else {
            let parts = authority.split(separator: ":", omittingEmptySubsequences: false)
            guard parts.count <= 2 else { return false }
            host = parts[0]
            portText = parts.count == 2 ? parts[1] : nil
        }
        guard loopbackHostNames.contains(host.lowercased()) else { return false }
        guard let portText else { return port == 80 }
        guard portText.allSatisfy(\.isASCIIDigitCharacter) else { return false }
        return Bounded.int(parsing: portText, in: 0...65_535) == port
    }

    /// Whether a state-changing request came from this dashboard's own pages: when the browser says where it came
    /// from (`Sec-Fetch-Site`), it must be `same-origin`; when it sends `Origin`, that must be this request's own
    /// `Host` (http or https). A request with neither (curl, a script) is left to the CSRF token.
    static func isSameOrigin(origin: String?, fetchSite: String?, authority: String?) -> Bool {
        if let fetchSite, fetchSite.lowercased() != "same-origin" { return false }
        guard let origin else { return true }
        guard let authority, !authority.isEmpty else { return false }
        let lowered = origin.lowercased(), expected = authority.lowercased()
        return lowered == "http://" + expected || lowered == "https://" + expected
    }
}

extension Character {
    fileprivate var isASCIIDigitCharacter: Bool { isASCII && isNumber }
}

/// The port the server listens on, known once it is bound (`--port 0` picks one). Written once by the server's
/// `onServerRunning`, read by every request; 0 until then, which the Host check refuses (fails closed).
final class BoundPort: Sendable {
    private let value = Atomic<Int>(0)
    init() {}
    var port: Int { value.load(ordering: .acquiring) }
    func set(_ port: Int) { value.store(port, ordering: .releasing) }
}

/// Counts refused credentials in fixed windows of `window`; once `limit` are refused in one window, `blockedFor`
/// says how many whole seconds remain of it (review L5). For the whole process, not per client (Hummingbird's
/// basic context does not carry the peer address; behind a proxy every client would share one anyway).
/// Thread-safe (a mutex); any request task.
final class FailureThrottle: Sendable {
    static let limit = 20
    static let window: Duration = .seconds(60)

    private let state = Mutex<(start: ContinuousClock.Instant, failures: Int)>((ContinuousClock.now, 0))

    /// Seconds until requests are checked again (at least 1), or nil when they are checked now.
    func blockedFor(now: ContinuousClock.Instant = .now) -> Int? {
        state.withLock { state in
            let end = state.start.advanced(by: Self.window)
            if now >= end { state = (now, 0); return nil }
            guard state.failures >= Self.limit else { return nil }
            let left = now.duration(to: end).components.seconds
            return Bounded.int(left + 1, in: 1...Bounded.int(Self.window.components.seconds, in: 1...86_400))
        }
    }

    func recordFailure(now: ContinuousClock.Instant = .now) {
        state.withLock { state in
            if now >= state.start.advanced(by: Self.window) { state = (now, 0) }
            state.failures += 1
        }
    }
}
