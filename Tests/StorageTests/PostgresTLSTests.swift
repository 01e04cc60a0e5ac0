import Foundation
import WorkersStorage
import WorkersTestServices
import XCTest

/// `sslmode` against a PostgreSQL server that speaks TLS: a private server on port 5442 started by
/// `PG_SSL=1 scripts/services start-postgres` with a self-signed certificate for 127.0.0.1.
final class PostgresTLSTests: XCTestCase {
    func testURLsSSLModeIsHonouredAgainstATLSServer() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pg-tls-\(UUID().uuidString)")
        let environment = ["DATA_DIR": directory.path, "PG_PORT": "5442", "PG_DB": "tls", "PG_SSL": "1"]
        let services = TestServices.repositoryRoot.appendingPathComponent("scripts/services")
        let started = try ChildProcess.run(services, ["start-postgres"], environment: environment, timeout: 120)
        XCTAssertEqual(started.status, 0, started.stderr)
        defer {
            _ = try? ChildProcess.run(services, ["stop-postgres"], environment: environment)
            try? FileManager.default.removeItem(at: directory)
        }
        let base = "postgres://postgres@127.0.0.1:5442/tls"
        func usesTLS(_ url: String) throws -> Bool? {
            let connection = try PostgresConnection(url: url)
            defer { connection.close() }
            return try connection.queryFirst("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")?.bool("ssl")
        }
        XCTAssertEqual(try usesTLS(base + "?sslmode=require"), true)
        XCTAssertEqual(try usesTLS(base + "?sslmode=disable"), false)
        // verify-full: the server's certificate is checked against the given root and the host name.
        // (The certificate is in the server's data folder, wherever scripts/services put it.)
        let admin = try PostgresConnection(url: base + "?sslmode=disable")
        let dataDirectory = try XCTUnwrap(try admin.queryFirst("SHOW data_directory")?.string("data_directory"))
        admin.close()
        let certificate = URL(fileURLWithPath: dataDirectory).appendingPathComponent("server.crt")
        XCTAssertEqual(try usesTLS(base + "?sslmode=verify-full&sslrootcert=\(certificate.path)"), true)
        let otherRoot = directory.appendingPathComponent("other-root.crt")
        let made = try ChildProcess.run(try XCTUnwrap(TestServices.which("openssl")), [
            "req", "-new", "-x509", "-days", "1", "-nodes", "-subj", "/CN=someone-else",
            "-keyout", directory.appendingPathComponent("other.key").path, "-out", otherRoot.path])
        XCTAssertEqual(made.status, 0, made.stderr)
        XCTAssertThrowsError(try usesTLS(base + "?sslmode=verify-full&sslrootcert=\(otherRoot.path)")) { error in
            XCTAssertTrue(PostgresError.isConnectionFailure(error), "\(error)")
            XCTAssertTrue("\(error)".contains("certificate"), "\(error)")
        }
    }
}
