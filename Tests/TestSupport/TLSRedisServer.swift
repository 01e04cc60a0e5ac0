import Foundation
import WorkersQueue

/// A test certificate authority and the certificates the TLS tests need, made by the `openssl` command in a
/// temporary directory (P-256 keys, valid two days):
/// - `ca.crt`: the test CA (self-signed, in no system store);
/// - `server.crt`/`server.key`: signed by the CA for `localhost` and `127.0.0.1` (what the server shows);
/// - `client.crt`/`client.key`: signed by the CA (for `tls-auth-clients yes`);
/// - `stranger.crt`/`stranger.key`: signed by the CA for `other.example` only (a valid certificate, wrong name);
/// - `self-signed.crt`/`self-signed.key`: its own issuer, for `localhost` and `127.0.0.1`.
/// Immutable once made; `remove()` deletes the directory.
public struct TLSTestCertificates: Sendable {
    public let directory: URL

    public init() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("redis-tls-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        guard let openssl = TestServices.which("openssl") else { throw Failure("the openssl command is not installed") }
        let dir = directory.path
        func run(_ arguments: [String]) throws {
            let result = try ChildProcess.run(openssl, arguments)
            guard result.status == 0 else { throw Failure("openssl \(arguments.first ?? ""): \(result.stderr)") }
        }
        let curve = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
        try run(["req", "-x509"] + curve + ["-keyout", "\(dir)/ca.key", "-out", "\(dir)/ca.crt", "-days", "2",
                 "-subj", "/CN=Workers test CA"])
        for (name, subject, names) in [("server", "localhost", "DNS:localhost,IP:127.0.0.1"),
                                       ("client", "worker", "DNS:worker"),
                                       ("stranger", "other.example", "DNS:other.example")] {
            try "subjectAltName=\(names)\n".write(toFile: "\(dir)/\(name).ext", atomically: true, encoding: .utf8)
            try run(["req"] + curve + ["-keyout", "\(dir)/\(name).key", "-out", "\(dir)/\(name).csr", "-subj", "/CN=\(subject)"])
            try run(["x509", "-req", "-in", "\(dir)/\(name).csr", "-CA", "\(dir)/ca.crt", "-CAkey", "\(dir)/ca.key",
                     "-CAcreateserial", "-out", "\(dir)/\(name).crt", "-days", "2", "-extfile", "\(dir)/\(name).ext"])
        }
        try run(["req", "-x509"] + curve + ["-keyout", "\(dir)/self-signed.key", "-out", "\(dir)/self-signed.crt",
                 "-days", "2", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
    }

    public func path(_ file: String) -> String { directory.appendingPathComponent(file).path }

    public func remove() { try? FileManager.default.removeItem(at: directory) }

    public struct Failure: Error, CustomStringConvertible {
        public let description: String
        init(_ description: String) { self.description = description }
    }
}

/// A redis-server of the test's own speaking TLS only (`--port 0 --tls-port P`), on a free loopback port, with the
/// test CA's certificates and two ACL users besides `default` (which keeps no password, as on the dev server):
/// `worker` / `worker-secret` (exactly `RedisAccessCheck.fleetPermissions`: what docs/deploy.md tells operators to
/// grant), `no-scripts` / `no-scripts-secret` (everything but `@scripting`) and `sentinel` / `sentinel-secret`
/// (everything, for a Sentinel's own link).
/// The caller stops it.
public final class TLSRedisServer {
    public static let workerPassword = "worker-secret"
    public static let noScriptsPassword = "no-scripts-secret"
    public static let sentinelPassword = "sentinel-secret"

    public let port: Int
    public let certificates: TLSTestCertificates
    private let child: ChildProcess

    /// `certificate`: which pair the server shows (`server`, `stranger`, `self-signed`); `authClients`: whether a
    /// client must show a certificate signed by the CA.
    /// `port`: nil for a free one (a restart passes the old one).
    public init(certificates: TLSTestCertificates, certificate: String = "server", authClients: Bool = false,
                port: Int? = nil, extra: [String] = []) throws {
        self.certificates = certificates
        self.port = try port ?? TestServices.closedPort()
        child = try TestServices.startRedisServer(port: 0, [
            "--tls-port", "\(self.port)",
            "--tls-cert-file", certificates.path("\(certificate).crt"),
            "--tls-key-file", certificates.path("\(certificate).key"),
            "--tls-ca-cert-file", certificates.path("ca.crt"),
            "--tls-auth-clients", authClients ? "yes" : "no",
            "--user", "worker", "on", ">\(Self.workerPassword)"] + RedisAccessCheck.fleetPermissions.split(separator: " ").map(String.init) + [
            "--user", "no-scripts", "on", ">\(Self.noScriptsPassword)", "~*", "&*", "+@all", "-@scripting",
            "--user", "sentinel", "on", ">\(Self.sentinelPassword)", "~*", "&*", "+@all",
        ] + extra)
        let ready = eventually(timeout: 10) { Self.listening(self.port) }
        guard ready else { stop(); throw TLSTestCertificates.Failure("redis-server with TLS did not start: \(child.stderr)\(child.stdout)") }
    }

    /// `rediss://` to this server as `user` (nil: no login), through `host` (`localhost` or `127.0.0.1`), with the
    /// test CA unless `caFile` is false, and `query` appended.
    public func url(user: String? = "worker", host: String = "localhost", database: Int = 0, caFile: Bool = true,
                    query: [String] = []) -> String {
        let passwords = ["worker": Self.workerPassword, "no-scripts": Self.noScriptsPassword, "sentinel": Self.sentinelPassword]
        let login = user.map { "\($0):\(passwords[$0] ?? "")@" } ?? ""
        let parameters = (caFile ? ["ca_file=\(certificates.path("ca.crt"))"] : []) + query
        return "rediss://\(login)\(host):\(port)/\(database)" + (parameters.isEmpty ? "" : "?" + parameters.joined(separator: "&"))
    }

    public var pid: Int32 { child.pid }

    /// What the server wrote (its log), for a failing test's message.
    public var output: String { child.stdout + child.stderr }

    public func stop() {
        child.signal(SIGKILL)
        _ = child.wait(timeout: 5)
    }

    private static func listening(_ port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        addr.sin_port = in_port_t(UInt16(port).bigEndian)
        return withUnsafePointer(to: &addr) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
    }
}
