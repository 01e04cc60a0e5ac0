import Foundation
import Logging
import WorkersQueue
import Synchronization
import WorkersTestServices
import Workers
import XCTest

/// Records each run's class and raw `args` JSON (registered under several Ruby class names).
final class ArgsLog: Sendable {
    private let entries = Mutex<[(String, String)]>([])
    func append(_ className: String, _ args: String) { entries.withLock { $0.append((className, args)) } }
    var all: [(className: String, args: String)] { entries.withLock { $0.map { (className: $0.0, args: $0.1) } } }
}

struct ArgsLogJob: Job {
    struct Arguments: IgnoredJobArguments { static let className = "ArgsLog" }
    let log: ArgsLog
    func perform(_ arguments: Arguments, context: JobContext) throws {
        log.append(context.className, JSONValue.array(context.payload.args).serialized())
    }
}

/// Real Sidekiq 6.4.1 (Debian's ruby-sidekiq) on one side, our worker on the other, through the
/// interop script (`Tests/Interop/sidekiq-interop-check.rb`, a copy of the shared one).
final class SidekiqInteropTests: XCTestCase {
    var script: URL { TestServices.interopScript }

    func ruby(_ arguments: [String], redisURL: String) throws -> (status: Int32, json: JSONObject, stderr: String) {
        let rubyBinary = try XCTUnwrap(TestServices.which("ruby"), "ruby is not installed (scripts/services install)")
        let result = try ChildProcess.run(rubyBinary, [script.path] + arguments, environment: ["REDIS_URL": redisURL])
        let json = try XCTUnwrap(JSONValue.parse(result.stdout).objectValue, "no JSON from ruby: \(result.stderr)")
        return (result.status, json, result.stderr)
    }

    func testJobsPushedByRubyRunHereAndRubyReadsWhatWeWrite() throws {
        let redis = try TestRedis(database: 6)
        let push = try ruby(["push", "--flushdb"], redisURL: redis.url)
        XCTAssertEqual(push.status, 0, push.stderr)

        let log = ArgsLog()
        var registry = JobRegistry.builtins()
        for name in ["Interop::PlainJob", "Interop::OptionsJob", "Interop::NoRetryJob", "Interop::NoMorgueJob",
                     "Interop::BulkJob", "Interop::PastJob", "ActiveJob::QueueAdapters::SidekiqAdapter::JobWrapper"] {
            registry.register(ArgsLogJob(log: log), as: name)
        }
        var configuration = WorkerConfiguration()
        configuration.redisURL = redis.url
        configuration.queues = ["default", "critical", "bulk", "low"].map { QueueWeight(name: $0) }
        configuration.heartbeatInterval = .seconds(0.2)
        configuration.fetcherHeartbeatTTL = .seconds(2)
        configuration.pollInterval = .seconds(0.2)
        var logger = Logger(label: "interop")
        logger.logLevel = .critical
        let process = try WorkerProcess(configuration: configuration, registry: registry, logger: logger)
        try process.start()
        defer { process.shutdown() }

        // plain, options, retry_false, dead_false, 3 bulk, the ActiveJob wrapper, and the past-`at` job.
        XCTAssertTrue(eventually { log.all.count == 9 }, "\(log.all)")
        let plain = log.all.first { $0.className == "Interop::PlainJob" }
        XCTAssertEqual(plain?.args, #"[1,"two",{"three":3,"nested":[null,true,false]},4.5,"ünïcødé/✓"]"#)
        // Run on parallel threads: the order of completion is not the order of the queue.
        XCTAssertEqual(log.all.filter { $0.className == "Interop::BulkJob" }.map(\.args).sorted(), ["[1]", "[2]", "[3]"])
        XCTAssertEqual(log.all.first { $0.className.hasPrefix("ActiveJob") }?.args.contains(#""job_class":"Interop::RailsJob""#), true)

        // Now leave state for Ruby to read: a failure in retry and a job running.
        let failJID = try redis.client.enqueue(NewJob("Fail", args: ["for ruby"], retry: 3))
        let sleepJID = try redis.client.enqueue(NewJob("Sleep", args: [3000]))
        XCTAssertTrue(try eventually { try redis.int("ZCARD", Keys.retry) == 2 && process.busyCount == 1 })
        Thread.sleep(forTimeInterval: 0.5)  // one more heartbeat with the busy thread

        let dump = try ruby(["dump"], redisURL: redis.url)
        XCTAssertEqual(dump.status, 0, "Ruby found an invalid job: \(dump.stderr)")
        let stats = try XCTUnwrap(dump.json["stats"]?.objectValue)
        XCTAssertEqual(stats["processed"]?.intValue, Int64(try redis.processed()))
        XCTAssertEqual(stats["failed"]?.intValue, 1)
        XCTAssertEqual(stats["retry_size"]?.intValue, 2)
        XCTAssertEqual(stats["dead_size"]?.intValue, 1)
        XCTAssertEqual(stats["scheduled_size"]?.intValue, 3)
        XCTAssertEqual(stats["processes_size"]?.intValue, 1)
        XCTAssertEqual(stats["workers_size"]?.intValue, 1)

        let retries = try XCTUnwrap(dump.json["retry"]?.objectValue?["entries_latest_first"]?.arrayValue)
        let ours = try XCTUnwrap(retries.compactMap(\.objectValue).first { $0["jid"]?.stringValue == failJID })
        XCTAssertEqual(ours["klass"], "Fail")
        XCTAssertEqual(ours["error?"], true)
        XCTAssertEqual(ours["item"]?.objectValue?["error_message"], "for ruby")
        XCTAssertEqual(ours["item"]?.objectValue?["error_class"], "Fail::Failure", "Ruby reads a class path, not Swift reflection")
        XCTAssertEqual(ours["item"]?.objectValue?["retry_count"], 0)

        let processes = try XCTUnwrap(dump.json["processes"]?.objectValue?["list"]?.arrayValue)
        XCTAssertEqual(processes.count, 1)
        let entry = try XCTUnwrap(processes.first?.objectValue)
        XCTAssertEqual(entry["identity"]?.stringValue, process.identity)
        XCTAssertEqual(entry["concurrency"]?.intValue, 10)
        XCTAssertEqual(entry["queues"], ["default", "critical", "bulk", "low"])
        XCTAssertEqual(entry["busy"]?.intValue, 1)
        XCTAssertEqual(entry["stopping?"], false)

        let workers = try XCTUnwrap(dump.json["workers"]?.objectValue?["list"]?.arrayValue)
        XCTAssertEqual(workers.count, 1)
        let work = try XCTUnwrap(workers.first?.objectValue)
        XCTAssertEqual(work["queue"], "default")
        XCTAssertEqual(work["payload"]?.objectValue?["jid"]?.stringValue, sleepJID)
        XCTAssertNotNil(work["run_at"]?.intValue)

        // Ruby's quiet reaches us through the signal list.
        let quiet = try ChildProcess.run(try XCTUnwrap(TestServices.which("ruby")), ["-e", """
            require "sidekiq"; require "sidekiq/api"
            Sidekiq.redis = {url: ENV["REDIS_URL"]}
            Sidekiq::ProcessSet.new.each(&:quiet!)
            """], environment: ["REDIS_URL": redis.url])
        XCTAssertEqual(quiet.status, 0, quiet.stderr)
        XCTAssertTrue(eventually { process.isQuiet })
    }
}
