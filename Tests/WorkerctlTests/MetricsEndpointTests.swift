import Foundation
import Queue
import TestSupport
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
}
