import Foundation

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
