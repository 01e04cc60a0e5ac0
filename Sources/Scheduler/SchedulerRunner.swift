import CoreMetrics
import Foundation
import Synchronization
import Logging
import WorkersQueue

/// The outcome of one tick considered in one round.
public struct TickResult: Sendable, Equatable {
    public var entry: String
    public var tick: Date
    public var outcome: FireOutcome
}

/// What one round did.
public struct RoundReport: Sendable, Equatable {
    public var now: Date
    /// Every tick the planner proposed, in the order tried (per entry, oldest first).
    public var results: [TickResult] = []
    /// Entries skipped because Redis has no hash for them.
    public var missing: [String] = []
    /// Entries whose fire failed this round (entry name → error), e.g. a key of the wrong type.
    /// Their earlier ticks of the round stay fired; the next round retries from the cursor.
    public var failures: [String: String] = [:]

    /// The ticks this round fired.
    public var fired: [TickResult] { results.filter { $0.outcome.jid != nil } }
}

/// The scheduler loop: each round reads every entry's status and catch-up cursor from Redis, asks
/// the `CatchUpPlanner` which ticks are due, and fires them all through `CronStore.fire(_:now:)` (one atomic
/// claim + enqueue per tick, all in one pipeline). Any number of runners, in any number of processes, may run against
/// the same Redis: the claim makes each tick fire once.
///
/// Definitions (cron, class, args, policy) come from the schedule file this runner was given; the
/// status (enabled/disabled) and the cursor come from Redis every round. An entry whose hash is
/// gone from Redis is not fired (a newer schedule file removed it).
///
/// Reload (SIGHUP): `requestReload()` only raises a flag and wakes the loop; the loop itself reads
/// `schedulePath` again between two rounds, syncs the new entries into Redis and only then swaps
/// `entries` (added, changed and removed entries take effect at the next round). An invalid file,
/// or a sync that fails, leaves the previous entries in place and is logged once per request.
///
/// Thread rules: `runRound`, `run`, `sync` and `reloadSchedule` are called from one thread (the
/// runner owns one `CronStore`, hence one connection); that thread alone reads and writes
/// `entries` once `run` has started. `stop`, `requestReload` and `health` may be called from any thread.
public final class SchedulerRunner: @unchecked Sendable {
    /// The entry table. Written only by `reloadSchedule` on the loop's thread (see the type's rules).
    public private(set) var entries: [ScheduleEntry]
    /// The schedule file `reloadSchedule` reads; nil: this runner cannot reload.
    public let schedulePath: String?
    public let store: CronStore
    public let clock: any WallClock
    public let planner: CatchUpPlanner
    /// The longest the loop sleeps between rounds, in real seconds (so that status changes and
    /// `stop` are noticed promptly even when the next tick is hours away).
    public let maxSleep: TimeInterval
    let logger: Logger
    private let stopSignal = StopSignal()
    private let done = DispatchSemaphore(value: 0)
    private var warnedMissing: Set<String> = []
    /// Wall-clock time (seconds since 1970) of the last round that reached Redis; 0 before the first.
    /// Written by the loop's thread, read by any (`health`).
    private let lastRoundAt = Atomic<Double>(0)
    /// `entries.count`, for `health` on any thread.
    private let entryCount = Atomic<Int>(0)
    /// Raised by `requestReload` (any thread), lowered by the loop when it reloads.
    private let reloadRequested = Atomic<Bool>(false)
    private var lastFailures: [String: String] = [:]
    /// Which entries of the schedule file this runner owns (with several Redis shards: the entries
    /// whose queue lives on its store's shard, docs/sharding.md). Nil: every entry.
    public let owns: (@Sendable (ScheduleEntry) -> Bool)?

    public init(entries: [ScheduleEntry], store: CronStore, clock: any WallClock = SystemClock(),
                planner: CatchUpPlanner = CatchUpPlanner(), maxSleep: TimeInterval = 1,
                schedulePath: String? = nil, logger: Logger = Logger(label: "scheduler"),
                owns: (@Sendable (ScheduleEntry) -> Bool)? = nil) {
        precondition(maxSleep > 0)
        self.owns = owns
        let entries = owns.map { entries.filter($0) } ?? entries
        self.entries = entries
        self.schedulePath = schedulePath
        entryCount.store(entries.count, ordering: .relaxed)
        self.store = store
        self.clock = clock
        self.planner = planner
        self.maxSleep = maxSleep
        self.logger = logger
    }

    /// Writes the entries into Redis (`CronStore.sync`) and logs what changed.
    @discardableResult
    public func sync() throws -> CronSyncReport {
        let report = try store.sync(entries)
        logger.info("schedule synced to Redis", metadata: [
            "entries": "\(entries.count)", "created": "\(report.created.joined(separator: ","))",
            "removed": "\(report.removed.joined(separator: ","))"])
        return report
    }

    /// One pass at `clock.now()`: fires every due tick of every enabled entry, all in one pipeline
    /// (`CronStore.fire(_:now:)`; a few for a very long catch-up), then reports each outcome in order.
    /// Throws on a Redis connection failure; ticks fired before the failure stay fired (each fire is atomic)
    /// and the next round continues from the persisted cursor.
    ///
    /// After a `disabled` or `missing` outcome, the entry's later ticks of the round (sent in the same pipeline)
    /// are refused the same way by the script, and those refusals are left out of the report, as when they were
    /// not tried; any other outcome (the entry enabled again in between) is reported. After an error, the entry's
    /// later ticks are reported as they went (usually the same error, which is recorded once).
    @discardableResult
    public func runRound() throws -> RoundReport {
        let now = clock.now()
        var report = RoundReport(now: now)
        let states = try store.states(for: entries.map(\.name))
        var due: [(entry: ScheduleEntry, cursor: Date?, ticks: [Date])] = []
        for entry in entries {
            guard let state = states[entry.name], state.exists else {
                report.missing.append(entry.name)
                if warnedMissing.insert(entry.name).inserted {
                    logger.warning("entry not in Redis (removed by a newer schedule file?); not firing it",
                                   metadata: ["entry": "\(entry.name)"])
                }
                continue
            }
            warnedMissing.remove(entry.name)
            guard state.isEnabled else { continue }
            let ticks = planner.dueTicks(entry: entry.withEnabled(true), lastFired: state.catchUpCursor, now: now)
            if !ticks.isEmpty { due.append((entry, state.catchUpCursor, ticks)) }
        }
        var outcomes = store.fire(due.flatMap { item in item.ticks.map { FireRequest(entry: item.entry, tick: $0) } }, now: now)[...]
        for (entry, cursor, ticks) in due {
            var fired: [Date] = []
            defer { Self.countMisses(entry: entry, after: cursor, fired: fired) }
            var refused = false
            for (tick, result) in zip(ticks, outcomes.prefix(ticks.count)) {
                switch result {
                case .failure(let error as RedisError) where error.isConnectionLevel:
                    throw error  // the whole round is lost; the loop retries
                case .failure(let error):
                    // This entry's keys or data are broken: the other entries still fire.
                    if report.failures[entry.name] == nil { report.failures[entry.name] = "\(error)" }
                case .success(let outcome):
                    if refused, outcome == .disabled || outcome == .missing { continue }
                    report.results.append(TickResult(entry: entry.name, tick: tick, outcome: outcome))
                    if let jid = outcome.jid {
                        fired.append(tick)
                        Counter(label: "workers_scheduler_fires_total", dimensions: [("entry", entry.name)]).increment()
                        logger.info("fired", metadata: ["entry": "\(entry.name)", "tick": "\(TickFormat.iso8601UTC(tick))",
                                                        "jid": "\(jid)", "class": "\(entry.className)", "queue": "\(entry.queue)"])
                    } else if outcome == .disabled || outcome == .missing {
                        refused = true
                    }
                }
            }
            outcomes = outcomes.dropFirst(ticks.count)
        }
        logFailureChanges(report.failures)
        return report
    }

    /// Ticks the catch-up policy passed over on the way to the newest tick fired this round (counted
    /// once: they lie behind the cursor afterwards).
    private static func countMisses(entry: ScheduleEntry, after cursor: Date?, fired: [Date]) {
        guard let cursor, let newest = fired.max() else { return }
        let between = entry.cron.ticks(from: cursor, to: newest, in: entry.timeZone, limit: 100_000).count
        let missed = between - fired.count
        if missed > 0 {
            Counter(label: "workers_scheduler_missed_ticks_total", dimensions: [("entry", entry.name)]).increment(by: missed)
        }
    }

    /// Logs an entry's fire failure when it starts or changes, and when it clears, not every round.
    private func logFailureChanges(_ failures: [String: String]) {
        for (name, error) in failures where lastFailures[name] != error {
            logger.error("cannot fire entry; other entries continue", metadata: ["entry": "\(name)", "error": "\(error)"])
        }
        for name in lastFailures.keys where failures[name] == nil {
            logger.notice("entry fires again", metadata: ["entry": "\(name)"])
        }
        lastFailures = failures
    }

    /// The earliest tick of any entry after `date` (nil if no entry ever fires again).
    public func nextTick(after date: Date) -> Date? {
        entries.compactMap { $0.nextTick(after: date) }.min()
    }

    /// Runs rounds until `stop()`: a round, then a sleep until the next tick of any entry (at most
    /// `maxSleep`). A failed round is logged and retried after `maxSleep`; nothing is lost because
    /// the cursor is in Redis.
    public func run() {
        defer { done.signal() }
        logger.info("scheduler started", metadata: ["entries": "\(entries.count)"])
        var failures = 0
        var backoff = ReconnectBackoff()
        while !stopSignal.isStopped {
            if reloadRequested.exchange(false, ordering: .acquiringAndReleasing) { reloadSchedule() }
            var pause = maxSleep
            do {
                try runRound()
                lastRoundAt.store(Date().timeIntervalSince1970, ordering: .relaxed)
                if failures > 0 { logger.notice("scheduler round succeeded again", metadata: ["failed_rounds": "\(failures)"]) }
                failures = 0
                backoff.reset()
                let now = clock.now()
                if let next = nextTick(after: now) { pause = min(maxSleep, max(0.001, next.timeIntervalSince(now))) }
            } catch {
                failures += 1
                if failures == 1 || failures % 60 == 0 {
                    logger.error("scheduler round failed; retrying", metadata: ["error": "\(error)", "failed_rounds": "\(failures)"])
                }
                // The reconnect backoff, which a reload request does not cut short (only stop does).
                stopSignal.wait(seconds: backoff.failed(), ignoringWakes: true)
                continue
            }
            stopSignal.wait(seconds: pause)
        }
        if failures > 0 {
            // Nothing is in flight in a scheduler: each fire is one atomic script, and the catch-up
            // cursor is in Redis, so the next round (of any scheduler) fires what this one missed.
            logger.notice("scheduler stopping while Redis is unreachable; nothing left in flight: ticks not fired are caught up per entry's catch_up by the next scheduler to run",
                          metadata: ["failed_rounds": "\(failures)"])
        }
        logger.info("scheduler stopped")
    }

    /// Healthy while rounds reach Redis (the last one within `max(10 s, 5 × maxSleep)`) and the loop
    /// has not been stopped. For `/healthz`; any thread.
    public var health: (ok: Bool, detail: String) {
        if stopSignal.isStopped { return (false, "stopped") }
        let last = lastRoundAt.load(ordering: .relaxed)
        guard last > 0 else { return (false, "no scheduler round has reached Redis yet") }
        let age = Date().timeIntervalSince1970 - last
        if age > max(10, 5 * maxSleep) { return (false, "no scheduler round reached Redis for \(Int(age)) s") }
        return (true, "ok: \(entryCount.load(ordering: .relaxed)) entries, last round \(Int(age * 1000)) ms ago")
    }

    /// Runs the loop on a new thread and returns at once.
    public func start() {
        let thread = Thread { [self] in run() }
        thread.name = "scheduler"
        thread.start()
    }

    /// Asks the loop to stop after its current round. Any thread.
    public func stop() { stopSignal.stop() }

    /// Asks the loop to read `schedulePath` again before its next round (SIGHUP). Any thread;
    /// returns at once. Requests made while one is pending are served by one reload.
    public func requestReload() {
        reloadRequested.store(true, ordering: .releasing)
        stopSignal.wake()
    }

    /// Reads `schedulePath`, syncs its entries into Redis and makes them the entry table. On an
    /// invalid file or a failed sync the previous entries stay (and Redis keeps the previous
    /// definitions); the reason is logged. Loop thread only (or before `run`).
    @discardableResult
    public func reloadSchedule() -> ScheduleReload {
        guard let schedulePath else {
            logger.warning("reload asked for, but this scheduler has no schedule file to read")
            return .failed(reason: "no schedule file")
        }
        let file: ScheduleFile
        do {
            file = try ScheduleFile.load(path: schedulePath)
        } catch {
            logger.error("schedule file not reloaded: it is invalid; the previous schedule stays in force",
                         metadata: ["reason": "\(error)", "entries": "\(entries.count)"])
            return .failed(reason: error.description)
        }
        let fileEntries = owns.map { file.entries.filter($0) } ?? file.entries
        let old = Dictionary(uniqueKeysWithValues: entries.map { ($0.name, $0) })
        let new = Dictionary(uniqueKeysWithValues: fileEntries.map { ($0.name, $0) })
        do {
            try store.sync(fileEntries)
        } catch {
            logger.error("schedule file not reloaded: cannot write it to Redis; the previous schedule stays in force",
                         metadata: ["error": "\(error)"])
            return .failed(reason: "\(error)")
        }
        let change = ScheduleChange(added: new.keys.filter { old[$0] == nil }.sorted(),
                                    changed: new.keys.filter { name in old[name].map { $0 != new[name] } ?? false }.sorted(),
                                    removed: old.keys.filter { new[$0] == nil }.sorted())
        entries = fileEntries
        entryCount.store(entries.count, ordering: .relaxed)
        for name in change.removed { warnedMissing.remove(name) }
        logger.notice("schedule reloaded", metadata: [
            "entries": "\(entries.count)", "added": "\(change.added.joined(separator: ","))",
            "changed": "\(change.changed.joined(separator: ","))", "removed": "\(change.removed.joined(separator: ","))"])
        return .applied(change)
    }

    /// Waits until `run()` has returned (after `stop()`), at most `timeout` seconds; true if it did.
    @discardableResult
    public func waitUntilStopped(timeout: Double = .infinity) -> Bool {
        if timeout.isFinite {
            guard done.wait(timeout: .now() + timeout) == .success else { return false }
        } else {
            done.wait()
        }
        done.signal()  // let later callers through too
        return true
    }
}

/// What one `reloadSchedule` did.
public enum ScheduleReload: Sendable, Equatable {
    case applied(ScheduleChange)
    /// The previous entries stay; `reason` says why (the file's problems, or the Redis error).
    case failed(reason: String)
}

/// Entry names that a reload added, changed (any definition field) and removed, sorted.
public struct ScheduleChange: Sendable, Equatable {
    public var added: [String]
    public var changed: [String]
    public var removed: [String]
}

/// A stop flag that sleeping threads can wait on, and that can wake them early once (`wake`).
final class StopSignal: @unchecked Sendable {
    private let condition = NSCondition()
    private var stopped = false
    private var woken = false

    var isStopped: Bool { condition.withLock { stopped } }

    func stop() {
        condition.withLock {
            stopped = true
            condition.broadcast()
        }
    }

    /// Ends the current (or the next) `wait` early, without stopping.
    func wake() {
        condition.withLock {
            woken = true
            condition.broadcast()
        }
    }

    /// Sleeps up to `seconds`, returning early when stopped or (unless `ignoringWakes`) woken.
    func wait(seconds: TimeInterval, ignoringWakes: Bool = false) {
        let deadline = Date(timeIntervalSinceNow: seconds)
        condition.withLock {
            while !stopped, ignoringWakes || !woken, Date() < deadline { _ = condition.wait(until: deadline) }
            if !ignoringWakes { woken = false }
        }
    }
}

extension RedisError {
    /// The link to Redis failed (as opposed to Redis refusing one command).
    var isConnectionLevel: Bool {
        switch self {
        case .connectionFailed, .io: return true
        default: return false
        }
    }
}
