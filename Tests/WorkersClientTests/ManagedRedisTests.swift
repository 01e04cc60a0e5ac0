import Foundation
import WorkersQueue
import WorkersTestServices
import WorkersClient
import XCTest

/// The fleet on a managed Redis: TLS only (`rediss://`, a private CA), an ACL user, Sentinel over TLS — through the
/// client product (enqueue), a real `workerctl worker` process (fetch, run, settle) and `workerctl`'s admin commands.
final class ManagedRedisTests: XCTestCase {
    private var certificates: TLSTestCertificates!

    override func setUpWithError() throws {
        certificates = try TLSTestCertificates()
    }

    override func tearDown() {
        certificates?.remove()
        super.tearDown()
    }

    private func processed(_ url: String) -> Int {
        guard let connection = try? RedisConnection(url: url),
              let reply = try? connection.command("GET", Keys.statProcessed) else { return -1 }
        return Int(reply.integer ?? 0)
    }

    private func startWorker(_ url: String, extra: [String] = []) throws -> ChildProcess {
        try ChildProcess(executable: TestServices.workerctl, arguments: [
            "worker", "--no-database", "--concurrency", "2", "--heartbeat-interval", "0.3", "--heartbeat-ttl", "3",
            "--poll-interval", "0.3"] + extra, environment: ["REDIS_URL": url, "LOG_LEVEL": "info"])
    }

    func testTheClientProductAWorkerAndWorkerctlRunJobsOverVerifiedTLSAsAnACLUser() async throws {
        let server = try TLSRedisServer(certificates: certificates)
        defer { server.stop() }
        let url = server.url(user: "worker", database: 3)
        let client = try WorkersClient(url: url, maxConnections: 2)
        defer { client.shutdown() }
        for _ in 0..<5 { try await client.enqueue(NewJob("Noop", queue: "default")) }
        let worker = try startWorker(url)
        defer { if worker.isRunning { worker.signal(SIGKILL) } }
        XCTAssertTrue(eventually(timeout: 30) { processed(url) >= 5 }, worker.stderr)

        let workerctl = WorkerctlRunner(redisURL: url)
        let stats = try workerctl.run("stats", "--json")
        XCTAssertEqual(stats.status, 0, stats.stderr)
        XCTAssertEqual(stats.object?["processed"]?.intValue, 5, stats.stdout)
        let processes = try workerctl.run("workers", "ls")
        XCTAssertEqual(processes.status, 0, processes.stderr)
        // The admin commands need no more than the fleet's ACL rules either.
        for command in [["queues", "ls"], ["jobs", "ls", "--state", "dead"], ["cron", "ls"], ["stats", "--classes"]] {
            let result = try workerctl.run(command)
            XCTAssertEqual(result.status, 0, "\(command): \(result.stderr)")
        }
        // The password is never printed: not by the worker's log, not by workerctl.
        XCTAssertFalse(worker.stderr.contains(TLSRedisServer.workerPassword))
        XCTAssertFalse((stats.stderr + processes.stdout + processes.stderr).contains(TLSRedisServer.workerPassword))
        worker.signal(SIGTERM)
        XCTAssertEqual(worker.wait(), 0, worker.stderr)

        // The dashboard (`workerctl web`, on WorkersClient's threads) reads the same Redis over TLS.
        let web = try ChildProcess(executable: TestServices.workerctl, arguments: ["web", "--port", "0"],
                                   environment: ["REDIS_URL": url])
        defer { web.signal(SIGTERM); _ = web.wait() }
        var base: String?
        XCTAssertTrue(eventually {
            base = web.stderr.firstMatch(of: /"web_url":"([^"]+)"/).map { String($0.1) }
            return base != nil
        }, web.stderr)
        let curl = try XCTUnwrap(TestServices.which("curl"))
        let page = try ChildProcess.run(curl, ["-s", "-w", "\n%{http_code}", try XCTUnwrap(base)])
        XCTAssertTrue(page.stdout.hasSuffix("\n200"), page.stdout.suffix(300) + web.stderr)
        XCTAssertNotNil(page.stdout.firstMatch(of: /[Pp]rocessed\D{0,200}5\b/), "the processed count is on the page")
        XCTAssertFalse(web.stderr.contains(TLSRedisServer.workerPassword))

        // `?insecure` is logged by the worker and printed by workerctl.
        let insecure = server.url(user: "worker", database: 3, caFile: false, query: ["insecure"])
        let warned = try WorkerctlRunner(redisURL: insecure).run("stats")
        XCTAssertEqual(warned.status, 0, warned.stderr)
        XCTAssertTrue(warned.stderr.contains("warning: the Redis URL for localhost:\(server.port)/3 has ?insecure"), warned.stderr)
        // Without the CA, nothing is sent: workerctl exits naming the refused certificate.
        let unverified = try WorkerctlRunner(redisURL: server.url(user: "worker", database: 4, caFile: false)).run("stats")
        XCTAssertEqual(unverified.status, 1, unverified.stderr)
        XCTAssertTrue(unverified.stderr.contains("certificate was refused"), unverified.stderr)
    }

    func testAWorkerWhoseRedisUserMayNotRunScriptsStopsAtStartNamingThePermission() throws {
        let server = try TLSRedisServer(certificates: certificates)
        defer { server.stop() }
        let worker = try startWorker(server.url(user: "no-scripts", database: 3))
        defer { if worker.isRunning { worker.signal(SIGKILL) } }
        XCTAssertEqual(worker.wait(timeout: 30), 1, worker.stderr)
        XCTAssertTrue(worker.stderr.contains("no permissions to run the 'script|load' command"), worker.stderr)
        XCTAssertTrue(worker.stderr.contains(RedisAccessCheck.fleetPermissions), worker.stderr)
        XCTAssertFalse(worker.stderr.contains(TLSRedisServer.noScriptsPassword), worker.stderr)
    }

    /// `rediss+sentinel://`: the Sentinel is asked over TLS, the master it names (by IP address) is reached over
    /// TLS with its certificate checked against that address, and a worker runs jobs there.
    func testSentinelOverTLSNamesAMasterReachedOverTLS() async throws {
        let master = try TLSRedisServer(certificates: certificates)
        defer { master.stop() }
        let sentinelPort = try TestServices.closedPort()
        let directory = certificates.directory
        let configuration = directory.appendingPathComponent("sentinel.conf")
        try """
            port 0
            tls-port \(sentinelPort)
            bind 127.0.0.1
            dir \(directory.path)
            tls-cert-file \(certificates.path("server.crt"))
            tls-key-file \(certificates.path("server.key"))
            tls-ca-cert-file \(certificates.path("ca.crt"))
            tls-auth-clients no
            tls-replication yes
            sentinel monitor tlsmaster 127.0.0.1 \(master.port) 1
            sentinel auth-user tlsmaster sentinel
            sentinel auth-pass tlsmaster \(TLSRedisServer.sentinelPassword)

            """.write(to: configuration, atomically: true, encoding: .utf8)
        let redisServer = try XCTUnwrap(TestServices.which("redis-server"))
        let sentinel = try ChildProcess(executable: redisServer, arguments: [configuration.path, "--sentinel"])
        defer { sentinel.signal(SIGKILL); sentinel.wait() }
        let ca = certificates.path("ca.crt")
        let sentinelURL = "rediss://localhost:\(sentinelPort)/0?ca_file=\(ca)"
        XCTAssertTrue(eventually(timeout: 15) {
            (try? RedisConnection(url: sentinelURL).command("SENTINEL", "get-master-addr-by-name", "tlsmaster").strings.count) == 2
        }, sentinel.stderr + sentinel.stdout)

        let url = "rediss+sentinel://worker:\(TLSRedisServer.workerPassword)@127.0.0.1:\(sentinelPort)/tlsmaster/2?ca_file=\(ca)"
        let connection = try RedisConnection(url: url)
        XCTAssertEqual(try connection.command("ROLE").array?.first?.string, "master")
        XCTAssertTrue(connection.serverAddress.contains("master 127.0.0.1:\(master.port)/2"), connection.serverAddress)
        let client = try WorkersClient(url: url, maxConnections: 1)
        defer { client.shutdown() }
        for _ in 0..<3 { try await client.enqueue(NewJob("Noop", queue: "default")) }
        let worker = try startWorker(url)
        defer { if worker.isRunning { worker.signal(SIGKILL) } }
        let direct = master.url(user: "worker", database: 2)
        XCTAssertTrue(eventually(timeout: 30) { processed(direct) >= 3 }, worker.stderr)
        worker.signal(SIGTERM)
        XCTAssertEqual(worker.wait(), 0, worker.stderr)
        // Without the CA the Sentinel itself is refused: no master is asked for in clear.
        XCTAssertThrowsError(try RedisConnection(url: url.replacingOccurrences(of: "?ca_file=\(ca)", with: "").replacingOccurrences(of: "/2", with: "/5"))) { error in
            XCTAssertTrue("\(error)".contains("certificate was refused"), "\(error)")
        }
    }

    /// A TLS Redis that dies and comes back: while it is down the worker's links try a few times a second in all
    /// (each attempt a TCP connect the listener counts, and a handshake it fails), not once per loop turn; when it
    /// is back, the reconnecting links make a handful of handshakes, and jobs run again.
    func testATLSRedisRestartCostsAFewHandshakesNotAStorm() throws {
        var server: TLSRedisServer? = try TLSRedisServer(certificates: certificates)
        defer { server?.stop() }
        let port = server!.port
        let url = server!.url(user: "worker", database: 0)
        let worker = try startWorker(url, extra: ["--orphan-sweep-interval", "1"])
        defer { if worker.isRunning { worker.signal(SIGKILL) } }
        let client = JobClient(pool: try RedisPool(url: url, maxConnections: 1))
        try client.enqueue(NewJob("Noop"))
        XCTAssertTrue(eventually(timeout: 30) { processed(url) >= 1 }, worker.stderr + server!.output)

        server?.stop()
        server = nil
        let listener = try AcceptCounter(port: port)
        Thread.sleep(forTimeInterval: 2)  // every thread meets the outage
        let windowStart = Date().timeIntervalSince1970
        Thread.sleep(forTimeInterval: 6)
        let seconds = Date().timeIntervalSince1970 - windowStart
        let attempts = listener.count(since: windowStart)
        listener.stop()
        XCTAssertTrue(worker.isRunning, worker.stderr)
        XCTAssertGreaterThan(attempts, 0, "the worker kept trying")
        XCTAssertLessThanOrEqual(Double(attempts), 3 * seconds, "\(attempts) attempts in \(seconds) s")

        server = try TLSRedisServer(certificates: certificates, port: port)
        // One connection of ours, kept: the server's count of connections is then the worker's but one.
        let back = try RedisConnection(url: url)
        try client.enqueue(NewJob("Noop"))
        XCTAssertTrue(eventually(timeout: 30) { (try? back.command("GET", Keys.statProcessed).integer) == 1 },
                      "no job ran after the restart\n" + worker.stderr + (server?.output ?? ""))
        // Every connection the restarted server took (ours included): the worker's links, once each or so.
        let info = try back.command("INFO", "stats").string ?? ""
        let handshakes = try XCTUnwrap(info.split(whereSeparator: \.isNewline)
            .first { $0.hasPrefix("total_connections_received:") }.flatMap { Int($0.split(separator: ":")[1]) }, info)
        XCTAssertLessThanOrEqual(handshakes, 25, "connections received since the restart")
        print("TLS outage of \(String(format: "%.1f", seconds)) s: \(attempts) attempts; \(handshakes) handshakes after the restart")
        worker.signal(SIGTERM)
        XCTAssertEqual(worker.wait(), 0, worker.stderr)
    }
}
