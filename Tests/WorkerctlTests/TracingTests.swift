import Foundation
import WorkersQueue
import WorkersTestServices
import XCTest

/// Tracing end to end (docs/tracing.md): `workerctl enqueue` and `workerctl worker` with the `OTEL_*`
/// variables, exporting to a local OTLP/HTTP receiver (`Tests/Fakes/otlp_receiver.py`, which decodes the JSON
/// encoding as https://opentelemetry.io/docs/specs/otlp/ defines it). The job runs through the real worker and
/// runner; the probe job (`TraceProbe`, bench jobs) makes one HTTP call, one ledger transaction and enqueues a
/// follow-up `Noop`.
final class TracingTests: XCTestCase {
    /// A traceparent from "upstream" (W3C Trace Context §3.2 example ids).
    let upstreamTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
    let upstreamSpan = "00f067aa0ba902b7"

    /// The receiver on `port` (one of the test's private ports), stopped by the caller.
    func startReceiver(port: Int) throws -> ChildProcess {
        let script = TestServices.repositoryRoot.appendingPathComponent("Tests/Fakes/otlp_receiver.py")
        let receiver = try ChildProcess(executable: try XCTUnwrap(TestServices.which("python3")),
                                        arguments: [script.path, String(port)])
        XCTAssertTrue(eventually { receiver.stdout.contains("ready \(port)") || !receiver.isRunning }, receiver.stderr)
        XCTAssertTrue(receiver.isRunning, "receiver did not start: \(receiver.stderr)")
        return receiver
    }

    /// GET `path` on the receiver, parsed as JSON.
    func admin(_ port: Int, _ path: String) throws -> [[String: Any]] {
        let result = try ChildProcess.run(try XCTUnwrap(TestServices.which("curl")),
                                          ["-s", "-f", "http://127.0.0.1:\(port)\(path)"])
        XCTAssertEqual(result.status, 0, result.stderr)
        return try XCTUnwrap(JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [[String: Any]])
    }

    func migrated(_ environment: [String: String]) throws {
        let migrate = try ChildProcess.run(TestServices.workerctl, ["migrate", "--bench-tables"], environment: environment)
        XCTAssertEqual(migrate.status, 0, migrate.stderr)
    }

    /// Runs a worker until `processed` jobs are done, then stops it with SIGTERM (its exit sends the last spans).
    func runWorker(_ environment: [String: String], redis: TestRedis, until processed: Int, failed: Int = 0) throws {
        let worker = try ChildProcess(executable: TestServices.workerctl,
                                      arguments: ["worker", "--bench-jobs", "--concurrency", "1", "--poll-interval", "0.1"],
                                      environment: environment)
        let done = try eventually(timeout: 60) { try redis.processed() >= processed }
        worker.signal(SIGTERM)
        XCTAssertEqual(worker.wait(), 0, worker.stderr)
        XCTAssertTrue(done, "the worker did not run \(processed) jobs: \(worker.stderr)")
        XCTAssertEqual(try redis.failed(), failed, worker.stderr)
    }

    func span(_ spans: [[String: Any]], named name: String, file: StaticString = #filePath, line: UInt = #line) throws
        -> [String: Any] {
        let found = spans.filter { $0["name"] as? String == name }
        XCTAssertEqual(found.count, 1, "spans named \(name) in \(spans.map { $0["name"] ?? "?" })", file: file, line: line)
        return try XCTUnwrap(found.first, file: file, line: line)
    }

    func attributes(_ span: [String: Any]) -> [String: Any] { span["attributes"] as? [String: Any] ?? [:] }

    func testTraceCrossesFromEnqueueIntoTheRunAndItsHTTPSQLAndFollowUpJob() throws {
        let port = 4364
        let receiver = try startReceiver(port: port)
        defer { receiver.signal(SIGTERM); receiver.wait() }
        let redis = try TestRedis(database: 173)
        let database = try PostgresTestDatabase.create(prefix: "tracing")
        defer { database.drop() }
        let environment = ["REDIS_URL": redis.url, "DATABASE_URL": database.url,
                           "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:\(port)", "OTEL_SERVICE_NAME": "tracing-test"]
        try migrated(environment)

        // A path and query with personal data: neither may reach a span.
        let url = "http://127.0.0.1:\(port)/users/alice@example.com/profile?lat=48.8584&lon=2.2945"
        let enqueue = try ChildProcess.run(TestServices.workerctl, ["enqueue", "TraceProbe", "--args", #"["\#(url)", "Noop"]"#],
                                           environment: environment.merging([
                                               "TRACEPARENT": "00-\(upstreamTrace)-\(upstreamSpan)-01",
                                               "TRACESTATE": "congo=t61rcWkgMzE",
                                           ]) { $1 })
        XCTAssertEqual(enqueue.status, 0, enqueue.stderr)
        let jid = enqueue.stdout.trimmingCharacters(in: .whitespacesAndNewlines)

        // The payload carries the context as extra fields, and Sidekiq (Ruby) still reads the job.
        let queued = try XCTUnwrap(try redis.payloads(list: "queue:default").first)
        let traceparent = try XCTUnwrap(queued.fields["traceparent"]?.stringValue, "\(queued.fields)")
        XCTAssertTrue(traceparent.hasPrefix("00-\(upstreamTrace)-"), traceparent)
        XCTAssertEqual(queued.fields["tracestate"]?.stringValue, "congo=t61rcWkgMzE")
        if RubySidekiq.isAvailable {
            let ruby = try RubySidekiq.run(#"j = Sidekiq::Queue.new("default").first; puts [j.klass, j.jid, j.args.size].join(" ")"#,
                                           redisURL: redis.url)
            XCTAssertEqual(ruby.stdout.trimmingCharacters(in: .whitespacesAndNewlines), "TraceProbe \(jid) 2", ruby.stderr)
        }

        try runWorker(environment, redis: redis, until: 2)  // TraceProbe and its follow-up Noop

        let spans = try admin(port, "/__admin/spans")
        for span in spans {
            XCTAssertEqual(span["traceId"] as? String, upstreamTrace, "every span is in the upstream trace: \(span)")
            XCTAssertEqual(span["serviceName"] as? String, "tracing-test")
        }
        let enqueueSpan = try span(spans, named: "enqueue TraceProbe")
        XCTAssertEqual(enqueueSpan["parentSpanId"] as? String, upstreamSpan)
        XCTAssertEqual(enqueueSpan["kind"] as? Int, 4)  // PRODUCER
        XCTAssertEqual(traceparent, "00-\(upstreamTrace)-\(enqueueSpan["spanId"] as? String ?? "?")-01")

        let run = try span(spans, named: "perform TraceProbe")
        XCTAssertEqual(run["parentSpanId"] as? String, enqueueSpan["spanId"] as? String, "the run's parent is the enqueue")
        XCTAssertEqual(run["kind"] as? Int, 5)  // CONSUMER
        XCTAssertEqual(run["traceState"] as? String, "congo=t61rcWkgMzE")
        let runAttributes = attributes(run)
        XCTAssertEqual(runAttributes["job.class"] as? String, "TraceProbe")
        XCTAssertEqual(runAttributes["job.queue"] as? String, "default")
        XCTAssertEqual(runAttributes["job.jid"] as? String, jid)
        XCTAssertEqual(runAttributes["job.attempt"] as? Int, 1)
        XCTAssertEqual(runAttributes["job.outcome"] as? String, "success")

        let http = try span(spans, named: "HTTP GET")
        XCTAssertEqual(http["parentSpanId"] as? String, run["spanId"] as? String)
        XCTAssertEqual(http["kind"] as? Int, 3)  // CLIENT
        XCTAssertEqual(attributes(http)["server.address"] as? String, "127.0.0.1")
        XCTAssertEqual(attributes(http)["server.port"] as? Int, port)
        XCTAssertEqual(attributes(http)["http.request.method"] as? String, "GET")
        XCTAssertEqual(attributes(http)["http.response.status_code"] as? Int, 200)

        let sql = try span(spans, named: "SQL TRANSACTION")
        XCTAssertEqual(sql["parentSpanId"] as? String, run["spanId"] as? String)
        XCTAssertEqual(attributes(sql)["db.system.name"] as? String, "postgresql")
        XCTAssertEqual(attributes(sql)["db.first_statement"] as? String, "INSERT")

        // The job's own enqueue carries the context on: the follow-up run descends from it.
        let followUpEnqueue = try span(spans, named: "enqueue Noop")
        XCTAssertEqual(followUpEnqueue["parentSpanId"] as? String, run["spanId"] as? String)
        let followUp = try span(spans, named: "perform Noop")
        XCTAssertEqual(followUp["parentSpanId"] as? String, followUpEnqueue["spanId"] as? String)

        // Nothing of the path, query or arguments was recorded; the job did call that URL.
        let everything = String(decoding: try JSONSerialization.data(withJSONObject: spans), as: UTF8.self)
        for secret in ["alice", "example.com", "/users", "48.8584", "lat="] {
            XCTAssertFalse(everything.contains(secret), "\(secret) in \(everything)")
        }
        XCTAssertEqual(try admin(port, "/__admin/requests").compactMap { $0["path"] as? String },
                       ["/users/alice@example.com/profile?lat=48.8584&lon=2.2945"])
    }

    func testOffWhenUnsetOrExporterNone() throws {
        let port = 4365
        let receiver = try startReceiver(port: port)
        defer { receiver.signal(SIGTERM); receiver.wait() }
        let redis = try TestRedis(database: 174)
        let database = try PostgresTestDatabase.create(prefix: "tracing_off")
        defer { database.drop() }
        let base = ["REDIS_URL": redis.url, "DATABASE_URL": database.url, "TRACEPARENT": "00-\(upstreamTrace)-\(upstreamSpan)-01",
                    "OTEL_EXPORTER_OTLP_ENDPOINT": "", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "", "OTEL_TRACES_EXPORTER": ""]
        try migrated(base)
        let url = "http://127.0.0.1:\(port)/ping"
        // No OTEL_* variable at all; then an endpoint, but OTEL_TRACES_EXPORTER=none.
        let off: [[String: String]] = [
            [:],
            ["OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:\(port)", "OTEL_TRACES_EXPORTER": "none"],
        ]
        for (index, variables) in off.enumerated() {
            let environment = base.merging(variables) { $1 }
            let enqueue = try ChildProcess.run(TestServices.workerctl, ["enqueue", "TraceProbe", "--args", #"["\#(url)"]"#],
                                               environment: environment)
            XCTAssertEqual(enqueue.status, 0, enqueue.stderr)
            let queued = try XCTUnwrap(try redis.payloads(list: "queue:default").first)
            XCTAssertEqual(Set(queued.fields.keys), ["retry", "queue", "class", "args", "jid", "created_at", "enqueued_at"],
                           "no trace field while tracing is off (\(variables))")
            try runWorker(environment, redis: redis, until: index + 1)
        }
        XCTAssertEqual(try admin(port, "/__admin/requests").count, 2, "both jobs ran their HTTP call")
        XCTAssertEqual(try admin(port, "/__admin/exports").count, 0, "nothing was exported")
    }
    func testUniqueEnqueueIsTracedAndTheTraceFieldsDoNotMakeAJobUnique() throws {
        let port = 4366
        let receiver = try startReceiver(port: port)
        defer { receiver.signal(SIGTERM); receiver.wait() }
        let redis = try TestRedis(database: 175)
        let environment = ["REDIS_URL": redis.url, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:\(port)/v1/traces",
                           "OTEL_SERVICE_NAME": "tracing-unique"]
        // Two enqueues of the same job under two different parents: the second is a duplicate all the same.
        var outputs: [String] = []
        for parentSpan in [upstreamSpan, "b7ad6b7169203331"] {
            let enqueue = try ChildProcess.run(TestServices.workerctl, ["enqueue", "Noop", "--unique-for", "60"],
                                               environment: environment.merging(["TRACEPARENT": "00-\(upstreamTrace)-\(parentSpan)-01"]) { $1 })
            XCTAssertEqual(enqueue.status, 0, enqueue.stderr)
            outputs.append(enqueue.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        }
        XCTAssertEqual(outputs[1], "duplicate of \(outputs[0])")
        let queued = try redis.payloads(list: "queue:default")
        XCTAssertEqual(queued.count, 1)
        let traceparent = try XCTUnwrap(queued.first?.fields["traceparent"]?.stringValue)

        let spans = try admin(port, "/__admin/spans").filter { $0["name"] as? String == "enqueue Noop" }
        XCTAssertEqual(spans.count, 2, "\(spans)")
        let pushed = try XCTUnwrap(spans.first { $0["parentSpanId"] as? String == upstreamSpan })
        XCTAssertEqual(traceparent, "00-\(upstreamTrace)-\(pushed["spanId"] as? String ?? "?")-01")
        XCTAssertNil(attributes(pushed)["job.unique"])
        let duplicate = try XCTUnwrap(spans.first { $0["parentSpanId"] as? String == "b7ad6b7169203331" })
        XCTAssertEqual(attributes(duplicate)["job.unique"] as? String, "duplicate")
    }
    func testEveryAttemptIsARunOfTheOneEnqueueWithItsOutcome() throws {
        let port = 4367
        let receiver = try startReceiver(port: port)
        defer { receiver.signal(SIGTERM); receiver.wait() }
        let redis = try TestRedis(database: 173)
        let database = try PostgresTestDatabase.create(prefix: "tracing_retry")
        defer { database.drop() }
        let environment = ["REDIS_URL": redis.url, "DATABASE_URL": database.url,
                           "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:\(port)", "OTEL_SERVICE_NAME": "tracing-retry"]
        try migrated(environment)
        // TraceProbe allows one retry: a 503 twice is a retry, then dead.
        let enqueue = try ChildProcess.run(TestServices.workerctl,
                                           ["enqueue", "TraceProbe", "--args", #"["http://127.0.0.1:\#(port)/status/503"]"#],
                                           environment: environment)
        XCTAssertEqual(enqueue.status, 0, enqueue.stderr)
        try runWorker(environment, redis: redis, until: 2, failed: 2)
        XCTAssertEqual(try redis.int("ZCARD", Keys.dead), 1)

        let spans = try admin(port, "/__admin/spans")
        let enqueueSpan = try span(spans, named: "enqueue TraceProbe")
        let runs = spans.filter { $0["name"] as? String == "perform TraceProbe" }
            .sorted { (attributes($0)["job.attempt"] as? Int ?? 0) < (attributes($1)["job.attempt"] as? Int ?? 0) }
        XCTAssertEqual(runs.map { attributes($0)["job.attempt"] as? Int }, [1, 2])
        XCTAssertEqual(runs.map { attributes($0)["job.outcome"] as? String }, ["retry", "dead"])
        for run in runs {
            XCTAssertEqual(run["parentSpanId"] as? String, enqueueSpan["spanId"] as? String, "each attempt descends from the one enqueue")
            XCTAssertEqual((run["status"] as? [String: Any])?["code"] as? Int, 2)  // STATUS_CODE_ERROR
        }
        let calls = spans.filter { $0["name"] as? String == "HTTP GET" }
        XCTAssertEqual(calls.map { attributes($0)["http.response.status_code"] as? Int }, [503, 503])
        XCTAssertEqual(Set(calls.compactMap { $0["parentSpanId"] as? String }), Set(runs.compactMap { $0["spanId"] as? String }))
        XCTAssertTrue(spans.filter { $0["name"] as? String == "SQL TRANSACTION" }.isEmpty, "the failed runs opened no transaction")
    }
}
