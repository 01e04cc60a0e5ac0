import Foundation
import WorkersQueue
import WorkersStorage
import WorkersTestServices
import XCTest

/// `workerctl worker --metrics-port`: Prometheus text on /metrics and a health check on /healthz.
final class MetricsEndpointTests: XCTestCase {
    func curl(_ url: String) throws -> (status: Int32, body: String) {
        let result = try ChildProcess.run(try XCTUnwrap(TestServices.which("curl")), ["-s", "-f", url])
        return (result.status, result.stdout)
    }

    func testScrapeShowsJobsQueuesAndHealth() throws {
        let redis = try TestRedis(database: 45)
        try redis.client.enqueueMany((0..<5).map { _ in NewJob("Noop") })
        try redis.client.enqueue(NewJob("Fail", args: ["metrics"], retry: 0))
        try redis.client.enqueueMany((0..<3).map { _ in NewJob("Noop", queue: "idle") })
        let worker = try ChildProcess(executable: TestServices.workerctl,
                                      arguments: ["worker", "--no-database", "--metrics-port", "0", "--heartbeat-interval", "0.5"],
                                      environment: ["REDIS_URL": redis.url, "LOG_LEVEL": "info"])
        defer { worker.signal(SIGTERM); worker.wait() }
        let url = try metricsURL(of: worker)
        XCTAssertTrue(try eventually { try redis.processed() == 6 })
        let scrape = try curl(url)
        XCTAssertEqual(scrape.status, 0)
        XCTAssertTrue(scrape.body.contains(#"workers_jobs_processed_total{class="Noop",queue="default"} 5"#), scrape.body)
        XCTAssertTrue(scrape.body.contains(#"workers_jobs_failed_total{class="Fail",queue="default"} 1"#), scrape.body)
        XCTAssertTrue(scrape.body.contains(#"workers_queue_size{queue="idle"} 3"#), scrape.body)
        XCTAssertTrue(scrape.body.contains(#"workers_set_size{set="dead"} 1"#), scrape.body)
        XCTAssertTrue(scrape.body.contains("workers_job_run_seconds_bucket"), scrape.body)
        let health = try curl(url.replacingOccurrences(of: "/metrics", with: "/healthz"))
        XCTAssertEqual(health.status, 0)
        XCTAssertTrue(health.body.hasPrefix("ok"), health.body)
        XCTAssertNotEqual(try curl(url.replacingOccurrences(of: "/metrics", with: "/nope")).status, 0)
    }

    /// The limiter and unique-job counters (docs/limiters.md, docs/unique-jobs.md) on /metrics: a job over its
    /// `concurrent` limit while the holder runs, and a raw duplicate of a unique job dropped at fetch.
    func testScrapeShowsLimiterAndUniqueCounters() throws {
        let redis = try TestRedis(database: 116)
        let policy = UniquePolicy(for: .seconds(120))
        let holder = try redis.client.enqueueUnique(NewJob("Sleep", args: [1500]), policy: policy).jid
        // A client that does not check (Sidekiq OSS) pushes a copy anyway: the worker drops it at fetch.
        let copy = try JobClient.payload(for: NewJob("Sleep", args: [1500], extra: ["unique_for": 120]),
                                         createdAt: Clock.now(), enqueuedAt: Clock.now())
        try redis.command("LPUSH", "queue:default", copy.serialized())
        try redis.client.enqueue(NewJob("LimitProbeMutex", args: [1500, "m"]))
        let worker = try ChildProcess(executable: TestServices.workerctl,
                                      arguments: ["worker", "--no-database", "--bench-jobs", "--concurrency", "4",
                                                  "--metrics-port", "0", "--poll-interval", "0.1"],
                                      environment: ["REDIS_URL": redis.url, "LOG_LEVEL": "info"])
        defer { worker.signal(SIGTERM); worker.wait() }
        let url = try metricsURL(of: worker)
        XCTAssertTrue(try eventually { try redis.int("GET", "probe:limits:running:probe-mutex-m") == 1 }, worker.stderr)
        try redis.client.enqueue(NewJob("LimitProbeMutex", args: [0, "m"]))
        XCTAssertTrue(try eventually { try redis.int("ZCARD", Keys.schedule) == 1 }, worker.stderr)
        XCTAssertTrue(try eventually { try redis.int("GET", Keys.uniqueDropped) == 1 }, worker.stderr)
        XCTAssertTrue(try eventually { try redis.command("GET", UniqueLockKey(className: "Sleep", queue: "default", key: "[1500]").redisKey).isNull },
                      "the holder \(holder) finished")
        let scrape = try curl(url)
        XCTAssertEqual(scrape.status, 0)
        XCTAssertTrue(scrape.body.contains(#"workers_unique_duplicates_dropped_total{class="Sleep"} 1"#), scrape.body)
        XCTAssertNotNil(scrape.body.firstMatch(of: /workers_limiter_admitted_total\{limit="probe-mutex"\} [1-9]/), scrape.body)
        XCTAssertNotNil(scrape.body.firstMatch(of: /workers_limiter_over_limit_total\{limit="probe-mutex"\} [1-9]/), scrape.body)
        XCTAssertTrue(scrape.body.contains("workers_limiter_reschedule_delay_seconds"), scrape.body)
    }

    /// A schedule file with one entry firing Noop every second.
    func everySecondSchedule(_ name: String) throws -> URL {
        let schedule = FileManager.default.temporaryDirectory.appendingPathComponent("metrics-\(UUID().uuidString).yaml")
        try """
            - name: \(name)
              cron: "* * * * * *"
              class: Noop
            """.write(to: schedule, atomically: true, encoding: .utf8)
        return schedule
    }

    /// The `metrics_url` a workerctl child logs once its endpoint listens.
    func metricsURL(of child: ChildProcess) throws -> String {
        var metricsURL: String?
        XCTAssertTrue(eventually {
            metricsURL = child.stderr.firstMatch(of: /"metrics_url":"([^"]+)"/).map { String($0.1) }
            return metricsURL != nil
        }, child.stderr)
        return try XCTUnwrap(metricsURL)
    }

    func testRunExportsSchedulerFires() throws {
        let redis = try TestRedis(database: 46)
        let schedule = try everySecondSchedule("every_second")
        let run = try ChildProcess(executable: TestServices.workerctl,
                                   arguments: ["run", "--no-database", "--metrics-port", "0", "--schedule", schedule.path],
                                   environment: ["REDIS_URL": redis.url, "LOG_LEVEL": "info"])
        defer { run.signal(SIGTERM); run.wait() }
        let url = try metricsURL(of: run)
        XCTAssertTrue(try eventually { try redis.processed() >= 2 }, run.stderr)
        let scrape = try curl(url)
        XCTAssertNotNil(scrape.body.firstMatch(of: /workers_scheduler_fires_total\{entry="every_second"\} [1-9]/), scrape.body)
        XCTAssertNotNil(scrape.body.firstMatch(of: /workers_jobs_processed_total\{class="Noop",queue="default"\} [1-9]/), scrape.body)
    }

    func testSchedulerAloneExportsFiresAndHealth() throws {
        let redis = try TestRedis(database: 47)
        let schedule = try everySecondSchedule("every_second_alone")
        let scheduler = try ChildProcess(executable: TestServices.workerctl,
                                         arguments: ["scheduler", "--metrics-port", "0", "--schedule", schedule.path],
                                         environment: ["REDIS_URL": redis.url, "LOG_LEVEL": "info"])
        defer { scheduler.signal(SIGTERM); scheduler.wait() }
        let url = try metricsURL(of: scheduler)
        XCTAssertTrue(try eventually { try redis.int("LLEN", "queue:default") >= 2 }, scheduler.stderr)
        let scrape = try curl(url)
        XCTAssertNotNil(scrape.body.firstMatch(of: /workers_scheduler_fires_total\{entry="every_second_alone"\} [1-9]/), scrape.body)
        XCTAssertNotNil(scrape.body.firstMatch(of: /workers_queue_size\{queue="default"\} [1-9]/), scrape.body)
        let health = try curl(url.replacingOccurrences(of: "/metrics", with: "/healthz"))
        XCTAssertEqual(health.status, 0)
        XCTAssertTrue(health.body.hasPrefix("ok"), health.body)
        let refused = try ChildProcess.run(TestServices.workerctl, ["scheduler", "--metrics-port", "70000", "--schedule", schedule.path],
                                           environment: ["REDIS_URL": redis.url])
        XCTAssertEqual(refused.status, 2, refused.stderr)
    }

    // MARK: - /readyz and --metrics-host

    /// GET without `-f`: the status code and body, also for a 503.
    func get(_ url: String) throws -> (code: Int, body: String) {
        let result = try ChildProcess.run(try XCTUnwrap(TestServices.which("curl")),
                                          ["-s", "-o", "-", "-w", "\n%{http_code}", url])
        let lines = result.stdout.split(separator: "\n", omittingEmptySubsequences: false)
        return (Int(lines.last ?? "") ?? 0, lines.dropLast().joined(separator: "\n"))
    }

    /// The readiness answer as JSON, with the checks by name.
    func readiness(_ url: String) throws -> (code: Int, ready: Bool?, reason: String, checks: JSONObject) {
        let answer = try get(url)
        let json = try JSONValue.parse(answer.body).objectValue
        let body = try XCTUnwrap(json, answer.body)
        return (answer.code, body["ready"]?.boolValue, body["reason"]?.stringValue ?? "",
                body["checks"]?.objectValue ?? JSONObject())
    }

    func isOK(_ checks: JSONObject, _ name: String) -> Bool? { checks[name]?.objectValue?["ok"]?.boolValue }

    func testReadyzNamesPostgresWhenSchemaBehindOrUnreachableWhileHealthzStaysUp() throws {
        let redis = try TestRedis(database: 61)
        let database = try PostgresTestDatabase.create(prefix: "readyz")
        defer { database.drop() }
        let environment = ["REDIS_URL": redis.url, "DATABASE_URL": database.url, "LOG_LEVEL": "info"]
        let migrate = try ChildProcess.run(TestServices.workerctl, ["migrate"], environment: environment)
        XCTAssertEqual(migrate.status, 0, migrate.stderr)
        let worker = try ChildProcess(executable: TestServices.workerctl,
                                      arguments: ["worker", "--metrics-port", "0", "--queue", "readyz_idle"],
                                      environment: environment)
        defer { worker.signal(SIGTERM); worker.wait() }
        let base = try metricsURL(of: worker).replacingOccurrences(of: "/metrics", with: "")

        // Both up, schema current.
        let up = try readiness(base + "/readyz")
        XCTAssertEqual(up.code, 200, worker.stderr)
        XCTAssertEqual(up.ready, true)
        XCTAssertEqual(isOK(up.checks, "redis"), true)
        XCTAssertEqual(isOK(up.checks, "postgresql"), true)
        XCTAssertEqual(isOK(up.checks, "process"), true)

        // Schema behind this build: the newest migration is no longer recorded as applied.
        let connection = try database.connect()
        let newest = try XCTUnwrap(try connection.queryFirst("SELECT max(version) AS v FROM schema_migrations")).int("v")
        try connection.executeScript("DELETE FROM schema_migrations WHERE version = \(newest)")
        connection.close()
        let behind = try readiness(base + "/readyz")
        XCTAssertEqual(behind.code, 503)
        XCTAssertEqual(behind.ready, false)
        XCTAssertTrue(behind.reason.hasPrefix("postgresql: schema behind this build (pending: \(String(format: "%04d", newest))_"),
                      behind.reason)
        XCTAssertEqual(isOK(behind.checks, "redis"), true)
        XCTAssertEqual(isOK(behind.checks, "postgresql"), false)
        let aliveWhileBehind = try get(base + "/healthz")
        XCTAssertEqual(aliveWhileBehind.code, 200, "liveness must not depend on PostgreSQL: \(aliveWhileBehind.body)")

        // PostgreSQL unreachable: the worker's database is gone.
        database.drop()
        let gone = try readiness(base + "/readyz")
        XCTAssertEqual(gone.code, 503)
        XCTAssertTrue(gone.reason.hasPrefix("postgresql: unreachable at "), gone.reason)
        XCTAssertTrue(gone.reason.contains(database.name), gone.reason)
        XCTAssertFalse(gone.reason.contains("redis:"), gone.reason)
        XCTAssertEqual(isOK(gone.checks, "postgresql"), false)
        XCTAssertEqual(try get(base + "/healthz").code, 200)
    }

    /// A worker on a Redis server of its own (a free port, no persistence), which the test then stops:
    /// `/readyz` names Redis, `/healthz` is still the process' own answer.
    func testReadyzNamesRedisWhenItsServerIsGone() throws {
        let port = try TestServices.closedPort()
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("readyz-redis-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let server = try ChildProcess(executable: try XCTUnwrap(TestServices.which("redis-server")), arguments: [
            "--port", "\(port)", "--bind", "127.0.0.1", "--dir", directory.path, "--save", "", "--appendonly", "no"])
        defer { server.signal(SIGKILL); server.wait() }
        let url = "redis://127.0.0.1:\(port)/0"
        XCTAssertTrue(eventually { (try? RedisConnection(url: url)) != nil }, server.stderr)
        let worker = try ChildProcess(executable: TestServices.workerctl,
                                      arguments: ["worker", "--no-database", "--metrics-port", "0"],
                                      environment: ["REDIS_URL": url, "LOG_LEVEL": "info"])
        defer { worker.signal(SIGTERM); worker.wait() }
        let base = try metricsURL(of: worker).replacingOccurrences(of: "/metrics", with: "")
        let up = try readiness(base + "/readyz")
        XCTAssertEqual(up.code, 200, worker.stderr)
        XCTAssertEqual(isOK(up.checks, "redis"), true)

        server.signal(SIGKILL)
        server.wait()
        let down = try readiness(base + "/readyz")
        XCTAssertEqual(down.code, 503)
        XCTAssertEqual(down.ready, false)
        XCTAssertTrue(down.reason.contains("redis: unreachable ("), down.reason)
        XCTAssertTrue(down.reason.contains("127.0.0.1:\(port)"), down.reason)
        XCTAssertFalse(down.reason.contains("postgresql:"), down.reason)
        XCTAssertEqual(isOK(down.checks, "redis"), false)
    }

    /// Addresses (dotted IPv4) with a socket listening on `port`, from /proc/net/tcp.
    func listeningAddresses(port: Int) throws -> [String] {
        let table = try String(contentsOfFile: "/proc/net/tcp", encoding: .utf8)
        return table.split(separator: "\n").dropFirst().compactMap { line -> String? in
            let columns = line.split(separator: " ")
            guard columns.count > 3, columns[3] == "0A" else { return nil }  // 0A: LISTEN
            let local = columns[1].split(separator: ":")
            guard local.count == 2, Int(local[1], radix: 16) == port, let raw = UInt32(local[0], radix: 16) else { return nil }
            // The kernel prints the address in host byte order (little-endian here): first octet lowest.
            return [raw & 0xFF, (raw >> 8) & 0xFF, (raw >> 16) & 0xFF, raw >> 24].map(String.init).joined(separator: ".")
        }
    }

    /// A second address of this machine that is not 127.0.0.1: on Linux all of 127.0.0.0/8 is the loopback
    /// interface, so a socket bound to 0.0.0.0 answers on 127.0.0.2 and one bound to 127.0.0.1 does not.
    /// (Tests send traffic to loopback addresses only, never to the machine's network interfaces.)
    let otherAddress = "127.0.0.2"

    func port(of url: String) throws -> Int {
        try XCTUnwrap(url.firstMatch(of: /:(\d+)\//).flatMap { Int($0.1) }, url)
    }

    func testMetricsHostAllInterfacesIsReachableFromAnotherAddress() throws {
        let redis = try TestRedis(database: 62)
        let worker = try ChildProcess(executable: TestServices.workerctl,
                                      arguments: ["worker", "--no-database", "--metrics-port", "0", "--metrics-host", "0.0.0.0"],
                                      environment: ["REDIS_URL": redis.url, "LOG_LEVEL": "info"])
        defer { worker.signal(SIGTERM); worker.wait() }
        let url = try metricsURL(of: worker)
        let port = try port(of: url)
        XCTAssertEqual(try listeningAddresses(port: port), ["0.0.0.0"])
        XCTAssertTrue(worker.stderr.contains(#""metrics_listen":"0.0.0.0:\#(port)""#), worker.stderr)
        XCTAssertEqual(try get("http://\(otherAddress):\(port)/healthz").code, 200, "via \(otherAddress)")
        let ready = try readiness("http://\(otherAddress):\(port)/readyz")
        XCTAssertEqual(ready.code, 200)
        XCTAssertEqual(ready.checks["postgresql"]?.objectValue?["detail"]?.stringValue, "not used by this process")
    }

    func testMetricsHostDefaultsToLoopbackAndTheConfigFileSetsIt() throws {
        let redis = try TestRedis(database: 62)
        let loopback = try ChildProcess(executable: TestServices.workerctl,
                                        arguments: ["worker", "--no-database", "--metrics-port", "0"],
                                        environment: ["REDIS_URL": redis.url, "LOG_LEVEL": "info"])
        defer { loopback.signal(SIGTERM); loopback.wait() }
        let loopbackPort = try port(of: try metricsURL(of: loopback))
        XCTAssertEqual(try listeningAddresses(port: loopbackPort), ["127.0.0.1"])
        XCTAssertEqual(try get("http://\(otherAddress):\(loopbackPort)/healthz").code, 0,
                       "curl: no HTTP answer expected via \(otherAddress)")

        let config = FileManager.default.temporaryDirectory.appendingPathComponent("metrics-host-\(UUID().uuidString).yaml")
        try "metrics_host: 0.0.0.0\nmetrics_port: 0\n".write(to: config, atomically: true, encoding: .utf8)
        let configured = try ChildProcess(executable: TestServices.workerctl,
                                          arguments: ["worker", "--no-database", "--config", config.path],
                                          environment: ["REDIS_URL": redis.url, "LOG_LEVEL": "info"])
        defer { configured.signal(SIGTERM); configured.wait() }
        XCTAssertEqual(try listeningAddresses(port: try port(of: try metricsURL(of: configured))), ["0.0.0.0"])

        let refused = try ChildProcess.run(TestServices.workerctl, ["worker", "--no-database", "--metrics-port", "0",
                                                                    "--metrics-host", "metrics.example"],
                                           environment: ["REDIS_URL": redis.url])
        XCTAssertEqual(refused.status, 2, refused.stderr)
        try "metrics_host: everywhere\n".write(to: config, atomically: true, encoding: .utf8)
        let badFile = try ChildProcess.run(TestServices.workerctl, ["worker", "--no-database", "--config", config.path],
                                           environment: ["REDIS_URL": redis.url])
        XCTAssertEqual(badFile.status, 2, badFile.stderr)
        XCTAssertTrue(badFile.stderr.contains("metrics_host must be an IPv4 address"), badFile.stderr)
    }
}
