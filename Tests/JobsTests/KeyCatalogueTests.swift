import WorkersBenchJobs
import Foundation
import WorkersAppJobs
import Logging
import WorkersQueue
import WorkersScheduler
import WorkersSubjectKeys
import WorkersTestServices
import Workers
import WorkersTestSupport
import XCTest

/// The key catalogue (`KeyCatalogue.all`, the union of each module's) lists every key the code writes: a real
/// worker run over most features leaves no key in Redis that no key type builds, nor one of a type its pattern does
/// not hold. Redis database 63.
final class KeyCatalogueTests: XCTestCase {
    /// Each pattern is its builder's: the example it builds matches it, every part appears in the key once, and the
    /// names are unique (a state fuzzer addresses patterns by name).
    func testEveryPatternMatchesTheKeyItsBuilderMakes() {
        var names = Set<String>()
        for pattern in KeyCatalogue.all {
            XCTAssertTrue(pattern.matches(pattern.example), "\(pattern) does not match its example \(pattern.example)")
            XCTAssertEqual(pattern.template.components(separatedBy: "<").count - 1, pattern.parts.count,
                           "\(pattern.name): its builder must use each part once: \(pattern.template)")
            XCTAssertTrue(names.insert(pattern.name).inserted, "two patterns named \(pattern.name)")
            XCTAssertFalse(pattern.types.isEmpty, pattern.name)
        }
        XCTAssertNil(KeyCatalogue.all.pattern(of: "somebody-elses-key"), "a key no key type builds matches nothing")
        XCTAssertNil(KeyCatalogue.all.pattern(of: "host:notapid:0123"), "a process hash's key needs its identity's shape")
        XCTAssertEqual(KeyCatalogue.all.pattern(of: "host:4242:0123456789ab")?.name, "process")
        XCTAssertEqual(KeyCatalogue.all.pattern(of: "stat:processed:2026-12-07")?.name, "stat-processed-day")
        XCTAssertNil(KeyCatalogue.all.pattern(of: "stat:processed:yesterday").map(\.name).flatMap {
            $0 == "stat-processed-day" ? $0 : nil
        })
    }

    /// Enqueue, fetch, settle (ack, retry, dead), schedule, cancel, unique, pause, limiters (concurrent, window),
    /// batch with its callback, progress, class metrics, a cron tick, the subject-key signal and a provider block,
    /// through a real in-process worker; every key in the database, read mid-run and at the end, matches a
    /// catalogue pattern whose types include the key's `TYPE`.
    func testEveryKeyARealRunCreatesIsInTheCatalogue() throws {
        let fixture = try JobsFixture(prefix: "keycatalogue", connections: 4, redis: 192)
        defer { fixture.tearDown() }
        let redis = fixture.redis
        var registry = JobRegistry.builtins()
        BenchJobs.register(into: &registry)
        LimitProbes.register(into: &registry, redisURL: redis.url)
        SteerProbes.register(into: &registry, redisURL: redis.url)
        var quiet = Logger(label: "key-catalogue")
        quiet.logLevel = .critical
        let process = try WorkerProcess(configuration: .forTests(redis: redis, concurrency: 4), registry: registry,
                                        database: fixture.jobDatabase, logger: quiet)
        try process.start()
        defer { process.shutdown() }
        let client = redis.client

        // Settle: ack, retry, dead; a job for later; a cancelled one; a unique job in a paused queue.
        for n in 0..<3 { _ = try client.enqueue(NewJob("Noop", args: [.int(Int64(n))])) }
        _ = try client.enqueue(NewJob("Fail", args: ["retried"]))
        _ = try client.enqueue(NewJob("Fail", args: ["dead"], retry: .int(0)))
        _ = try client.enqueue(NewJob("Noop", args: ["later"]), at: Date().addingTimeInterval(3600))
        let cancelled = try client.enqueue(NewJob("Noop", args: ["cancelled"]), at: Date().addingTimeInterval(3600))
        try redis.pool.withConnection { _ = try JobAdmin(connection: $0).cancel(jid: cancelled) }
        try redis.pool.withConnection { _ = try QueueAdmin.pause($0, name: "held") }
        _ = try client.enqueueUnique(NewJob("Noop", args: ["unique"], queue: "held"), policy: UniquePolicy(for: .seconds(600)))
        // Limiters, a batch with a callback, a job reporting progress.
        // (The concurrent and keyed probes run for seconds: their leases are held when the keys are read mid-run.)
        _ = try client.enqueue(NewJob("LimitProbeConcurrent", args: [20000]))
        _ = try client.enqueue(NewJob("LimitProbeMutex", args: [20000, "user-1"]))
        _ = try client.enqueue(NewJob("LimitProbeWindow"))
        _ = try client.createBatch(NewBatch(description: "keys", jobs: [NewJob("BatchProbe", args: ["ok", 0]),
                                                                         NewJob("BatchProbe", args: ["doomed", 0], retry: .int(1))],
                                            onComplete: BatchCallback("Noop")))
        let steer = try client.enqueue(NewJob("SteerProbe", args: [.object(["steps": 100, "step_ms": 50, "ledger": "none"])]))
        // A cron tick, the subject-key erasure signal, a provider block.
        try redis.pool.withConnection { connection in
            let store = CronStore(connection: connection)
            let entry = try ScheduleEntry(name: "nightly", cron: try CronExpression("0 3 * * *"), className: "Noop",
                                          queue: "cron", timeZone: TimeZone(identifier: "UTC")!)
            _ = try store.sync([entry])
            _ = try store.fire(entry, tick: Date(timeIntervalSince1970: 1_796_000_400), now: Date())
        }
        try SubjectKeyInvalidation.announce(on: [redis.pool])
        try SubjectKeyErasureJournal(pools: [redis.pool]).record(personDigest: Data(repeating: 7, count: 32))
        _ = try ProviderBlock(redis: redis.pool, provider: "nominatim", patience: 1).block(seconds: 60, probeToken: nil)
        try GeocodeCache(redis: redis.pool, provider: "nominatim", language: "en", zoom: 14, ttl: 60)
            .store(.empty, for: GeocodeCell(latitude: 48.857, longitude: 2.352, decimals: 3))

        // Mid-run: the steering job is running (its progress key written by the heartbeat), the others settled.
        XCTAssertTrue(try eventually(timeout: 60) { try redis.command("EXISTS", JobProgress.key(jid: steer)).integer == 1 },
                      "the running job's progress never reached Redis")
        let mutex = LimitKeys.instance(name: "probe-mutex", key: "user-1")
        XCTAssertTrue(try eventually(timeout: 60) {
            let leased = try redis.command("EXISTS", mutex).integer == 1
            return leased && process.processedCount >= 10
        }, "the workload did not settle")
        var seen = try Self.keys(redis)
        try redis.pool.withConnection { _ = try JobAdmin(connection: $0).cancel(jid: steer) }
        XCTAssertTrue(try eventually(timeout: 60) { try redis.command("ZCARD", Keys.dead).integer ?? 0 >= 4 })
        seen.merge(try Self.keys(redis)) { first, _ in first }

        var unmatched: [String] = []
        for (key, type) in seen.sorted(by: { $0.key < $1.key }) {
            let patterns = KeyCatalogue.all.filter { $0.matches(key) }
            if patterns.isEmpty { unmatched.append(key); continue }
            XCTAssertTrue(patterns.contains { $0.types.contains { $0.rawValue == type } },
                          "\(key) is a \(type); its patterns \(patterns.map(\.description)) say otherwise")
        }
        XCTAssertEqual(unmatched, [], "keys no key type builds (add them to a key type and its catalogue)")
        // The run reached the features it claims to (a workload that silently did less would prove less).
        let owners = Set(seen.keys.compactMap { KeyCatalogue.all.pattern(of: $0)?.owner })
        for owner in ["queues", "runtime: reliable fetch", "runtime: heartbeat", "sets", "stats", "batches", "unique jobs",
                      "limiters", "progress", "cancel", "class metrics", "cron", "subject keys", "geo jobs", "bench jobs"] {
            XCTAssertTrue(owners.contains(owner), "no key of \(owner) was seen: \(seen.keys.sorted())")
        }
        let names = Set(seen.keys.flatMap { key in KeyCatalogue.all.filter { $0.matches(key) }.map(\.name) })
        for name in ["working", "process-work", "limit", "limit-keyed", "batch-died", "batch-failed", "cancel-mark",
                     "subject-keys-erasures", "geocode-answer", "class-metrics-sidekiq-histogram", "stat-minutely-failed"] {
            XCTAssertTrue(names.contains(name), "no \(name) key was seen: \(seen.keys.sorted())")
        }
    }

    /// Every key of the database with its `TYPE`.
    static func keys(_ redis: TestRedis) throws -> [String: String] {
        let connection = try redis.connection()
        var out: [String: String] = [:]
        for key in try connection.scanKeys(matching: "*") {
            out[key] = try connection.command("TYPE", key).string ?? "?"
        }
        return out
    }
}
