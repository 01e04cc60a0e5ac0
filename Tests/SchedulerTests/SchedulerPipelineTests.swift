import Foundation
import WorkersQueue
@testable import WorkersScheduler
import WorkersTestServices
import XCTest

/// A round sends all its fires in one pipeline (`CronStore.fire(_:now:)`): round trips counted by the connection,
/// script calls by Redis (`INFO commandstats`); one broken entry in the middle, a flushed script cache, bounded
/// pipelines for a long round, and racing schedulers with many entries. Database 56.
final class SchedulerPipelineTests: XCTestCase {
    var redis: TestRedis!
    let start = at("2026-03-01T00:00:00Z")

    override func setUpWithError() throws { redis = try TestRedis(database: 56) }

    private func entries(_ count: Int, catchUp: CatchUpPolicy = .skip) throws -> [ScheduleEntry] {
        try (1...count).map { try cronEntry(String(format: "p.%03d", $0), "* * * * *", catchUp: catchUp, tick: .time) }
    }

    /// `calls` of a command in `INFO commandstats` (server-wide: the tests of one process run one at a time).
    private func calls(_ command: String) throws -> Int {
        let text = try redis.command("INFO", "commandstats").string ?? ""
        guard let line = text.split(whereSeparator: \.isNewline).first(where: { $0.hasPrefix("cmdstat_\(command):") }),
              let field = line.split(separator: ",").first(where: { $0.contains("calls=") }) else { return 0 }
        return Int(field.split(separator: "=").last ?? "") ?? 0
    }

    /// Runs one round at `time` and returns its report with the round trips the runner's connection made
    /// and the `EVALSHA` calls Redis counted.
    private func round(_ runner: SchedulerRunner, _ clock: ManualClock, at time: Date) throws
        -> (report: RoundReport, roundTrips: Int, evalsha: Int) {
        clock.set(time)
        let (trips, evalsha) = (runner.store.connection.roundTrips, try calls("evalsha"))
        let report = try runner.runRound()
        return (report, runner.store.connection.roundTrips - trips, try calls("evalsha") - evalsha)
    }

    private func assertJobsOnce(_ expected: [(String, Date)], file: StaticString = #filePath, line: UInt = #line) throws {
        let jids = try redis.queued().compactMap { $0.fields["jid"]?.stringValue }
        XCTAssertEqual(jids.count, expected.count, "jobs in the queue", file: file, line: line)
        XCTAssertEqual(Set(jids), Set(expected.map { CronJobID.jid(entry: $0.0, tick: $0.1) }), file: file, line: line)
    }

    /// 200 entries due at the same second: one round trip for their states, one for all 200 fires (the first
    /// round also loads the script in that same round trip), 200 script calls, each entry fired once, in order.
    func testTwoHundredEntriesDueTogetherFireInOneRoundTrip() throws {
        let entries = try entries(200)
        let clock = ManualClock(start)
        let runner = SchedulerRunner(entries: entries, store: CronStore(connection: try redis.connection()), clock: clock)
        try runner.sync()
        for minute in 0...1 {
            let tick = start.addingTimeInterval(Double(minute) * 60)
            let (report, roundTrips, evalsha) = try round(runner, clock, at: tick.addingTimeInterval(5))
            XCTAssertEqual(roundTrips, 2, "minute \(minute): HMGETs, then every fire, in one pipeline each")
            XCTAssertEqual(evalsha, 200, "minute \(minute)")
            XCTAssertEqual(report.failures, [:])
            XCTAssertEqual(report.results, entries.map {
                TickResult(entry: $0.name, tick: tick, outcome: .fired(jid: CronJobID.jid(entry: $0.name, tick: tick)))
            })
        }
        try assertJobsOnce(entries.flatMap { entry in (0...1).map { (entry.name, start.addingTimeInterval(Double($0) * 60)) } })
        // Nothing more is due: the next round at the same time sends no fire at all.
        let (report, roundTrips, evalsha) = try round(runner, clock, at: start.addingTimeInterval(66))
        XCTAssertEqual([report.results.count, roundTrips, evalsha], [0, 1, 0])
    }

    /// A long catch-up (50 entries × 4 ticks) with pipelines of at most 64 fires: 4 round trips for the fires,
    /// every tick fired once and reported in order (per entry, oldest tick first).
    func testALongRoundIsSentInBoundedPipelinesAndReportedInOrder() throws {
        let entries = try entries(50, catchUp: .all(within: 3600))
        let clock = ManualClock(start)
        let runner = SchedulerRunner(entries: entries, store: CronStore(connection: try redis.connection(), firesPerPipeline: 64),
                                     clock: clock)
        try runner.sync()
        _ = try round(runner, clock, at: start.addingTimeInterval(5))  // tick 0: sets every cursor
        let (report, roundTrips, evalsha) = try round(runner, clock, at: start.addingTimeInterval(4 * 60 + 5))
        XCTAssertEqual(roundTrips, 1 + 4, "HMGETs, then 200 fires in pipelines of 64, 64, 64, 8")
        XCTAssertEqual(evalsha, 200)
        let ticks = (1...4).map { start.addingTimeInterval(Double($0) * 60) }
        XCTAssertEqual(report.results, entries.flatMap { entry in ticks.map {
            TickResult(entry: entry.name, tick: $0, outcome: .fired(jid: CronJobID.jid(entry: entry.name, tick: $0)))
        } })
        try assertJobsOnce(entries.flatMap { entry in ([start] + ticks).map { (entry.name, $0) } })
    }

    /// One entry in the middle of the pipeline has a key of the wrong type: its fire is an error reply, it alone
    /// fails, and the entries after it in the same pipeline fire.
    func testAWrongTypeEntryInTheMiddleFailsAloneAndTheEntriesAfterItFire() throws {
        let entries = try entries(9)
        let clock = ManualClock(start)
        let runner = SchedulerRunner(entries: entries, store: CronStore(connection: try redis.connection()), clock: clock)
        try runner.sync()
        try redis.command("SET", "cron_job:p.005:enqueued", "wrong type")
        let (report, roundTrips, evalsha) = try round(runner, clock, at: start.addingTimeInterval(5))
        XCTAssertEqual([roundTrips, evalsha], [2, 9], "one pipeline for all nine fires, the broken one included")
        XCTAssertEqual(report.failures.keys.sorted(), ["p.005"])
        XCTAssertTrue(report.failures["p.005"]?.contains("WRONGTYPE") ?? false, "\(report.failures)")
        let healthy = entries.filter { $0.name != "p.005" }
        XCTAssertEqual(report.results.map(\.entry), healthy.map(\.name))
        XCTAssertEqual(report.fired.map(\.entry), healthy.map(\.name))
        try assertJobsOnce(healthy.map { ($0.name, start) })

        try redis.command("DEL", "cron_job:p.005:enqueued")
        let next = start.addingTimeInterval(60)
        let (repaired, _, _) = try round(runner, clock, at: next.addingTimeInterval(5))
        XCTAssertEqual(repaired.failures, [:])
        XCTAssertEqual(repaired.fired.map(\.entry), entries.map(\.name))
    }

    /// `SCRIPT FLUSH` (or a Redis restart) between two rounds: every fire of the pipeline is answered `NOSCRIPT`;
    /// the runner loads the script and sends those fires again once, so the round still fires every entry once.
    func testScriptFlushBeforeARoundStillFiresEveryEntryOnce() throws {
        let entries = try entries(50)
        let clock = ManualClock(start)
        let runner = SchedulerRunner(entries: entries, store: CronStore(connection: try redis.connection()), clock: clock)
        try runner.sync()
        XCTAssertEqual(try round(runner, clock, at: start.addingTimeInterval(5)).report.fired.count, 50)
        try redis.command("SCRIPT", "FLUSH")
        let loads = try calls("script|load")
        let tick = start.addingTimeInterval(60)
        let (report, roundTrips, evalsha) = try round(runner, clock, at: tick.addingTimeInterval(5))
        XCTAssertEqual(report.failures, [:])
        XCTAssertEqual(report.results, entries.map {
            TickResult(entry: $0.name, tick: tick, outcome: .fired(jid: CronJobID.jid(entry: $0.name, tick: tick)))
        })
        XCTAssertEqual(roundTrips, 3, "HMGETs, the fires (all NOSCRIPT), SCRIPT LOAD with the fires again")
        XCTAssertEqual(evalsha, 100, "50 answered NOSCRIPT, 50 sent again")
        XCTAssertEqual(try calls("script|load") - loads, 1)
        try assertJobsOnce(entries.flatMap { [($0.name, start), ($0.name, tick)] })
    }

    /// Three schedulers in lockstep over 40 entries, each round's fires in pipelines of 16: every tick of every
    /// entry is fired (and reported fired) exactly once.
    func testRacingSchedulersWithManyEntriesFireEachTickOnce() throws {
        let entries = try entries(40)
        let steps = 30
        let start = self.start
        let url = redis.url
        let errors = ThreadErrors()
        let barrier = Barrier(3)
        let collected = Locked<[TickResult]>([])
        onThreads(3) { index in
            var mine: [TickResult] = []
            do {
                let clock = ManualClock(start)
                let runner = SchedulerRunner(entries: entries, store: CronStore(connection: try RedisConnection(url: url),
                                                                                firesPerPipeline: 16), clock: clock)
                try runner.sync()
                for step in 0..<steps {
                    clock.set(start.addingTimeInterval(Double(step) * 60 + Double((index + step) % 3) * 7))
                    barrier.wait()
                    mine += try runner.runRound().results
                }
            } catch {
                errors.record(error, "scheduler \(index)")
                for _ in 0..<steps { barrier.wait() }
            }
            collected.withLock { $0 += mine }
        }
        XCTAssertEqual(errors.all, [])
        let results = collected.withLock { $0 }
        let expected = entries.flatMap { entry in minuteTicks(from: start, count: steps).map { (entry.name, $0) } }
        let fired = results.filter { $0.outcome.jid != nil }
        XCTAssertEqual(fired.count, expected.count, "fires reported by the three schedulers")
        XCTAssertEqual(Set(fired.map { "\($0.entry) \(utc($0.tick)) \($0.outcome)" }),
                       Set(expected.map { "\($0.0) \(utc($0.1)) fired \(CronJobID.jid(entry: $0.0, tick: $0.1))" }))
        try assertJobsOnce(expected)
        XCTAssertGreaterThan(results.filter { $0.outcome == .stale || $0.outcome == .taken }.count, 0,
                             "no scheduler ever lost a claim: the schedulers did not race")
    }
}
