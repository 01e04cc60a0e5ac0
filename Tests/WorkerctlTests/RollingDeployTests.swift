import Foundation
import WorkersQueue
import WorkersTestServices
import XCTest

/// Rolling deploys lose no job (docs/deploy.md, "Rolling deploys"): a worker that fetches a class it does not
/// register gives the job back to `schedule` (no retry spent) while a live process serving the queue announces the
/// class, or announces no classes at all (Ruby Sidekiq, an older release); only when none has known it for the
/// unknown-class grace does it go to dead. Real `workerctl worker` processes; `RunLogProbe` (registered with
/// `--bench-jobs`) is the class the old release lacks, and each run appends its jid to a file of its process.
/// Redis databases 170 and 171.
final class RollingDeployTests: XCTestCase {
    /// `newRelease`: registers RunLogProbe (`--bench-jobs`); `argsVersion`: announces it as decoding only that
    /// `args_version` (an older release of a versioned class).
    func worker(_ redis: TestRedis, newRelease: Bool, grace: Double, argsVersion: Int? = nil) throws -> ChildProcess {
        try ChildProcess(executable: TestServices.workerctl, arguments: [
            "worker", "--no-database", "--concurrency", "2", "--heartbeat-interval", "0.3", "--heartbeat-ttl", "2",
            "--poll-interval", "0.2", "--unknown-class-grace", "\(grace)"] + (newRelease ? ["--bench-jobs"] : [])
            + (argsVersion.map { ["--bench-args-version", "\($0)"] } ?? []),
            environment: ["REDIS_URL": redis.url])
    }

    func folder() throws -> URL {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("rolling-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        return folder
    }

    /// The jids `RunLogProbe` recorded, by the pid of the process that ran them.
    func runs(in folder: URL) throws -> [Int32: [String]] {
        var runs: [Int32: [String]] = [:]
        for name in try FileManager.default.contentsOfDirectory(atPath: folder.path) where name.hasPrefix("runs.") {
            let pid = try XCTUnwrap(Int32(name.dropFirst("runs.".count)))
            runs[pid] = try String(contentsOf: folder.appendingPathComponent(name), encoding: .utf8)
                .split(separator: "\n").map(String.init)
        }
        return runs
    }

    func enqueue(_ redis: TestRedis, _ count: Int, into folder: URL) throws -> Set<String> {
        Set(try redis.client.enqueueMany((0..<count).map { _ in NewJob("RunLogProbe", args: [.string(folder.path)]) }))
    }

    /// A registry entry the way Ruby Sidekiq writes it (lib/sidekiq/launcher.rb `to_data`): `info` lists the queues
    /// and no classes; refreshed like a heartbeat.
    func registerRubyProcess(_ redis: TestRedis, identity: String) throws {
        let info: JSONObject = ["hostname": "ruby-host", "started_at": .double(Clock.now()), "pid": 4242, "tag": "",
                                "concurrency": 5, "queues": ["default"], "labels": [], "identity": .string(identity),
                                "version": "6.4.1"]
        try redis.command("SADD", Keys.processes, identity)
        try redis.command("HSET", Keys.process(identity), "info", JSONValue.object(info).serialized(), "busy", 0,
                          "beat", Clock.now(), "quiet", "false")
        try redis.command("EXPIRE", Keys.process(identity), 60)
    }

    func testJobsOfAClassOnlyTheNewReleaseKnowsAllRunThereOnceAndNoneGoesToDead() throws {
        let redis = try TestRedis(database: 170)
        try redis.flush()
        let folder = try folder()
        let old = try worker(redis, newRelease: false, grace: 3600)
        defer { if old.isRunning { old.signal(SIGKILL) } }
        XCTAssertTrue(try eventually { try redis.int("SCARD", Keys.processes) == 1 }, old.stderr)
        let jids = try enqueue(redis, 40, into: folder)
        // The old release meets them first and gives them back.
        XCTAssertTrue(try eventually { try redis.int("ZCARD", Keys.schedule) > 0 }, old.stderr)
        let new = try worker(redis, newRelease: true, grace: 3600)
        defer { if new.isRunning { new.signal(SIGKILL) } }
        XCTAssertTrue(try eventually(timeout: 90) { try self.runs(in: folder).values.joined().count >= 40 },
                      "\((try? runs(in: folder).values.joined().count) ?? -1) of 40 ran\n" + old.stderr.suffix(3000).description)
        let runs = try runs(in: folder)
        XCTAssertEqual(Set(runs.keys), [new.pid], "every run on the new release")
        XCTAssertEqual(runs[new.pid]?.count, 40, "each job ran once")
        XCTAssertEqual(Set(runs[new.pid] ?? []), jids)
        XCTAssertEqual(try redis.int("ZCARD", Keys.dead), 0, "none went to dead")
        XCTAssertEqual(try redis.int("ZCARD", Keys.retry), 0, "no retry spent")
        XCTAssertTrue(old.stderr.contains("given back for a process that knows it"), old.stderr.suffix(2000).description)
        for child in [old, new] {
            child.signal(SIGTERM)
            XCTAssertEqual(child.wait(), 0, child.stderr.suffix(2000).description)
        }
    }

    /// A newer arguments version than the old release decodes (`args_version` 2, which typed enqueues write now),
    /// while the new release announces it: given back, and run on the new release, once each.
    func testArgumentsOfANewerVersionAreGivenBackAndRunOnTheReleaseThatDecodesThem() throws {
        let redis = try TestRedis(database: 170)
        try redis.flush()
        let folder = try folder()
        let old = try worker(redis, newRelease: true, grace: 3600, argsVersion: 1)
        let new = try worker(redis, newRelease: true, grace: 3600)
        defer { for child in [old, new] where child.isRunning { child.signal(SIGKILL) } }
        XCTAssertTrue(try eventually { try redis.int("SCARD", Keys.processes) == 2 }, old.stderr + new.stderr)
        // What a typed enqueue of RunLogProbe writes now (`JobArguments.argumentsVersion` 2; TypedEnqueueVersionTests).
        let jids = Set(try redis.client.enqueueMany((0..<30).map { _ in
            NewJob("RunLogProbe", args: [.string(folder.path), "ok", 0], extra: [NewJob.argumentsVersionField: 2])
        }))
        XCTAssertTrue(try redis.payloads(list: Keys.queue("default")).allSatisfy { $0.fields["args_version"] == 2 })
        XCTAssertTrue(try eventually(timeout: 90) { try self.runs(in: folder).values.joined().count >= 30 },
                      old.stderr.suffix(3000).description)
        let runs = try runs(in: folder)
        XCTAssertEqual(Set(runs.keys), [new.pid], "every run on the release that decodes version 2")
        XCTAssertEqual(runs[new.pid]?.count, 30, "each job ran once")
        XCTAssertEqual(Set(runs[new.pid] ?? []), jids)
        XCTAssertEqual(try redis.int("ZCARD", Keys.dead), 0)
        XCTAssertEqual(try redis.int("ZCARD", Keys.retry), 0)
        for child in [old, new] {
            child.signal(SIGTERM)
            XCTAssertEqual(child.wait(), 0, child.stderr.suffix(2000).description)
        }
    }

    func testARubyProcessServingTheQueueKeepsAClassNobodyAnnouncesOutOfDead() throws {
        let redis = try TestRedis(database: 171)
        try redis.flush()
        try registerRubyProcess(redis, identity: "ruby-host:4242:0123456789ab")
        let folder = try folder()
        let old = try worker(redis, newRelease: false, grace: 0.5)
        defer { if old.isRunning { old.signal(SIGKILL) } }
        let jids = try enqueue(redis, 3, into: folder)
        // Well past the grace, and past several give-backs (1 s, 2 s, …): none in dead, all waiting in schedule.
        XCTAssertTrue(try eventually(timeout: 30) {
            try redis.payloads(zset: Keys.schedule).allSatisfy { ($0.fields["unknown_class_count"]?.intValue ?? 0) >= 2 }
                && redis.int("ZCARD", Keys.schedule) == 3
        }, old.stderr.suffix(3000).description)
        XCTAssertEqual(try redis.int("ZCARD", Keys.dead), 0, "a process announcing no classes may know it")
        XCTAssertEqual(Set(try redis.payloads(zset: Keys.schedule).compactMap(\.jid)), jids)
        XCTAssertTrue(try redis.payloads(zset: Keys.schedule).allSatisfy { $0.retryCount == nil }, "no retry spent")
        old.signal(SIGTERM)
        XCTAssertEqual(old.wait(), 0, old.stderr.suffix(2000).description)
    }

    func testAClassNoLiveProcessKnowsGoesToDeadOnceTheGraceHasPassed() throws {
        let redis = try TestRedis(database: 171)
        try redis.flush()
        let old = try worker(redis, newRelease: false, grace: 1)
        defer { if old.isRunning { old.signal(SIGKILL) } }
        let jids = try enqueue(redis, 3, into: try folder())
        XCTAssertTrue(try eventually(timeout: 30) { try redis.int("ZCARD", Keys.dead) == 3 }, old.stderr.suffix(3000).description)
        let dead = try redis.payloads(zset: Keys.dead)
        XCTAssertEqual(Set(dead.compactMap(\.jid)), jids)
        for payload in dead {
            // Given back once at least (the grace counts from the first time nobody knew), then dead with the reason.
            XCTAssertGreaterThanOrEqual(payload.fields["unknown_class_count"]?.intValue ?? 0, 1)
            XCTAssertTrue(payload.errorMessage?.contains("unknown job class 'RunLogProbe': no live process serving queue 'default'") == true,
                          payload.errorMessage ?? "-")
        }
        old.signal(SIGTERM)
        XCTAssertEqual(old.wait(), 0, old.stderr.suffix(2000).description)
    }
}
