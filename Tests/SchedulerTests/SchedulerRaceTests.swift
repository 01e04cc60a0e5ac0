import Foundation
import WorkersQueue
@testable import WorkersScheduler
import WorkersTestServices
import XCTest

/// Single fire: several schedulers (threads, each with its own connection and clock) walk the same
/// ticks; every tick is enqueued exactly once. Database 11.
final class SchedulerRaceTests: XCTestCase {
    var redis: TestRedis!
    let start = at("2026-03-01T00:00:00Z")
    let tickCount = 500

    override func setUpWithError() throws { redis = try TestRedis(database: 11) }

    /// Three schedulers see every tick at (nearly) the same moment: each tick is contested.
    func testThreeSchedulersInLockstepFireEachTickExactlyOnce() throws {
        let entry = try cronEntry("race.lockstep", "* * * * *", tick: .time)
        let start = self.start
        let results = try race(entry: entry) { index, step in
            // All within the 60 s grace of tick `step`, in a different order each step.
            start.addingTimeInterval(Double(step) * 60 + Double((index + step) % 3) * 7)
        }
        try assertEachTickOnce(entry: entry, results: results)
        // Sanity check that the race happened: some losers got as far as the claim and lost it there
        // (the others read the new cursor first and had nothing to do).
        let losses = results.filter { $0.outcome == .stale || $0.outcome == .taken }.count
        XCTAssertGreaterThan(losses, 0, "no scheduler ever lost a claim: the schedulers did not race")
    }

    /// Three schedulers walk at their own pace with random jumps (catch-up `all` fills the gaps).
    func testThreeFreeRunningSchedulersWithCatchUpFireEachTickExactlyOnce() throws {
        let entry = try cronEntry("race.free", "* * * * *", catchUp: .all(within: 7 * 86_400), tick: .time)
        let start = self.start
        let end = start.addingTimeInterval(Double(tickCount - 1) * 60)
        let results = try race(entry: entry, barrier: false) { index, step in
            // Random jumps of 0-3 minutes plus some seconds; everyone ends on the last tick.
            if step == 0 { return start }
            var generator = SystemRandomNumberGenerator()
            let jump = Double(step) * 60 + Double(Int.random(in: -120...60, using: &generator))
            return min(end.addingTimeInterval(30), max(start, start.addingTimeInterval(jump)))
        }
        try assertEachTickOnce(entry: entry, results: results)
    }

    // MARK: Harness

    /// Runs three schedulers; scheduler `index` runs a round at `time(index, step)` for each step
    /// (`tickCount + 1` steps, the last at the final tick). With `barrier`, all three start each step together.
    private func race(entry: ScheduleEntry, barrier useBarrier: Bool = true,
                      time: @escaping @Sendable (Int, Int) -> Date) throws -> [TickResult] {
        let errors = ThreadErrors()
        let barrier = Barrier(3)
        let collected = Locked<[TickResult]>([])
        let url = redis.url
        let steps = tickCount
        let final = start.addingTimeInterval(Double(tickCount - 1) * 60 + 1)
        onThreads(3) { index in
            let clock = ManualClock(time(index, 0))
            var mine: [TickResult] = []
            do {
                let runner = SchedulerRunner(entries: [entry], store: CronStore(connection: try RedisConnection(url: url)),
                                             clock: clock)
                try runner.sync()  // every scheduler syncs at start, concurrently
                for step in 0...steps {
                    clock.set(step == steps ? final : time(index, step))
                    if useBarrier { barrier.wait() }
                    mine += try runner.runRound().results
                }
            } catch {
                errors.record(error, "scheduler \(index)")
                if useBarrier { for _ in 0...steps { barrier.wait() } }  // do not leave the others waiting
            }
            collected.withLock { $0 += mine }
        }
        XCTAssertEqual(errors.all, [])
        return collected.withLock { $0 }
    }

    private func assertEachTickOnce(entry: ScheduleEntry, results: [TickResult],
                                    file: StaticString = #filePath, line: UInt = #line) throws {
        let ticks = minuteTicks(from: start, count: tickCount)
        let fired = results.filter { $0.outcome.jid != nil }
        XCTAssertEqual(fired.count, tickCount, "fires reported by the schedulers", file: file, line: line)
        XCTAssertEqual(Set(fired.map(\.tick)), Set(ticks), file: file, line: line)

        let jobs = try redis.queued()
        XCTAssertEqual(jobs.count, tickCount, "jobs in the queue", file: file, line: line)
        let jids = jobs.compactMap { $0.fields["jid"]?.stringValue }
        XCTAssertEqual(Set(jids).count, tickCount, "no jid twice", file: file, line: line)
        XCTAssertEqual(Set(jids), Set(ticks.map { CronJobID.jid(entry: entry.name, tick: $0) }), file: file, line: line)
        // Each job carries its own tick, and the queue holds them in tick order.
        let times = jobs.compactMap { $0.fields["args"]?.arrayValue?.last?.objectValue?["time"]?.stringValue }
        XCTAssertEqual(times, ticks.map(TickFormat.iso8601UTC), file: file, line: line)
        XCTAssertEqual(try redis.hashField(CronKeys.job(entry.name), "last_tick"), TickFormat.iso8601UTC(ticks.last!),
                       file: file, line: line)
    }
}
