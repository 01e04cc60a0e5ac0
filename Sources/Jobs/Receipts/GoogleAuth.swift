import _CryptoExtras
import Foundation
import WorkersHTTP
import Synchronization
import Workers

/// A Google service-account key (the JSON file downloaded from the Cloud console).
///
/// `description` never includes the private key.
public struct GoogleServiceAccount: Sendable, CustomStringConvertible, CustomDebugStringConvertible {
    public let clientEmail: String
    public let privateKeyID: String?
    public let tokenURI: String?
    public let projectID: String?
    let privateKey: _RSA.Signing.PrivateKey

    public struct InvalidKey: Error, Sendable, CustomStringConvertible {
        public let description: String
    }

    private struct File: Decodable {
        let type: String?
        let client_email: String?
        let private_key: String?
        let private_key_id: String?
        let token_uri: String?
        let project_id: String?
    }

    public init(json: Secret) throws(InvalidKey) {
        guard let file = try? JSONDecoder().decode(File.self, from: Data(json.value.utf8)) else {
            throw InvalidKey(description: "service-account JSON cannot be parsed")
        }
        if let type = file.type, type != "service_account" {
            throw InvalidKey(description: "type is \(type), expected service_account")
        }
        guard let email = file.client_email, !email.isEmpty else { throw InvalidKey(description: "client_email missing") }
        guard let pem = file.private_key, let key = try? _RSA.Signing.PrivateKey(pemRepresentation: pem) else {
            throw InvalidKey(description: "private_key missing or not an RSA PEM key")
        }
        clientEmail = email
        privateKeyID = file.private_key_id
        tokenURI = file.token_uri
        projectID = file.project_id
        privateKey = key
    }

    public var description: String { "GoogleServiceAccount(\(clientEmail), key <redacted>)" }
    public var debugDescription: String { description }
}

/// OAuth2 access tokens for the Play Developer API by the JWT bearer grant (RFC 7523), cached until shortly
/// before they expire.
///
/// Thread rules: one instance per process, shared by every pool thread. The cache is guarded by a mutex which
/// is *held while fetching*, so concurrent jobs wait for the one fetch instead of each asking Google
/// (single flight); a fetch is bounded by the request timeout. `invalidate` drops a token the API refused (401).
public final class GoogleAccessTokenProvider: Sendable {
    public static let scope = "https://www.googleapis.com/auth/androidpublisher"
    /// A cached token is replaced this long before its announced expiry.
    public static let refreshMargin: TimeInterval = 120

    private struct Cached { let token: String; let expiresAt: Date }
    private struct Header: Encodable { let alg = "RS256"; let typ = "JWT"; let kid: String? }
    private struct Claims: Encodable { let iss: String; let scope: String; let aud: String; let iat: Int64; let exp: Int64 }
    private struct TokenAnswer: Decodable { let access_token: String; let expires_in: Double?; let token_type: String? }

    private let account: GoogleServiceAccount
    private let tokenURL: String
    private let http: StoreHTTP
    private let cache = Mutex<Cached?>(nil)
    private let fetches = Atomic<Int>(0)

    init(account: GoogleServiceAccount, tokenURL: String, http: StoreHTTP) {
        self.account = account
        self.tokenURL = tokenURL
        self.http = http
    }

    /// How many tokens this provider asked Google for (for tests and metrics).
    public var fetchCount: Int { fetches.load(ordering: .relaxed) }

    /// A valid access token: the cached one, or a new one.
    public func token(cancellation: HTTPCancellation?, now: Date = Date()) throws -> String {
        try cache.withLock { cached in
            if let c = cached, c.expiresAt.timeIntervalSince(now) > Self.refreshMargin { return c.token }
            let fresh = try fetch(cancellation: cancellation, now: now)
            cached = fresh
            return fresh.token
        }
    }

    /// Forgets `token` if it is the cached one (the API said 401: revoked or expired early).
    public func invalidate(_ token: String) {
        cache.withLock { cached in if cached?.token == token { cached = nil } }
    }

    private func fetch(cancellation: HTTPCancellation?, now: Date) throws -> Cached {
        let iat = Int64(now.timeIntervalSince1970)
        let assertion: String
        do {
            assertion = try JWTSigner.rs256(header: Header(kid: account.privateKeyID),
                                            claims: Claims(iss: account.clientEmail, scope: Self.scope, aud: tokenURL,
                                                           iat: iat, exp: iat + 3600),
                                            key: account.privateKey)
        } catch {
            throw JobError.permanent("cannot sign the Google service-account JWT: \(error)")
        }
        fetches.add(1, ordering: .relaxed)
        let request = HTTPRequest.form(tokenURL, [("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer"),
                                                  ("assertion", assertion)])
        let response = try http.send(request, service: "Google OAuth", cancellation: cancellation)
        try StoreHTTP.throwIfRetryable(response, service: "Google OAuth")
        guard response.isSuccess else {
            // invalid_grant & co.: our credentials are refused. The purchase is still valid: retry with backoff
            // (an operator fixes the key) rather than dropping the user's purchase.
            let error = (try? response.jsonObject())?["error"] as? String ?? "HTTP \(response.status)"
            throw StoreUnavailable("Google OAuth", "token request refused (\(error)); check the service account")
        }
        let answer = try StoreHTTP.decode(TokenAnswer.self, response, service: "Google OAuth")
        let lifetime = min(max(answer.expires_in ?? 3600, 0), 3600)
        return Cached(token: answer.access_token, expiresAt: now.addingTimeInterval(lifetime))
    }
}
