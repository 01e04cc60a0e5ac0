import Foundation
import Logging
import WorkersQueue
import Synchronization
import WorkersTestServices
import Workers
import XCTest

/// Unique jobs (docs/unique-jobs.md) through real `workerctl worker` processes: duplicate pushes
/// from Swift, from `workerctl enqueue` and from Ruby's Sidekiq OSS client while the unique job is
/// enqueued, running and retrying; SIGKILL with locks held.
final class UniqueJobsTests: XCTestCase {
    static func workerArguments(concurrency: Int = 2) -> [String] {
        ["worker", "--concurrency", "\(concurrency)", "--heartbeat-interval", "0.3", "--heartbeat-ttl", "2",
         "--orphan-sweep-interval", "0.5", "--poll-interval", "0.3"]
    }

    static func lock(_ className: String, _ args: String, queue: String = "default") -> String {
        UniqueLockKey(className: className, queue: queue, key: args).redisKey
    }

    func startWorker(_ redis: TestRedis, concurrency: Int = 2, extra: [String] = []) throws -> ChildProcess {
        try ChildProcess(executable: TestServices.workerctl, arguments: Self.workerArguments(concurrency: concurrency) + extra,
                         environment: ["REDIS_URL": redis.url, "LOG_LEVEL": "info"])
    }

    /// Swift client and `workerctl enqueue --unique-for`: a duplicate gets the live job's jid while it
    /// is enqueued, running and waiting in `retry`; once it succeeds (or is deleted) a new one is pushed.
    func testDuplicatePushFromSwiftAndWorkerctlReturnsTheLiveJid() throws {
        let redis = try TestRedis(database: 64)
        let policy = UniquePolicy(for: .seconds(120))
        let sleep = NewJob("Sleep", args: [1200])
        guard case .enqueued(let first) = try redis.client.enqueueUnique(sleep, policy: policy) else {
            return XCTFail("the first push must be enqueued")
        }
        let lock = Self.lock("Sleep", "[1200]")
        XCTAssertEqual(try redis.command("GET", lock).string, first, "the lock's value names its owner")

        // Enqueued: the Swift client and workerctl both answer with the live jid, and push nothing.
        XCTAssertEqual(try redis.client.enqueueUnique(sleep, policy: policy), .duplicate(of: first))
        let cli = WorkerctlRunner(redisURL: redis.url)
        let dup = try cli.run("enqueue", "Sleep", "--args", "[1200]", "--unique-for", "120")
        XCTAssertEqual(dup.status, 0, dup.stderr)
        XCTAssertEqual(dup.stdout, "duplicate of \(first)\n")
        XCTAssertEqual(try redis.int("LLEN", "queue:default"), 1)

        // `workerctl unique ls/show --json` show the lock and its owner.
        let list = try XCTUnwrap(cli.run("unique", "ls", "--json").object)
        let listed = try XCTUnwrap(list["locks"]?.arrayValue?.first?.objectValue)
        XCTAssertEqual(listed["jid"]?.stringValue, first)
        XCTAssertEqual(listed["lock"]?.stringValue, lock)
        XCTAssertEqual(listed["class"]?.stringValue, "Sleep")
        XCTAssertEqual(listed["owner_record"]?.boolValue, true)
        let shown = try XCTUnwrap(cli.run("unique", "show", first, "--json").object)
        XCTAssertEqual(shown["job"]?.arrayValue?.first?.objectValue?["state"]?.stringValue, "enqueued")

        // Running: still the same answer. (Job timeout 5 s: a lock taken at fetch lives max(unique_for, 5 + 60) s.)
        let worker = try startWorker(redis, extra: ["--job-timeout", "5"])
        defer { worker.signal(SIGTERM); worker.wait() }
        XCTAssertTrue(try eventually { try redis.int("LLEN", "queue:default") == 0 && redis.workingKeys().count == 1 }, worker.stderr)
        XCTAssertEqual(try redis.client.enqueueUnique(sleep, policy: policy), .duplicate(of: first))

        // Success releases the lock: the next push is a new job.
        XCTAssertTrue(try eventually { try redis.processed() == 1 }, worker.stderr)
        XCTAssertTrue(try eventually { try redis.command("GET", lock).isNull }, "success releases the lock")
        XCTAssertEqual(try redis.int("EXISTS", Keys.uniqueOwner(first)), 0)
        guard case .enqueued(let second) = try redis.client.enqueueUnique(sleep, policy: policy) else {
            return XCTFail("after success a new job is pushed")
        }
        XCTAssertNotEqual(second, first)
        XCTAssertTrue(try eventually { try redis.processed() == 2 }, worker.stderr)

        // Retrying: a failed job keeps its lock in `retry`. Its 5th attempt (retry_count 3 → 4) waits
        // 4⁴ + 15 ≥ 271 s, longer than the 65 s its lock got at fetch: the retry extends the lock past the wait.
        var fail = NewJob("Fail", args: ["unique"], retry: .int(10))
        fail.runtimeFields["retry_count"] = 3
        guard case .enqueued(let failing) = try redis.client.enqueueUnique(fail, policy: UniquePolicy(for: .seconds(5))) else {
            return XCTFail("first Fail push")
        }
        XCTAssertTrue(try eventually { try redis.int("ZCARD", Keys.retry) == 1 }, worker.stderr)
        let failLock = Self.lock("Fail", #"["unique"]"#)
        XCTAssertEqual(try redis.client.enqueueUnique(fail, policy: UniquePolicy(for: .seconds(5))), .duplicate(of: failing))
        XCTAssertEqual(try redis.command("GET", failLock).string, failing)
        let retryAt = try XCTUnwrap(Double(try redis.command("ZSCORE", Keys.retry, try XCTUnwrap(
            redis.command("ZRANGE", Keys.retry, 0, 0).strings.first)).string ?? ""))
        let expiresAt = Double(try redis.int("PEXPIRETIME", failLock)) / 1000
        XCTAssertGreaterThan(retryAt, Clock.now() + 200, "the retry waits longer than the lock taken at fetch lives")
        XCTAssertGreaterThanOrEqual(expiresAt, retryAt + 5 - 0.01, "the lock outlives the retry wait plus unique_for")

        // `workerctl jobs delete` of the retrying job releases its lock (and only its own).
        let deleted = try cli.run("jobs", "delete", failing)
        XCTAssertEqual(deleted.status, 0, deleted.stderr)
        XCTAssertTrue(try redis.command("GET", failLock).isNull, "deleting the job releases its lock")
        XCTAssertEqual(try redis.int("EXISTS", Keys.uniqueOwner(failing)), 0)
        XCTAssertNotEqual(try redis.client.enqueueUnique(fail, policy: UniquePolicy(for: .seconds(5))).jid, failing)
    }

    /// `workerctl jobs kill` and `workerctl queues clear` release the locks of the jobs they remove, and
    /// only those: killing a duplicate (pushed without the check) leaves the owner's lock alone.
    func testKillAndClearReleaseOnlyTheirOwnLocks() throws {
        let redis = try TestRedis(database: 64)
        let cli = WorkerctlRunner(redisURL: redis.url)
        let policy = UniquePolicy(for: .seconds(120))
        let owner = try redis.client.enqueueUnique(NewJob("Sleep", args: [10]), policy: policy).jid
        let copy = try redis.client.enqueue(NewJob("Sleep", args: [10], extra: ["unique_for": 120]))
        let lock = Self.lock("Sleep", "[10]")

        let killCopy = try cli.run("jobs", "kill", copy)
        XCTAssertEqual(killCopy.status, 0, killCopy.stderr)
        XCTAssertEqual(try redis.command("GET", lock).string, owner, "the copy's removal leaves the owner's lock")
        let killOwner = try cli.run("jobs", "kill", owner)
        XCTAssertEqual(killOwner.status, 0, killOwner.stderr)
        XCTAssertTrue(try redis.command("GET", lock).isNull, "a killed job releases its lock")
        XCTAssertEqual(try redis.int("EXISTS", Keys.uniqueOwner(owner)), 0)

        let queued = try redis.client.enqueueUnique(NewJob("Sleep", args: [20]), policy: policy).jid
        XCTAssertEqual(try redis.command("GET", Self.lock("Sleep", "[20]")).string, queued)
        let clear = try cli.run("queues", "clear", "default", "--yes")
        XCTAssertEqual(clear.status, 0, clear.stderr)
        XCTAssertEqual(clear.stdout, "cleared default: 1 jobs deleted\n")
        XCTAssertTrue(try redis.command("GET", Self.lock("Sleep", "[20]")).isNull, "a cleared queue's jobs release their locks")
        XCTAssertEqual(try redis.command("KEYS", "unique*").strings, [], "no lock, owner record or parking key left")
        XCTAssertEqual(try redis.int("SISMEMBER", Keys.queues, "default"), 0)

        // `unique release` repairs a lock whose job is gone (here: removed behind our back).
        let orphan = try redis.client.enqueueUnique(NewJob("Sleep", args: [30]), policy: policy).jid
        try redis.command("DEL", "queue:default")
        let shown = try XCTUnwrap(cli.run("unique", "show", orphan, "--json").object)
        XCTAssertEqual(shown["job"]?.arrayValue?.count, 0, "the owner is nowhere")
        let released = try cli.run("unique", "release", try XCTUnwrap(shown["lock"]?.stringValue))
        XCTAssertEqual(released.status, 0, released.stderr)
        XCTAssertEqual(released.stdout, "released \(Self.lock("Sleep", "[30]")) (held by \(orphan))\n")
        XCTAssertEqual(try redis.command("KEYS", "unique*").strings, [])
    }

    /// `unique_until: start`: the lock is released when a worker takes the job, so a push while it
    /// runs is a new job.
    func testUntilStartReleasesWhenTheJobIsTaken() throws {
        let redis = try TestRedis(database: 64)
        let policy = UniquePolicy(for: .seconds(120), until: .start)
        let sleep = NewJob("Sleep", args: [1500])
        let first = try redis.client.enqueueUnique(sleep, policy: policy).jid
        XCTAssertEqual(try redis.client.enqueueUnique(sleep, policy: policy), .duplicate(of: first), "held while enqueued")
        let worker = try startWorker(redis)
        defer { worker.signal(SIGTERM); worker.wait() }
        XCTAssertTrue(try eventually { try redis.command("GET", Self.lock("Sleep", "[1500]")).isNull }, worker.stderr)
        guard case .enqueued(let second) = try redis.client.enqueueUnique(sleep, policy: policy) else {
            return XCTFail("a push after the start is a new job")
        }
        XCTAssertNotEqual(second, first)
        XCTAssertTrue(try eventually { try redis.processed() == 2 }, worker.stderr)
        XCTAssertEqual(try redis.int("GET", Keys.uniqueDropped), 0)
    }
}

/// Jobs pushed by Ruby's Sidekiq OSS client (which does not check locks, but writes `unique_for`
/// into the payload from `sidekiq_options`) are caught at fetch: never run twice.
final class UniqueJobsRubyTests: XCTestCase {
    /// Pushes `count` copies of `class` with `args` (a Ruby literal) from Ruby; returns their jids.
    func rubyPush(_ redis: TestRedis, _ className: String, args: String, count: Int = 1, uniqueFor: Int = 120) throws -> [String] {
        let result = try RubySidekiq.run("""
            jids = (1..\(count)).map { Sidekiq::Client.push("class" => "\(className)", "args" => \(args), "unique_for" => \(uniqueFor)) }
            puts JSON.generate(jids)
            """, redisURL: redis.url)
        XCTAssertEqual(result.status, 0, result.stderr)
        return try XCTUnwrap(JSONValue.parse(result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)).arrayValue).compactMap(\.stringValue)
    }

    func testRubyDuplicatesAreDroppedAtFetchWhileEnqueuedRunningAndRetrying() throws {
        try XCTSkipUnless(RubySidekiq.isAvailable, "ruby-sidekiq is not installed (scripts/services install)")
        let redis = try TestRedis(database: 65)
        // Enqueued: a Swift unique push holds the lock, Ruby pushes two copies behind it.
        let owner = try redis.client.enqueueUnique(NewJob("Sleep", args: [1500]), policy: UniquePolicy(for: .seconds(120))).jid
        let copies = try rubyPush(redis, "Sleep", args: "[1500]", count: 2)
        XCTAssertEqual(copies.count, 2)
        XCTAssertEqual(try redis.int("LLEN", "queue:default"), 3, "Ruby's client does not check")

        let worker = try ChildProcess(executable: TestServices.workerctl, arguments: UniqueJobsTests.workerArguments(),
                                      environment: ["REDIS_URL": redis.url, "LOG_LEVEL": "info"])
        defer { worker.signal(SIGTERM); worker.wait() }
        XCTAssertTrue(try eventually { try redis.int("GET", Keys.uniqueDropped) == 2 }, worker.stderr)
        XCTAssertTrue(try eventually { try redis.workingKeys().count == 1 })

        // Running: one more Ruby copy is dropped too.
        XCTAssertEqual(try redis.command("GET", UniqueJobsTests.lock("Sleep", "[1500]")).string, owner)
        _ = try rubyPush(redis, "Sleep", args: "[1500]")
        XCTAssertTrue(try eventually { try redis.int("GET", Keys.uniqueDropped) == 3 }, worker.stderr)
        XCTAssertTrue(try eventually { try redis.processed() == 1 }, worker.stderr)
        XCTAssertTrue(worker.stderr.contains("duplicate dropped at fetch"), worker.stderr)
        XCTAssertTrue(worker.stderr.contains(copies[0]), "the log line names the dropped jid")

        // Ruby-only: two copies pushed together; the first fetched takes the lock, the other is dropped.
        let pair = try rubyPush(redis, "Sleep", args: "[1300]", count: 2)
        XCTAssertTrue(try eventually { try redis.int("GET", Keys.uniqueDropped) == 4 }, worker.stderr)
        XCTAssertTrue(try eventually { try redis.processed() == 2 }, worker.stderr)
        XCTAssertTrue(try eventually { try redis.command("GET", UniqueJobsTests.lock("Sleep", "[1300]")).isNull })
        XCTAssertTrue(pair.contains { worker.stderr.contains($0) })

        // Retrying: a Ruby-pushed unique Fail job fails and waits in `retry`; its Ruby copy is dropped.
        let failing = try rubyPush(redis, "Fail", args: #"["boom"]"#)
        XCTAssertTrue(try eventually { try redis.int("ZCARD", Keys.retry) == 1 }, worker.stderr)
        XCTAssertEqual(try redis.command("GET", UniqueJobsTests.lock("Fail", #"["boom"]"#)).string, failing.first)
        _ = try rubyPush(redis, "Fail", args: #"["boom"]"#)
        XCTAssertTrue(try eventually { try redis.int("GET", Keys.uniqueDropped) == 5 }, worker.stderr)
        XCTAssertEqual(try redis.failed(), 1, "the copy never ran")
        XCTAssertEqual(try redis.processed(), 3)
    }
}

/// SIGKILL with locks held: the recovered job keeps its lock and runs once; a job the recovery
/// sends to `dead` (interrupted too often) releases its lock; a duplicate pushed meanwhile never runs.
final class UniqueJobsCrashTests: XCTestCase {
    func testKilledWorkersLocksAreKeptOrReleasedByRecoveryAndNothingRunsTwice() throws {
        let redis = try TestRedis(database: 66)
        let policy = UniquePolicy(for: .seconds(120))
        let survivor = try redis.client.enqueueUnique(NewJob("Sleep", args: [2500]), policy: policy).jid
        // Interrupted twice already: the next recovery sends it to `dead` (limit 3).
        var doomedJob = NewJob("Sleep", args: [2600])
        doomedJob.runtimeFields["interrupted_count"] = 2
        let doomed = try redis.client.enqueueUnique(doomedJob,
                                                    policy: policy).jid
        let survivorLock = UniqueJobsTests.lock("Sleep", "[2500]")
        let doomedLock = UniqueJobsTests.lock("Sleep", "[2600]")

        let first = try ChildProcess(executable: TestServices.workerctl, arguments: UniqueJobsTests.workerArguments(),
                                     environment: ["REDIS_URL": redis.url, "LOG_LEVEL": "info"])
        XCTAssertTrue(try eventually {
            try redis.workingKeys().count == 1 && redis.int("LLEN", try redis.workingKeys()[0]) == 2
        }, first.stderr)
        first.signal(SIGKILL)
        first.wait()
        XCTAssertEqual(try redis.processed(), 0)
        XCTAssertEqual(try redis.command("GET", survivorLock).string, survivor, "the dead process's lock is kept")

        // While the job is orphaned, duplicates are refused (Swift) or pushed anyway (Ruby-style raw push).
        XCTAssertEqual(try redis.client.enqueueUnique(NewJob("Sleep", args: [2500]), policy: policy), .duplicate(of: survivor))
        let copy = try JobClient.payload(for: NewJob("Sleep", args: [2500], extra: ["unique_for": 120]),
                                         createdAt: Clock.now(), enqueuedAt: Clock.now())
        try redis.command("LPUSH", "queue:default", copy.serialized())

        let second = try ChildProcess(executable: TestServices.workerctl, arguments: UniqueJobsTests.workerArguments(),
                                      environment: ["REDIS_URL": redis.url, "LOG_LEVEL": "info"])
        defer { second.signal(SIGTERM); second.wait() }
        XCTAssertTrue(try eventually(timeout: 30) { try redis.processed() == 1 }, second.stderr)
        XCTAssertTrue(try eventually { try redis.command("GET", survivorLock).isNull }, "released after the recovered run succeeded")
        XCTAssertEqual(try redis.int("GET", Keys.uniqueDropped), 1, "the copy was dropped, not run")
        XCTAssertEqual(try redis.payloads(zset: Keys.dead).map(\.jid), [doomed])
        XCTAssertTrue(try redis.command("GET", doomedLock).isNull, "a job recovered into dead releases its lock")
        XCTAssertEqual(try redis.int("EXISTS", Keys.uniqueOwner(doomed)), 0)
        Thread.sleep(forTimeInterval: 1)  // a late second run would show here
        XCTAssertEqual(try redis.processed(), 1, "nothing ran twice")
        XCTAssertEqual(try redis.int("LLEN", "queue:default"), 0)
    }
}

/// A class's own uniqueness declaration (`JobOptions.unique` with a derived key), for jobs whose
/// payload says nothing about uniqueness — through a real `WorkerProcess`.
final class UniqueJobsClassOptionTests: XCTestCase {
    final class Runs: Sendable {
        private let values = Mutex<[String]>([])
        func append(_ value: String) { values.withLock { $0.append(value) } }
        var all: [String] { values.withLock { $0 } }
    }

    struct PerUserJob: Job {
        struct Arguments: IgnoredJobArguments { static let className = "UniquePerUser" }
        static var options: JobOptions {
            var options = JobOptions()
            options.unique = UniquePolicy(for: .seconds(60)) { args in args.first?.objectValue?["user_id"]?.serialized() ?? "" }
            return options
        }
        let runs: Runs
        func perform(_ arguments: Arguments, context: JobContext) throws {
            runs.append(context.jid)
            Thread.sleep(forTimeInterval: 0.3)
        }
    }

    func testClassDerivedKeyDropsAnotherJobForTheSameUser() throws {
        let redis = try TestRedis(database: 67)
        let runs = Runs()
        // Plain pushes (no unique fields), as any client would: same user, different other args.
        let jids = try redis.client.enqueueMany([
            NewJob("UniquePerUser", args: [.object(["user_id": 7, "reason": "a"])]),
            NewJob("UniquePerUser", args: [.object(["user_id": 7, "reason": "b"])]),
            NewJob("UniquePerUser", args: [.object(["user_id": 8, "reason": "a"])]),
        ])
        var registry = JobRegistry.builtins()
        registry.register(PerUserJob(runs: runs))
        var configuration = WorkerConfiguration()
        configuration.redisURL = redis.url
        configuration.heartbeatInterval = .seconds(0.2)
        configuration.pollInterval = .seconds(0.2)
        var logger = Logger(label: "unique")
        logger.logLevel = .critical
        let process = try WorkerProcess(configuration: configuration, registry: registry, logger: logger)
        try process.start()
        defer { process.shutdown() }
        XCTAssertTrue(eventually { process.processedCount == 2 })
        XCTAssertTrue(try eventually { try redis.int("GET", Keys.uniqueDropped) == 1 })
        XCTAssertEqual(Set(runs.all), [jids[0], jids[2]], "the second job for user 7 is dropped")
        let lock7 = UniqueLockKey(className: "UniquePerUser", queue: "default", key: "7").redisKey
        XCTAssertTrue(try eventually { try redis.command("GET", lock7).isNull })
    }
}
