import Foundation
import WorkersQueue
import WorkersTestServices
import XCTest

/// The admin API (`Sources/Queue/Admin`) called directly against Redis database 40.
final class AdminAPITests: XCTestCase {
    var redis: TestRedis!
    var connection: RedisConnection!
    var admin: JobAdmin { JobAdmin(connection: connection) }

    override func setUpWithError() throws {
        redis = try TestRedis(database: 40)
        connection = try redis.connection()
    }

    /// Writes a job into a sorted set the way Ruby does (`ZADD set score json`).
    @discardableResult
    func put(_ set: String, score: Double, _ fields: JSONObject) throws -> String {
        let json = JSONValue.object(fields).serialized()
        try redis.command("ZADD", set, score, json)
        return json
    }

    func failed(_ jid: String, class name: String = "Flaky", queue: String = "default", retryCount: Int64 = 0) -> JSONObject {
        ["retry": true, "queue": .string(queue), "class": .string(name), "args": [7], "jid": .string(jid),
         "created_at": 1_700_000_000.5, "enqueued_at": 1_700_000_000.5, "error_message": "flaky",
         "error_class": "RuntimeError", "failed_at": 1_700_000_001.25, "retry_count": .int(retryCount)]
    }

    func jid(_ n: Int) -> String { String(format: "%024x", n) }

    func testSortedSetListingIsHighestScoreFirstWithPagesAndFilters() throws {
        for n in 1...7 {
            try put(Keys.retry, score: Double(1000 + n), failed(jid(n), class: n % 2 == 0 ? "Even" : "Odd", queue: n <= 3 ? "low" : "default"))
        }
        let first = try admin.list(.retry, page: PageRequest(number: 1, size: 3))
        XCTAssertEqual(first.total, 7)
        XCTAssertEqual(first.pageCount, 3)
        XCTAssertEqual(first.items.map(\.jid), [jid(7), jid(6), jid(5)])
        XCTAssertEqual(first.items.map(\.score), [1007, 1006, 1005])
        let last = try admin.list(.retry, page: PageRequest(number: 3, size: 3))
        XCTAssertEqual(last.items.map(\.jid), [jid(1)])

        let even = try admin.list(.retry, filter: JobFilter(className: "Even"), page: PageRequest(number: 1, size: 2))
        XCTAssertEqual(even.total, 3)
        XCTAssertEqual(even.items.map(\.jid), [jid(6), jid(4)])
        let low = try admin.list(.retry, filter: JobFilter(queue: "low"), page: PageRequest())
        XCTAssertEqual(low.items.map(\.jid), [jid(3), jid(2), jid(1)])
        let grep = try admin.list(.retry, filter: JobFilter(grep: jid(5)), page: PageRequest())
        XCTAssertEqual(grep.items.map(\.jid), [jid(5)])
    }

    func testEnqueuedListingIsNewestFirstAndLatencyComesFromTheOldest() throws {
        let jids = try redis.client.enqueueMany((1...3).map { NewJob("Work", args: [.int(Int64($0))]) })
        let page = try admin.list(.enqueued, filter: JobFilter(queue: "default"), page: PageRequest())
        XCTAssertEqual(page.items.map(\.jid), jids.reversed())
        XCTAssertTrue(page.items.allSatisfy { $0.state == .enqueued && $0.queue == "default" })

        // Latency: now − enqueued_at of the tail.
        let oldest = try XCTUnwrap(redis.payloads(list: "queue:default").last?.enqueuedAt)
        let latency = try JobQueue("default").latency(connection, now: oldest + 42)
        XCTAssertEqual(latency, 42, accuracy: 0.001)
        XCTAssertEqual(try JobQueue("empty").latency(connection), 0)
    }

    func testEnqueuedPagesSpanQueuesInNameOrder() throws {
        let b = try redis.client.enqueueMany((1...2).map { NewJob("B", args: [.int(Int64($0))], queue: "b") })
        let a = try redis.client.enqueueMany((1...3).map { NewJob("A", args: [.int(Int64($0))], queue: "a") })
        let expected = Array(a.reversed()) + Array(b.reversed())
        for size in 1...6 {
            var collected: [String] = []
            for number in 1...(6 / size + 1) {
                let page = try admin.list(.enqueued, page: PageRequest(number: number, size: size))
                XCTAssertEqual(page.total, 5)
                collected += page.items.compactMap(\.jid)
            }
            XCTAssertEqual(collected, expected, "page size \(size)")
        }
        let filtered = try admin.list(.enqueued, filter: JobFilter(className: "B"), page: PageRequest())
        XCTAssertEqual(filtered.items.compactMap(\.jid), Array(b.reversed()))
    }

    func testFindByJidInEachState() throws {
        let queued = try redis.client.enqueue(NewJob("Work", queue: "q1"))
        let scheduled = try redis.client.enqueue(NewJob("Later"), in: 3600)
        try put(Keys.retry, score: 5, failed(jid(1)))
        try put(Keys.dead, score: 6, failed(jid(2)))
        XCTAssertEqual(try admin.findOne(jid: queued).state, .enqueued)
        XCTAssertEqual(try admin.findOne(jid: queued).queue, "q1")
        XCTAssertEqual(try admin.findOne(jid: scheduled).state, .scheduled)
        XCTAssertEqual(try admin.findOne(jid: jid(1)).state, .retry)
        XCTAssertEqual(try admin.findOne(jid: jid(2)).state, .dead)
        // A jid that is a substring of another jid's member but not the jid itself is not a match.
        XCTAssertThrowsError(try admin.findOne(jid: String(jid(1).suffix(8)))) { error in
            XCTAssertEqual(error as? AdminError, .jobNotFound(jid: String(self.jid(1).suffix(8)), searched: JobAdmin.searchOrder))
        }
        XCTAssertThrowsError(try admin.findOne(jid: "a*")) { XCTAssertTrue(($0 as? AdminError)?.isUsageError == true) }
        // Many members: ZSCAN needs several round trips.
        for n in 100..<1600 { try put(Keys.dead, score: Double(n), failed(jid(n))) }
        XCTAssertEqual(try admin.findOne(jid: jid(1234)).score, 1234)
    }

    func testRetryFromDeadDecrementsRetryCountAndPushesToItsQueue() throws {
        let raw = try put(Keys.dead, score: 10, failed(jid(1), queue: "mail", retryCount: 25))
        let record = try admin.perform(.retry, jid: jid(1))
        XCTAssertEqual(record.state, .dead)
        XCTAssertEqual(try redis.int("ZCARD", Keys.dead), 0)
        let pushed = try XCTUnwrap(redis.payloads(list: "queue:mail").first)
        XCTAssertEqual(pushed.retryCount, 24)
        XCTAssertEqual(pushed.jid, jid(1))
        XCTAssertNotEqual(pushed.enqueuedAt, 1_700_000_000.5)
        XCTAssertEqual(try redis.command("SISMEMBER", Keys.queues, "mail").integer, 1)
        // Everything else kept in order: only retry_count and enqueued_at changed.
        var expected = try JobPayload(parsing: raw)
        expected.fields["retry_count"] = 24
        expected.fields["enqueued_at"] = pushed.fields["enqueued_at"]
        XCTAssertEqual(pushed.serialized(), expected.serialized())
    }

    func testRunKeepsThePayloadAndKillMovesTheExactBytes() throws {
        try put(Keys.retry, score: 10, failed(jid(1), retryCount: 3))
        try admin.perform(.run, jid: jid(1))
        XCTAssertEqual(try redis.payloads(list: "queue:default").first?.retryCount, 3)

        let raw = try put(Keys.retry, score: 10, failed(jid(2)))
        try admin.perform(.kill, jid: jid(2), now: 2_000_000_000)
        XCTAssertEqual(try redis.command("ZRANGE", Keys.dead, 0, -1, "WITHSCORES").strings, [raw, "2000000000"])

        // Kill from a queue: LREM + ZADD.
        let queued = try redis.client.enqueue(NewJob("Work"))
        try admin.perform(.kill, jid: queued)
        XCTAssertEqual(try admin.findOne(jid: queued).state, .dead)
        XCTAssertEqual(try redis.int("LLEN", "queue:default"), 1)
    }

    func testKillTrimsTheDeadSetToItsCap() throws {
        for n in 1...5 { try put(Keys.retry, score: Double(n), failed(jid(n))) }
        let small = JobAdmin(connection: connection, deadLimits: DeadSetLimits(maxJobs: 3, maxAge: .seconds(1000)))
        try put(Keys.dead, score: 1, failed(jid(99)))  // older than the age limit
        let result = try small.performAll(.kill, state: .retry, now: 5000)
        XCTAssertEqual(result.done, 5)
        // The cap is exact: max entries stay, the oldest go (Ruby's trim keeps max − 1, wire doc §6).
        XCTAssertEqual(try redis.int("ZCARD", Keys.dead), 3)
        XCTAssertNil(try admin.find(jid: jid(99), in: [.dead]).first)
    }

    func testActionsRefuseStatesTheyDoNotCover() throws {
        try put(Keys.dead, score: 1, failed(jid(1)))
        XCTAssertThrowsError(try admin.perform(.run, jid: jid(1))) { error in
            XCTAssertEqual(error as? AdminError, .actionNotAllowed(action: "run", jid: self.jid(1), state: .dead, allowed: [.scheduled, .retry]))
        }
        XCTAssertThrowsError(try admin.perform(.kill, jid: jid(1)))
        XCTAssertEqual(try redis.int("ZCARD", Keys.dead), 1)
        XCTAssertThrowsError(try admin.performAll(.run, state: .dead))
    }

    func testInvalidMembersCanBeListedAndDeletedButNotRetried() throws {
        try redis.command("ZADD", Keys.dead, 5, "this is {not json")
        try redis.command("ZADD", Keys.dead, 6, #"{"jid":"\#(jid(3))","args":[]}"#)
        let page = try admin.list(.dead, page: PageRequest())
        XCTAssertEqual(page.items.count, 2)
        XCTAssertNotNil(page.items[1].invalidReason)
        XCTAssertThrowsError(try admin.perform(.retry, jid: jid(3))) { error in
            guard case .invalidJob? = error as? AdminError else { return XCTFail("\(error)") }
        }
        let retried = try admin.performAll(.retry, state: .dead)
        XCTAssertEqual(retried, BulkResult(matched: 2, done: 0, gone: 0, invalid: 2))
        XCTAssertEqual(try admin.performAll(.delete, state: .dead), BulkResult(matched: 2, done: 2))
        XCTAssertEqual(try redis.int("ZCARD", Keys.dead), 0)
    }

    /// The bulk actions' walk (`SortedJobSet.forEachPageAscending`, pages of 1000 over 20,000 dead jobs) while its
    /// own moves and another operator change the set between pages: every entry there from the start to the end is
    /// visited exactly once; entries removed before the walk reaches them, added behind its cursor, or added above the
    /// highest score at the start are not visited.
    func testPagedWalkVisitsEachEntryOnceWhileTheSetChanges() throws {
        let count = 20_000
        // The members start with the jid, so in Redis' order (score, then bytes) the entries the walker moves
        // ("Flaky") and those it leaves in place ("Other") interleave; 6,000 share one score, so pages cut through ties.
        func member(_ n: Int, className: String? = nil) -> String {
            JSONValue.object(["jid": .string(jid(n)), "class": .string(className ?? (n % 3 == 0 ? "Other" : "Flaky")),
                              "queue": "default", "args": [.int(Int64(n))]]).serialized()
        }
        func score(_ n: Int) -> Int { n < 6_000 ? 1_000 : 1_000 + n }
        for start in stride(from: 0, to: count, by: 1000) {
            var arguments: [any RedisArgument] = ["ZADD", Keys.dead]
            for n in start..<min(start + 1000, count) { arguments += [score(n), member(n)] }
            _ = try connection.send(arguments).checked()
        }
        let other = try redis.connection()  // another operator, on its own connection
        var visits: [String: Int] = [:]
        var removedAhead: Set<String> = []
        var added: Set<String> = []
        var pages = 0
        try SortedJobSet(.dead).forEachPageAscending(connection, pageSize: 1000) { page in
            pages += 1
            for record in page { visits[record.jid ?? "?", default: 0] += 1 }
            // The walker's own moves: the Flaky entries leave the set, the Other ones stay.
            let moves: [[any RedisArgument]] = page.filter { $0.className == "Flaky" }.map { ["ZREM", Keys.dead, $0.raw] }
            if !moves.isEmpty { _ = try connection.pipeline(moves) }
            // Every other page, the other operator deletes the page's last 3 entries (the walk's cursor among them).
            if pages % 2 == 1 {
                for record in page.suffix(3) { _ = try other.command("ZREM", Keys.dead, record.raw).checked() }
            }
            // It deletes 5 entries the walk has not reached, and adds one behind the cursor and one above the top.
            for k in 0..<5 {
                let n = count - 1 - ((pages - 1) * 5 + k)
                guard visits[jid(n)] == nil else { continue }  // the last page has reached the top
                removedAhead.insert(jid(n))
                _ = try other.command("ZREM", Keys.dead, member(n)).checked()
            }
            _ = try other.command("ZADD", Keys.dead, 0, member(100_000 + pages, className: "Flaky")).checked()
            _ = try other.command("ZADD", Keys.dead, 9_000_000_000, member(200_000 + pages, className: "Flaky")).checked()
            added.formUnion([jid(100_000 + pages), jid(200_000 + pages)])
        }
        let notOnce = (0..<count).map(jid).filter { !removedAhead.contains($0) && visits[$0] != 1 }
        XCTAssertEqual(notOnce.count, 0, "visited \(notOnce.prefix(5).map { "\($0): \(visits[$0] ?? 0)×" }) …")
        XCTAssertEqual(removedAhead.filter { visits[$0] != nil }, [], "removed before the walk reached them")
        XCTAssertEqual(added.filter { visits[$0] != nil }, [], "added behind the cursor or above the top")
        XCTAssertEqual(visits.count, count - removedAhead.count)
    }

    /// Two operators retry the same jobs at the same time: every job ends up in its queue once.
    func testConcurrentMovesNeverDuplicateOrLoseAJob() throws {
        for n in 1...300 { try put(Keys.retry, score: Double(n), failed(jid(n))) }
        let url = redis.url
        let results = Locked([BulkResult](repeating: BulkResult(), count: 4))
        DispatchQueue.concurrentPerform(iterations: 4) { index in
            let connection = try! RedisConnection(url: url)
            let admin = JobAdmin(connection: connection)
            // Two bulk retries and two bulk kills race for the same 300 jobs.
            let result = try! admin.performAll(index % 2 == 0 ? .retry : .kill, state: .retry)
            results.update { $0[index] = result }
        }
        let done = results.value.reduce(0) { $0 + $1.done }
        XCTAssertEqual(done, 300)
        let queued = try redis.payloads(list: "queue:default").compactMap(\.jid)
        let dead = try redis.payloads(zset: Keys.dead).compactMap(\.jid)
        XCTAssertEqual(queued.count + dead.count, 300)
        XCTAssertEqual(Set(queued + dead).count, 300)
        XCTAssertEqual(try redis.int("ZCARD", Keys.retry), 0)

        // Single-job race: the loser is told the job is gone.
        try put(Keys.retry, score: 1, failed(jid(999)))
        let record = try admin.findOne(jid: jid(999))
        try admin.perform(.retry, on: record)
        XCTAssertThrowsError(try admin.perform(.kill, on: record)) { error in
            XCTAssertEqual(error as? AdminError, .jobGone(jid: self.jid(999), location: "retry"))
        }
    }

    func testQueuePauseResumeClear() throws {
        try redis.client.enqueueMany((1...4).map { NewJob("Work", args: [.int(Int64($0))], queue: "bulk") })
        XCTAssertTrue(try QueueAdmin.pause(connection, name: "bulk"))
        XCTAssertFalse(try QueueAdmin.pause(connection, name: "bulk"))
        XCTAssertTrue(try QueueAdmin.pause(connection, name: "future"))
        let queues = try QueueAdmin.list(connection)
        XCTAssertEqual(queues.map(\.name), ["bulk", "future"])
        XCTAssertEqual(queues.map(\.paused), [true, true])
        XCTAssertEqual(queues.map(\.size), [4, 0])
        XCTAssertTrue(try QueueAdmin.resume(connection, name: "future"))
        XCTAssertEqual(try QueueAdmin.clear(connection, name: "bulk"), 4)
        XCTAssertEqual(try redis.int("EXISTS", "queue:bulk"), 0)
        XCTAssertEqual(try redis.int("SISMEMBER", Keys.queues, "bulk"), 0)
    }

    func testStatsMatchSidekiqDefinitions() throws {
        try redis.client.enqueueMany([NewJob("A"), NewJob("B", queue: "low")])
        try put(Keys.retry, score: 1, failed(jid(1)))
        let day = Clock.utcDay(Clock.now())
        try redis.command("MSET", Keys.statProcessed, 10, Keys.statFailed, 3, Keys.statProcessed(day: day), 4)
        // A live process with 2 busy and a stale member without a hash (Ruby counts both in
        // processes_size and the stale one adds 0 busy).
        try redis.command("SADD", Keys.processes, "h:1:aaaaaaaaaaaa", "h:2:bbbbbbbbbbbb")
        try redis.command("HSET", "h:1:aaaaaaaaaaaa", "info", "{}", "busy", 2)
        let stats = try Stats.load(connection)
        XCTAssertEqual(stats.processed, 10)
        XCTAssertEqual(stats.failed, 3)
        XCTAssertEqual(stats.processedToday, 4)
        XCTAssertEqual(stats.failedToday, 0)
        XCTAssertEqual(stats.day, day)
        XCTAssertEqual(stats.enqueued, 2)
        XCTAssertEqual(stats.retries, 1)
        XCTAssertEqual(stats.processes, 2)
        XCTAssertEqual(stats.busy, 2)
        XCTAssertEqual(stats.queues.map(\.name), ["default", "low"])
        XCTAssertFalse(stats.redis.version.isEmpty)
        XCTAssertGreaterThan(stats.redis.usedMemory, 0)
    }

    func testBusyJobsComeFromLiveProcessesOnly() throws {
        let payload = #"{"retry":true,"queue":"default","class":"Slow","args":[1],"jid":"\#(jid(5))"}"#
        let work = JSONValue.object(["queue": "default", "payload": .string(payload), "run_at": 1_700_000_000]).serialized()
        try redis.command("SADD", Keys.processes, "h:1:aaaaaaaaaaaa", "h:2:bbbbbbbbbbbb")
        try redis.command("HSET", "h:1:aaaaaaaaaaaa", "info", "{}", "busy", 1)
        try redis.command("HSET", "h:1:aaaaaaaaaaaa:workers", "t1", work)
        // The second process's hash expired: its workers hash must not count.
        try redis.command("HSET", "h:2:bbbbbbbbbbbb:workers", "t9", work)
        let busy = try WorkSet.all(connection)
        XCTAssertEqual(busy.count, 1)
        XCTAssertEqual(busy.first?.jid, jid(5))
        XCTAssertEqual(busy.first?.work, BusyWork(identity: "h:1:aaaaaaaaaaaa", thread: "t1", runAt: 1_700_000_000))
        XCTAssertEqual(try admin.findOne(jid: jid(5)).state, .busy)
        XCTAssertThrowsError(try admin.perform(.delete, jid: jid(5)))
    }
}

/// A value shared between threads, guarded by a lock.
final class Locked<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: Value
    init(_ value: Value) { stored = value }
    var value: Value { lock.withLock { stored } }
    func update(_ body: (inout Value) -> Void) { lock.withLock { body(&stored) } }
}
