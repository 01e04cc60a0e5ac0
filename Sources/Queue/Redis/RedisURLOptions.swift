import Foundation

/// The scheme and query of a Redis URL: which of the four schemes (`redis://`, `rediss://`, `redis+sentinel://`,
/// `rediss+sentinel://`), the URL without its query (`body`, for the parsers of the address part), and the query's
/// parameters:
///
/// | parameter | meaning |
/// |---|---|
/// | `ca_file=PATH` | PEM bundle of the CAs to trust instead of the system's (TLS only) |
/// | `cert_file=PATH`, `key_file=PATH` | client certificate and key for `tls-auth-clients` (TLS only; the key may sit in `cert_file`) |
/// | `server_name=NAME` | the name the certificate must carry and the SNI sent, when it is not the dialled host (TLS only) |
/// | `insecure` | accept any certificate: encrypted, not authenticated; warned at start (TLS only) |
/// | `password_file=PATH` | read the password from this file at every connect (instead of one in the URL) |
///
/// Values are percent-decoded. An unknown parameter, one given twice, a TLS parameter on a plain scheme, or a
/// `password=` (which other clients read there) is refused with a message naming the parameter (an unknown one by its
/// position) — never a value.
/// Pure, total.
struct RedisURLOptions {
    static let schemes: [(prefix: String, tls: Bool, sentinel: Bool)] = [
        ("redis://", false, false), ("rediss://", true, false),
        ("redis+sentinel://", false, true), ("rediss+sentinel://", true, true),
    ]
    static let tlsParameters: Set<String> = ["ca_file", "cert_file", "key_file", "server_name", "insecure"]
    static let parameters: Set<String> = tlsParameters.union(["password_file"])

    var isSentinel: Bool
    /// The URL up to its query (`?` after the login, so a `?` in a password stays in the body).
    var body: Substring
    var tls: RedisTLSSettings?
    var passwordFile: String?

    init(url: String) throws(RedisError) {
        guard let scheme = Self.schemes.first(where: { url.hasPrefix($0.prefix) }) else {
            throw .invalidURL("'\(RedisEndpoint.redacted(url))' does not start with redis://, rediss://, redis+sentinel:// or rediss+sentinel://")
        }
        isSentinel = scheme.sentinel
        let afterLogin = url.lastIndex(of: "@") ?? url.startIndex
        let queryStart = url[afterLogin...].firstIndex(of: "?")
        body = url[..<(queryStart ?? url.endIndex)]
        var values: [String: String] = [:]
        if let queryStart {
            for (offset, pair) in url[url.index(after: queryStart)...].split(separator: "&").enumerated() {
                let position = offset + 1
                let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                let name = String(parts[0])
                guard Self.parameters.contains(name) else {
                    if name.lowercased() == "password" {
                        throw .invalidURL("a password in the query is not read: put it in the login (redis://user:password@host) or in a password_file")
                    }
                    // Its name is not shown: a query written by mistake may hold a secret anywhere.
                    throw .invalidURL("parameter \(position) of the query is unknown (known: \(Self.parameters.sorted().joined(separator: ", ")))")
                }
                guard values[name] == nil else { throw .invalidURL("parameter \(name) given twice") }
                let raw = parts.count == 2 ? String(parts[1]) : ""
                values[name] = raw.removingPercentEncoding ?? raw
            }
        }
        if !scheme.tls, let name = values.keys.sorted().first(where: Self.tlsParameters.contains) {
            throw .invalidURL("\(name) is a TLS parameter: the URL must start with rediss:// (or rediss+sentinel://)")
        }
        for name in ["ca_file", "cert_file", "key_file", "server_name", "password_file"] where values[name]?.isEmpty == true {
            throw .invalidURL("parameter \(name) is empty")
        }
        if values["key_file"] != nil && values["cert_file"] == nil {
            throw .invalidURL("key_file without cert_file")
        }
        passwordFile = values["password_file"]
        if scheme.tls {
            var verifies = true
            if let insecure = values["insecure"] {
                switch insecure.lowercased() {
                case "", "true", "1", "yes": verifies = false
                case "false", "0", "no": verifies = true
                default: throw .invalidURL("parameter insecure takes no value (or true/false)")
                }
            }
            tls = RedisTLSSettings(caFile: values["ca_file"], certificateFile: values["cert_file"],
                                   keyFile: values["key_file"], serverName: values["server_name"], verifiesPeer: verifies)
        }
    }
}
