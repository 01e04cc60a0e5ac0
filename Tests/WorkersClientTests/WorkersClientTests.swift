import Foundation
import WorkersTestServices
import WorkersClient
import XCTest

/// The async pooled client (`WorkersClient`) against the real Redis. Each test uses its own Redis
/// database and nothing else opens a connection on it, so `CLIENT LIST`'s `db=` field tells
/// exactly which connections the client holds.
final class WorkersClientTests: XCTestCase {
    /// A connection for `CLIENT LIST` / `CLIENT KILL`, on a database no test writes to.
    func observer() throws -> RedisConnection { try RedisConnection(url: TestServices.redisURL(db: 191)) }

    /// Ids of the connections open on `database` (from `CLIENT LIST`).
    func connectionIDs(onDatabase database: Int) throws -> [Int64] {
        let list = try XCTUnwrap(try observer().command("CLIENT", "LIST").string)
        return list.split(separator: "\n").compactMap { line -> Int64? in
            var fields: [String: String] = [:]
            for field in line.split(separator: " ") {
                let parts = field.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                if parts.count == 2, fields[String(parts[0])] == nil { fields[String(parts[0])] = String(parts[1]) }
            }
            guard fields["db"] == String(database), let id = fields["id"] else { return nil }
            return Int64(id)
        }
    }

    func makeClient(database: Int, maxConnections: Int) async throws -> WorkersClient {
        let client = try WorkersClient(url: TestServices.redisURL(db: database), maxConnections: maxConnections)
        _ = try await client.withConnection { try $0.command("FLUSHDB") }
        return client
    }

    func testConcurrentEnqueuesFromManyTasksLandInSidekiqFormat() async throws {
        let client = try await makeClient(database: 57, maxConnections: 4)
        defer { client.shutdown() }
        let jids = try await withThrowingTaskGroup(of: String.self) { group in
            for n in 0..<200 {
                group.addTask {
                    try await client.enqueue(NewJob("AsyncJob", args: [.int(Int64(n))], queue: n % 2 == 0 ? "even" : "odd"))
                }
            }
            var jids: [String] = []
            for try await jid in group { jids.append(jid) }
            return jids
        }
        XCTAssertEqual(Set(jids).count, 200)
        XCTAssertTrue(jids.allSatisfy(Identifiers.isValidJID))

        let (queues, even, odd) = try await client.withConnection { connection in
            (try connection.command("SMEMBERS", Keys.queues).strings.sorted(),
             try connection.command("LRANGE", "queue:even", 0, -1).strings,
             try connection.command("LRANGE", "queue:odd", 0, -1).strings)
        }
        XCTAssertEqual(queues, ["even", "odd"])
        XCTAssertEqual(even.count, 100)
        XCTAssertEqual(odd.count, 100)
        var seenArgs: Set<String> = []
        var seenJIDs: Set<String> = []
        for (queue, raws) in [("even", even), ("odd", odd)] {
            for raw in raws {
                // Sidekiq's key order and compact JSON (wire format §3), as the synchronous client writes it.
                XCTAssertTrue(raw.hasPrefix(#"{"retry":true,"queue":"\#(queue)","class":"AsyncJob","args":["#), raw)
                let payload = try JobPayload(parsing: raw)
                XCTAssertNotNil(payload.enqueuedAt)
                XCTAssertEqual(payload.createdAt, payload.enqueuedAt)
                seenArgs.insert(payload.args[0].serialized())
                seenJIDs.insert(try XCTUnwrap(payload.jid))
            }
        }
        XCTAssertEqual(seenJIDs, Set(jids))
        XCTAssertEqual(seenArgs, Set((0..<200).map(String.init)))

        // Bounded: 200 concurrent callers shared at most 4 connections.
        let open = try connectionIDs(onDatabase: 57)
        XCTAssertTrue((1...4).contains(open.count), "connections open on db 57: \(open)")
    }

    func testBlockingCallsRunOnTheClientsOwnThreads() async throws {
        let client = try await makeClient(database: 57, maxConnections: 2)
        defer { client.shutdown() }
        // The kernel's name of the thread (what `top -H` shows), set by the thread itself before it takes work.
        // (Foundation's `Thread.current.name` read here once in ~12 runs gave the creator's inherited name.)
        let threadName = try await client.withConnection { _ in
            (try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8))?
                .trimmingCharacters(in: .whitespacesAndNewlines) ?? ""
        }
        XCTAssertTrue(threadName.hasPrefix("WClient-"), "ran on thread '\(threadName)'")
    }

    func testKilledConnectionIsReplacedWithoutFailingTheNextEnqueue() async throws {
        let client = try await makeClient(database: 58, maxConnections: 1)
        defer { client.shutdown() }
        try await client.enqueue(NewJob("BeforeKill"))
        let killed = try await client.withConnection { try XCTUnwrap($0.command("CLIENT", "ID").integer) }
        XCTAssertEqual(try connectionIDs(onDatabase: 58), [killed])

        XCTAssertEqual(try observer().command("CLIENT", "KILL", "ID", killed).integer, 1)
        XCTAssertEqual(try connectionIDs(onDatabase: 58), [])

        let jid = try await client.enqueue(NewJob("AfterKill"))
        let (replacement, classes) = try await client.withConnection { connection in
            (try XCTUnwrap(connection.command("CLIENT", "ID").integer),
             try connection.command("LRANGE", "queue:default", 0, -1).strings.map { try JobPayload(parsing: $0) })
        }
        XCTAssertNotEqual(replacement, killed)
        XCTAssertEqual(try connectionIDs(onDatabase: 58), [replacement])
        XCTAssertEqual(classes.map(\.className), ["AfterKill", "BeforeKill"])
        XCTAssertEqual(classes.first?.jid, jid)
    }

    func testCallsAfterShutdownAreRefused() async throws {
        let client = try await makeClient(database: 58, maxConnections: 1)
        client.shutdown()
        do {
            try await client.enqueue(NewJob("TooLate"))
            XCTFail("enqueue after shutdown succeeded")
        } catch let error as WorkersClientError {
            XCTAssertEqual(error, .shutDown)
        }
    }

    func testBadInputIsRefusedBeforeWriting() async throws {
        let client = try await makeClient(database: 58, maxConnections: 1)
        defer { client.shutdown() }
        do {
            try await client.enqueue(NewJob("Bad", queue: "a b"))
            XCTFail("a queue name with a space was accepted")
        } catch let error as EnqueueError {
            guard case .invalidQueueName = error else { return XCTFail("expected invalidQueueName, got \(error)") }
        }
        let keys = try await client.withConnection { try $0.command("DBSIZE").integer }
        XCTAssertEqual(keys, 0)
    }

    // MARK: - Examples/AppService (EnqueueFromHummingbird)

    /// The example service's binary, which `scripts/test` builds before running the tests.
    var exampleBinary: URL {
        TestServices.repositoryRoot.appendingPathComponent("Examples/AppService/.build/debug/EnqueueFromHummingbird")
    }

    func post(_ url: String) throws -> (code: Int, body: String) {
        let result = try ChildProcess.run(try XCTUnwrap(TestServices.which("curl")),
                                          ["-s", "-X", "POST", "-o", "-", "-w", "\n%{http_code}", url])
        let lines = result.stdout.split(separator: "\n", omittingEmptySubsequences: false)
        return (Int(lines.last ?? "") ?? 0, lines.dropLast().joined(separator: "\n"))
    }

    func testExampleHummingbirdHandlerEnqueuesASidekiqJob() async throws {
        // scripts/test builds the example while the other tests run, then runs this test alone.
        if ProcessInfo.processInfo.environment["WORKERS_EXAMPLES_LATER"] == "1" {
            throw XCTSkip("runs after the example package is built (scripts/test runs it alone then)")
        }
        guard FileManager.default.isExecutableFile(atPath: exampleBinary.path) else {
            throw XCTSkip("\(exampleBinary.path) is not built (scripts/test builds it unless SKIP_EXAMPLES=1)")
        }
        let client = try await makeClient(database: 59, maxConnections: 1)
        defer { client.shutdown() }
        let port = try TestServices.closedPort()
        let service = try ChildProcess(executable: exampleBinary, arguments: [],
                                       environment: ["REDIS_URL": TestServices.redisURL(db: 59), "PORT": String(port)])
        defer { service.signal(SIGTERM); service.wait() }
        let url = "http://127.0.0.1:\(port)/reports/42/render"
        var answer: (code: Int, body: String) = (0, "")
        XCTAssertTrue(try eventually { answer = try post(url); return answer.code != 0 }, service.stderr)
        XCTAssertEqual(answer.code, 202, answer.body)
        let jid = try XCTUnwrap(try JSONValue.parse(answer.body).objectValue?["jid"]?.stringValue, answer.body)

        let raw = try await client.withConnection { try $0.command("LRANGE", "queue:default", 0, -1).strings }
        XCTAssertEqual(raw.count, 1)
        let payload = try JobPayload(parsing: try XCTUnwrap(raw.first))
        XCTAssertEqual(payload.className, "RenderReport")
        XCTAssertEqual(payload.args, [42])
        XCTAssertEqual(payload.jid, jid)
        XCTAssertEqual(payload.retry, .limit(5))
        XCTAssertEqual(try post("http://127.0.0.1:\(port)/reports/not-a-number/render").code, 400)
    }

    /// `enqueueUnique` through the client's threads: a duplicate push returns the live job's jid and writes nothing;
    /// other arguments make another job.
    func testEnqueueUniqueReturnsTheLiveJobsJid() async throws {
        let client = try await makeClient(database: 115, maxConnections: 2)
        defer { client.shutdown() }
        let policy = UniquePolicy(for: .seconds(60))
        let first = try await client.enqueueUnique(NewJob("Noop", args: [7]), policy: policy)
        guard case .enqueued(let jid) = first else { return XCTFail("the first push must enqueue, got \(first)") }
        let second = try await client.enqueueUnique(NewJob("Noop", args: [7]), policy: policy)
        XCTAssertEqual(second, UniquePush.duplicate(of: jid))
        let other = try await client.enqueueUnique(NewJob("Noop", args: [8]), policy: policy)
        guard case .enqueued(let otherJid) = other else { return XCTFail("other args are another job, got \(other)") }
        XCTAssertNotEqual(otherJid, jid)
        let queued = try await client.withConnection { try $0.command("LLEN", "queue:default").integer }
        XCTAssertEqual(queued, 2, "the duplicate wrote nothing")
    }
}

/// Batches from async code: created atomically with their jobs, read back.
final class WorkersClientBatchTests: XCTestCase {
    func testCreateAndReadABatch() async throws {
        let client = try WorkersClient(url: TestServices.redisURL(db: 78), maxConnections: 2)
        defer { client.shutdown() }
        _ = try await client.withConnection { try $0.command("FLUSHDB") }
        let created = try await client.createBatch(NewBatch(description: "from a service", jobs: [NewJob("Noop"), NewJob("Noop")],
                                                            onSuccess: BatchCallback("Done")))
        let queued = try await client.withConnection { try $0.command("LRANGE", "queue:default", 0, -1).strings }
        XCTAssertEqual(queued.count, 2)
        XCTAssertTrue(queued.allSatisfy { $0.contains("\"bid\":\"\(created.bid)\"") }, "\(queued)")
        let listed = try await client.batches()
        XCTAssertEqual(listed.map(\.value.bid), [created.bid])
        XCTAssertEqual(listed.map(\.shard), ["default"])
        let detail = try await client.batch(bid: created.bid)?.value
        XCTAssertEqual(detail?.summary.total, 2)
        XCTAssertEqual(detail?.summary.pending, 2)
        XCTAssertEqual(detail?.summary.onSuccess, "Done")
        XCTAssertEqual(detail?.summary.state, "running")
    }
}

/// `WorkersClient(shards:)`'s admin calls read every shard (docs/sharding.md). The shards are two
/// databases of the test Redis (79 = default, 80 = `b`, which holds queue `beta`): as far as the keys
/// go, the same as two servers.
final class WorkersClientShardTests: XCTestCase {
    func testShardedClientAdminCallsReadEveryShard() async throws {
        let map = try ShardMap.from(environment: ["REDIS_SHARDS": "b=\(TestServices.redisURL(db: 80))", "QUEUE_SHARDS": "beta=b"],
                                    defaultURL: TestServices.redisURL(db: 194))
        let client = WorkersClient(shards: map, maxConnections: 2)
        defer { client.shutdown() }
        XCTAssertEqual(client.shardNames, ["default", "b"])
        for shard in client.shardNames { _ = try await client.withConnection(shard: shard) { try $0.command("FLUSHDB") } }

        let alpha = try await client.enqueue(NewJob("Noop", queue: "alpha"))
        let beta = try await client.enqueueMany([NewJob("Noop", queue: "beta"), NewJob("Noop", queue: "beta")])
        let later = try await client.enqueue(NewJob("Noop", queue: "beta"), in: .seconds(3600))

        // stats(): the shards added up; statsPerShard(): each.
        let stats = try await client.stats()
        XCTAssertEqual([stats.enqueued, stats.scheduled], [3, 1])
        XCTAssertEqual(stats.queues.map(\.name), ["alpha", "beta"])
        let perShard = try await client.statsPerShard()
        XCTAssertEqual(perShard.map(\.shard), ["default", "b"])
        XCTAssertEqual(perShard.map(\.value.enqueued), [1, 2])

        // queues(): every shard's, each with its shard.
        let queues = try await client.queues()
        XCTAssertEqual(queues.map { "\($0.shard)/\($0.value.name)/\($0.value.size)" }, ["default/alpha/1", "b/beta/2"])

        // findJob: looked for on every shard, found where it is.
        let foundBeta = try await client.findJob(jid: beta[1])
        XCTAssertEqual(foundBeta.map(\.shard), ["b"])
        XCTAssertEqual(foundBeta.map(\.value.state), [.enqueued])
        let foundLater = try await client.findJob(jid: later)
        XCTAssertEqual(foundLater.map { "\($0.shard)/\($0.value.state.rawValue)" }, ["b/scheduled"])
        let foundAlpha = try await client.findJob(jid: alpha)
        XCTAssertEqual(foundAlpha.map(\.shard), ["default"])
        let nowhere = try await client.findJob(jid: "0123456789abcdef01234567")
        XCTAssertEqual(nowhere.count, 0)

        // withConnection is the default shard; withConnection(shard:) and withEachShard reach the others.
        let betaOnDefault = try await client.withConnection { try $0.command("EXISTS", "queue:beta").integer }
        XCTAssertEqual(betaOnDefault, 0)
        let betaOnB = try await client.withConnection(shard: "b") { try $0.command("LLEN", "queue:beta").integer }
        XCTAssertEqual(betaOnB, 2)
        let sizes = try await client.withEachShard { try $0.command("DBSIZE").integer ?? -1 }
        XCTAssertEqual(sizes.map(\.shard), ["default", "b"])
        XCTAssertEqual(sizes.map(\.value), [2, 3], "default: queues + queue:alpha; b: queues + queue:beta + schedule")
        do {
            _ = try await client.withConnection(shard: "nope") { _ in 0 }
            XCTFail("an unknown shard must be refused")
        } catch let error as WorkersClientError {
            XCTAssertEqual(error, .unknownShard(name: "nope", configured: ["default", "b"]))
        }

        // Batches: created on their queues' shard, listed and found there.
        let created = try await client.createBatch(NewBatch(description: "on beta", jobs: [NewJob("Noop", queue: "beta")]))
        let betaAfter = try await client.withConnection(shard: "b") { try $0.command("LLEN", "queue:beta").integer }
        XCTAssertEqual(betaAfter, 3, "the batch's job is pushed on shard b")
        let listed = try await client.batches()
        XCTAssertEqual(listed.map { "\($0.shard)/\($0.value.bid)" }, ["b/\(created.bid)"])
        let found = try await client.batch(bid: created.bid)
        XCTAssertEqual(found?.shard, "b")
        XCTAssertEqual(found?.value.summary.total, 1)
    }
}
