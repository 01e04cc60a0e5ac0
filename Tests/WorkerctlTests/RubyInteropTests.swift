import Foundation
import WorkersQueue
import WorkersTestServices
import XCTest

/// workerctl against state written and read by Ruby's Sidekiq 6.4.1 (database 42).
final class RubyInteropTests: XCTestCase {
    var redis: TestRedis!
    var ctl: WorkerctlRunner!

    override func setUpWithError() throws {
        try XCTSkipUnless(RubySidekiq.isAvailable, "ruby is not installed")
        redis = try TestRedis(database: 42)
        ctl = WorkerctlRunner(redisURL: redis.url)
    }

    /// Runs the interop script's `push` and returns the jids by kind.
    func pushFromRuby() throws -> [String: [String]] {
        let push = try RubySidekiq.interop(["push", "--flushdb"], redisURL: redis.url)
        XCTAssertEqual(push.status, 0, push.stderr)
        let pushed = try XCTUnwrap(JSONValue.parse(push.stdout).objectValue?["pushed"]?.arrayValue)
        var out: [String: [String]] = [:]
        for entry in pushed.compactMap(\.objectValue) {
            out[entry["kind"]?.stringValue ?? ""] = entry["jids"]?.arrayValue?.compactMap(\.stringValue)
        }
        return out
    }

    func ruby(_ code: String) throws -> String {
        let result = try RubySidekiq.run(code, redisURL: redis.url)
        XCTAssertEqual(result.status, 0, result.stderr)
        return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    func testRubysRetryEntryIsListedAndStatsMatchRubys() throws {
        let pushed = try pushFromRuby()
        let flakyJID = try XCTUnwrap(pushed["retry_entry"]?.first)

        let list = try ctl.run("jobs", "ls", "--state", "retry", "--json")
        XCTAssertEqual(list.status, 0, list.stderr)
        let jobs = try XCTUnwrap(list.object?["jobs"]?.arrayValue?.compactMap(\.objectValue))
        XCTAssertEqual(jobs.count, 1)
        XCTAssertEqual(jobs[0]["class"], "Interop::FlakyJob")
        XCTAssertEqual(jobs[0]["jid"]?.stringValue, flakyJID)
        XCTAssertEqual(jobs[0]["error_message"], "flaky")
        XCTAssertEqual(jobs[0]["retry_count"], 0)

        // The ActiveJob wrapper is listed under its wrapped class and found by it.
        let wrapped = try ctl.run("jobs", "ls", "--state", "enqueued", "--class", "Interop::RailsJob", "--json")
        XCTAssertEqual(wrapped.object?["total"], 1, wrapped.stdout + wrapped.stderr)

        let ours = try XCTUnwrap(ctl.run("stats", "--json").object)
        let dump = try RubySidekiq.interop(["dump", "--no-jobs"], redisURL: redis.url)
        XCTAssertEqual(dump.status, 0, dump.stderr)
        let theirs = try XCTUnwrap(JSONValue.parse(dump.stdout).objectValue?["stats"]?.objectValue)
        XCTAssertEqual(ours["processed"], theirs["processed"])
        XCTAssertEqual(ours["failed"], theirs["failed"])
        XCTAssertEqual(ours["enqueued"], theirs["enqueued"])
        XCTAssertEqual(ours["scheduled"], theirs["scheduled_size"])
        XCTAssertEqual(ours["retry"], theirs["retry_size"])
        XCTAssertEqual(ours["dead"], theirs["dead_size"])
        XCTAssertEqual(ours["processes"], theirs["processes_size"])
        XCTAssertEqual(ours["busy"], theirs["workers_size"])
        var sizes: [String: JSONValue] = [:]
        for queue in ours["queues"]?.arrayValue?.compactMap(\.objectValue) ?? [] {
            sizes[queue["name"]?.stringValue ?? ""] = queue["size"]
        }
        let rubySizes = try XCTUnwrap(theirs["queues"]?.objectValue)
        XCTAssertEqual(sizes.count, rubySizes.count)
        for (name, size) in rubySizes { XCTAssertEqual(sizes[name], size, name) }
        XCTAssertEqual(ours["enqueued"], 8)  // plain, options, retry_false, dead_false, 3 bulk, ActiveJob wrapper
    }

    func testRetryFromDeadIsSeenByRubyInItsQueueWithRetryCountDecremented() throws {
        let pushed = try pushFromRuby()
        let doomedJID = try XCTUnwrap(pushed["dead_entry"]?.first)
        let result = try ctl.run("jobs", "retry", doomedJID)
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertEqual(result.stdout, "retried \(doomedJID) (Interop::DoomedJob): dead → queue default\n")

        let seen = try ruby("""
            job = Sidekiq::Queue.new("default").find { |j| j.jid == "\(doomedJID)" }
            puts JSON.generate([job && job["retry_count"], Sidekiq::DeadSet.new.size, job && job.latency < 5])
            """)
        XCTAssertEqual(seen, "[1,0,true]")
    }

    func testKillIsSeenByRubysDeadSetAndRubyCanRetryIt() throws {
        let pushed = try pushFromRuby()
        let flakyJID = try XCTUnwrap(pushed["retry_entry"]?.first)
        let original = try XCTUnwrap(redis.command("ZRANGE", Keys.retry, 0, 0).strings.first)
        let kill = try ctl.run("jobs", "kill", flakyJID)
        XCTAssertEqual(kill.status, 0, kill.stderr)

        let seen = try ruby("""
            entry = Sidekiq::DeadSet.new.find_job("\(flakyJID)")
            puts JSON.generate([entry.klass, entry.value, (Time.now.to_f - entry.score).abs < 5, Sidekiq::RetrySet.new.size])
            entry.retry
            puts Sidekiq::Queue.new("default").map(&:jid).include?("\(flakyJID)")
            """)
        let lines = seen.split(separator: "\n").map(String.init)
        XCTAssertEqual(lines.first, JSONValue.array(["Interop::FlakyJob", .string(original), true, 0]).serialized())
        XCTAssertEqual(lines.last, "true")
        let show = try XCTUnwrap(ctl.run("jobs", "show", flakyJID, "--json").object)
        XCTAssertEqual(show["state"], "enqueued")
        XCTAssertEqual(show["retry_count"], -1)  // Ruby's retry decrements too (0 → −1).
    }

    func testBacktraceWrittenByRubysJobRetryIsDecoded() throws {
        let jid = "abcdefabcdefabcdefabcdef"
        let lines = (1...40).map { "/app/jobs/flaky_job.rb:\($0):in `perform'" }
        _ = try ruby("""
            require "sidekiq/job_retry"
            bt = Sidekiq::JobRetry.new.send(:compress_backtrace, \(JSONValue.array(lines.map { .string($0) }).serialized()))
            Sidekiq::RetrySet.new.schedule(Time.now.to_f + 60, {"retry" => true, "queue" => "default", "class" => "Flaky",
              "args" => [], "jid" => "\(jid)", "error_class" => "RuntimeError", "error_message" => "x",
              "failed_at" => Time.now.to_f, "retry_count" => 0, "error_backtrace" => bt})
            """)
        let show = try XCTUnwrap(ctl.run("jobs", "show", jid, "--json").object)
        XCTAssertEqual(show["error_backtrace"], .array(lines.map { .string($0) }))
        XCTAssertEqual(show["backtrace_error"], .null)
    }
}
