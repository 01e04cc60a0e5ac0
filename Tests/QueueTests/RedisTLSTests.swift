import Foundation
import WorkersQueue
import WorkersTestServices
import XCTest

/// `rediss://` against Debian's redis-server started with `--tls-port` and a test CA (`TLSRedisServer`): what a
/// managed Redis (ElastiCache with in-transit encryption, Azure Cache, Redis Cloud) asks of a client.
///
/// `ConnectThrottle` holds back a server (host, port, database) for a moment after a failed attempt, whatever the
/// cause, so each attempt expected to fail names a database of its own (and the next attempt to the same one
/// waits its turn).
final class RedisTLSTests: XCTestCase {
    nonisolated(unsafe) static var certificates: TLSTestCertificates!
    nonisolated(unsafe) static var server: TLSRedisServer!

    override class func setUp() {
        super.setUp()
        do {
            certificates = try TLSTestCertificates()
            server = try TLSRedisServer(certificates: certificates)
        } catch {
            XCTFail("cannot start the TLS test server: \(error)")
        }
    }

    override class func tearDown() {
        server?.stop()
        certificates?.remove()
        super.tearDown()
    }

    private var server: TLSRedisServer { Self.server }

    func testAVerifiedLinkCarriesCommandsPipelinesScriptsAndLargeValues() throws {
        let connection = try RedisConnection(url: server.url(database: 5))
        try connection.command("FLUSHDB")
        XCTAssertEqual(try connection.command("PING").string, "PONG")
        // A value larger than one TLS record (16 KiB) and than the read buffer, both ways: partial writes and
        // a reply fed to hiredis's reader in many pieces.
        let large = [UInt8]((0..<3_000_000).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        try connection.command("SET", "large", large)
        XCTAssertEqual(try connection.command("GET", "large").bytes, large)
        let replies = try connection.pipeline((0..<500).map { ["INCR", "counter-\($0 % 7)"] })
        XCTAssertEqual(replies.count, 500)
        XCTAssertEqual(try connection.command("GET", "counter-0").string, "72")
        // Our scripts run as on a plain link (SCRIPT LOAD, EVALSHA, NOSCRIPT handling).
        try connection.command("RPUSH", "queue:tls", "a", "b")
        XCTAssertEqual(try connection.command("LMOVE", "queue:tls", "done", "LEFT", "RIGHT").string, "a")
        // A blocking command that times out answers null, over TLS too.
        XCTAssertEqual(try connection.command("BLMOVE", "empty", "x", "LEFT", "RIGHT", "0.1"), .null)
        // By IP address: the certificate's IP SAN is checked (no SNI is sent for an address).
        let byAddress = try RedisConnection(url: server.url(host: "127.0.0.1", database: 5))
        XCTAssertEqual(try byAddress.command("GET", "counter-0").string, "72")
    }

    func testACertificateForAnotherNameIsRefusedNamingTheName() throws {
        let stranger = try TLSRedisServer(certificates: Self.certificates, certificate: "stranger")
        defer { stranger.stop() }
        XCTAssertThrowsError(try RedisConnection(url: stranger.url())) { error in
            let text = "\(error)"
            XCTAssertTrue(text.contains("hostname mismatch") && text.contains("'localhost'"), text)
        }
        // The same certificate passes when the URL says which name to expect.
        let named = try RedisConnection(url: stranger.url(database: 1, query: ["server_name=other.example"]))
        XCTAssertEqual(try named.command("PING").string, "PONG")
        // And a valid certificate fails against a server_name it does not carry.
        XCTAssertThrowsError(try RedisConnection(url: server.url(database: 7, query: ["server_name=elsewhere.example"]))) { error in
            XCTAssertTrue("\(error)".contains("does not name 'elsewhere.example'"), "\(error)")
        }
    }

    func testACertificateFromAnUntrustedIssuerIsRefusedWithoutTheCA() throws {
        // Without ca_file the system roots decide, and the test CA is not one of them.
        XCTAssertThrowsError(try RedisConnection(url: server.url(database: 8, caFile: false))) { error in
            XCTAssertTrue("\(error)".contains("certificate was refused: self-signed certificate in certificate chain"), "\(error)")
        }
        let selfSigned = try TLSRedisServer(certificates: Self.certificates, certificate: "self-signed")
        defer { selfSigned.stop() }
        XCTAssertThrowsError(try RedisConnection(url: selfSigned.url())) { error in
            XCTAssertTrue("\(error)".contains("certificate was refused: self-signed certificate"), "\(error)")
        }
        // `?insecure` accepts it (encrypted, not authenticated), and the endpoint says so.
        let insecureURL = selfSigned.url(database: 1, caFile: false, query: ["insecure"])
        XCTAssertEqual(try RedisConnection(url: insecureURL).command("PING").string, "PONG")
        let warnings = try RedisEndpoint(url: insecureURL).warnings
        XCTAssertEqual(warnings.count, 1)
        XCTAssertTrue(warnings[0].contains("certificate is not checked"), "\(warnings)")
        XCTAssertEqual(try RedisEndpoint(url: server.url()).warnings, [])
    }

    func testAServerThatAsksForAClientCertificateGetsOneWhenConfigured() throws {
        let strict = try TLSRedisServer(certificates: Self.certificates, authClients: true)
        defer { strict.stop() }
        XCTAssertThrowsError(try RedisConnection(url: strict.url()).command("PING"))
        let withCertificate = strict.url(database: 1, query: ["cert_file=\(Self.certificates.path("client.crt"))",
                                                 "key_file=\(Self.certificates.path("client.key"))"])
        XCTAssertEqual(try RedisConnection(url: withCertificate).command("PING").string, "PONG")
        // A key that is not the certificate's is refused before any byte is sent.
        let mismatched = strict.url(database: 2, query: ["cert_file=\(Self.certificates.path("client.crt"))",
                                            "key_file=\(Self.certificates.path("server.key"))"])
        XCTAssertThrowsError(try RedisConnection(url: mismatched)) { error in
            XCTAssertTrue("\(error)".contains("cannot use the client key") && "\(error)".contains("key values mismatch"), "\(error)")
        }
    }

    func testAnACLUserWithoutScriptingIsToldWhichPermissionIsMissing() throws {
        let allowed = try RedisConnection(url: server.url(user: "worker"))
        XCTAssertNoThrow(try RedisAccessCheck.verify(allowed))
        let limited = try RedisConnection(url: server.url(user: "no-scripts"))
        XCTAssertEqual(try limited.command("PING").string, "PONG")
        XCTAssertThrowsError(try RedisAccessCheck.verify(limited)) { error in
            let refusal = error as? RedisError
            XCTAssertEqual(refusal?.isPermissionRefusal, true, "\(error)")
            let text = "\(error)"
            XCTAssertTrue(text.contains("no permissions to run the 'script|load' command") && text.contains(RedisAccessCheck.fleetPermissions), text)
        }
        // A wrong password is refused at connect, without the password in the message.
        let wrong = server.url(user: nil, database: 10).replacingOccurrences(of: "rediss://", with: "rediss://worker:not-the-password@")
        XCTAssertThrowsError(try RedisConnection(url: wrong)) { error in
            XCTAssertTrue("\(error)".contains("WRONGPASS"), "\(error)")
            XCTAssertFalse("\(error)".contains("not-the-password"), "\(error)")
        }
    }

    func testAPasswordFileIsReadAtEveryConnect() throws {
        let file = Self.certificates.directory.appendingPathComponent("redis-password")
        try "\(TLSRedisServer.workerPassword)\n".write(to: file, atomically: true, encoding: .utf8)
        let url = server.url(user: nil, database: 9).replacingOccurrences(of: "rediss://", with: "rediss://worker@")
            + "&password_file=\(file.path)"
        let connection = try RedisConnection(url: url)
        XCTAssertEqual(try connection.command("PING").string, "PONG")  // as worker: the default user has no password here
        // Rotated: the next connect reads the new content (here a wrong one, so the reconnect is refused).
        try "rotated-away\n".write(to: file, atomically: true, encoding: .utf8)
        connection.close()
        XCTAssertThrowsError(try connection.command("PING")) { error in
            XCTAssertTrue("\(error)".contains("WRONGPASS"), "\(error)")
            XCTAssertFalse("\(error)".contains("rotated-away"), "\(error)")
        }
        try FileManager.default.removeItem(at: file)
        var lastError = ""
        // Once the throttle lets the next attempt through, it fails on the file, naming it.
        XCTAssertTrue(eventually(timeout: 5) {
            do { _ = try RedisConnection(url: url); return false } catch {
                lastError = "\(error)"
                return lastError.contains("cannot read the password file \(file.path)")
            }
        }, lastError)
    }

    func testAnIdleLinkNoticesAHangUpButNotTheServersSessionTickets() throws {
        let connection = try RedisConnection(url: server.url(database: 5))
        XCTAssertEqual(try connection.command("CLIENT", "SETNAME", "tls-idle").string, "OK")
        // TLS 1.3 servers send session tickets after the handshake: read or not, they are no hang-up.
        Thread.sleep(forTimeInterval: 0.2)
        XCTAssertFalse(connection.closeIfPeerHungUp())
        XCTAssertTrue(connection.isConnected)
        let admin = try RedisConnection(url: server.url(database: 5))
        try admin.command("CLIENT", "KILL", "SKIPME", "yes", "TYPE", "normal")
        XCTAssertTrue(eventually(timeout: 5) { connection.closeIfPeerHungUp() })
        XCTAssertFalse(connection.isConnected)
        XCTAssertEqual(try connection.command("PING").string, "PONG")  // the next command reconnects
    }

    func testAPlainClientOnTheTLSPortAndATLSClientOnAPlainPortFailClearly() throws {
        let plainPort = try TestServices.closedPort()
        let plain = try TestServices.startRedisServer(port: plainPort)
        defer { plain.signal(SIGKILL); plain.wait() }
        XCTAssertTrue(eventually(timeout: 10) { (try? RedisConnection(url: "redis://127.0.0.1:\(plainPort)/0")) != nil })
        XCTAssertThrowsError(try RedisConnection(url: "rediss://localhost:\(plainPort)/0?ca_file=\(Self.certificates.path("ca.crt"))",
                                                 commandTimeout: .seconds(1))) { error in
            XCTAssertTrue("\(error)".contains("does the server speak TLS on this port?"), "\(error)")
        }
        XCTAssertThrowsError(try RedisConnection(url: "redis://127.0.0.1:\(server.port)/11").command("PING"))
    }

    func testTLSURLsParseAndRefuseWhatTheyCannotHonour() throws {
        let endpoint = try RedisEndpoint(url: "rediss://u:p@cache.example:6380/2?ca_file=/etc/ca.pem&cert_file=/c.pem&key_file=/k.pem&server_name=x.example")
        XCTAssertEqual(endpoint.tls, RedisTLSSettings(caFile: "/etc/ca.pem", certificateFile: "/c.pem", keyFile: "/k.pem",
                                                      serverName: "x.example", verifiesPeer: true))
        XCTAssertEqual(endpoint.host, "cache.example")
        XCTAssertEqual(endpoint.port, 6380)
        XCTAssertEqual(endpoint.database, 2)
        XCTAssertEqual(endpoint.password, "p")
        XCTAssertEqual(try RedisEndpoint(url: "rediss://h/0").tls, RedisTLSSettings())
        XCTAssertNil(try RedisEndpoint(url: "redis://h/0").tls)
        XCTAssertEqual(try RedisEndpoint(url: "rediss://h/0?insecure").tls?.verifiesPeer, false)
        XCTAssertEqual(try RedisEndpoint(url: "rediss://h/0?insecure=false").tls?.verifiesPeer, true)
        XCTAssertEqual(try RedisEndpoint(url: "redis://u@h/0?password_file=/run/secrets/redis").passwordFile, "/run/secrets/redis")
        let sentinel = try RedisEndpoint(url: "rediss+sentinel://:pw@s1:26379,s2/mymaster/1?ca_file=/ca.pem")
        XCTAssertEqual(sentinel.tls?.caFile, "/ca.pem")
        XCTAssertEqual(sentinel.database, 1)
        XCTAssertEqual(sentinel.password, "pw")
        XCTAssertNil(try RedisEndpoint(url: "redis+sentinel://s1/mymaster").tls)
        // A percent-encoded `?` inside the password belongs to the password, not to a query.
        let question = try RedisEndpoint(url: "rediss://:a%3Fb%3Fc@h/0?insecure")
        XCTAssertEqual(question.password, "a?b?c")
        XCTAssertEqual(question.tls?.verifiesPeer, false)
        for (url, words) in [
            ("redis://h/0?ca_file=/ca.pem", "ca_file is a TLS parameter"),
            ("rediss://h/0?insecure&verify=none", "parameter 2 of the query is unknown (known: ca_file"),
            ("rediss://h/0?password=hunter2hunter2", "a password in the query is not read"),
            ("rediss://h/0?insecure&insecure", "given twice"),
            ("rediss://h/0?insecure=maybe", "insecure takes no value"),
            ("rediss://h/0?key_file=/k.pem", "key_file without cert_file"),
            ("rediss://h/0?ca_file=", "ca_file is empty"),
            ("rediss://:pw@h/0?password_file=/f", "give one of them"),
            ("http://h/0", "does not start with redis://, rediss://"),
        ] {
            XCTAssertThrowsError(try RedisEndpoint(url: url), url) { error in
                XCTAssertTrue("\(error)".contains(words), "\(url): \(error)")
                XCTAssertFalse("\(error)".contains("hunter2"), "\(url): \(error)")
            }
        }
        // The redacted form hides the query (a path may name a user) and the login.
        XCTAssertEqual(RedisEndpoint.redacted("rediss://u:secret@h:6380/0?ca_file=/ca.pem"), "rediss://…@h:6380/0…")
    }
}
