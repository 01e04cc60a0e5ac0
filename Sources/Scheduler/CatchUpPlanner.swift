import Foundation
import Synchronization

/// The source of "now" for the scheduler, so that tests (and the runner's tests) control time.
public protocol WallClock: Sendable {
    func now() -> Date
}

/// The real clock.
public struct SystemClock: WallClock {
    public init() {}
    public func now() -> Date { Date() }
}

/// A clock that only moves when told to (tests).
public final class ManualClock: WallClock, Sendable {
    private let current: Mutex<Date>

    public init(_ start: Date) { current = Mutex(start) }

    public func now() -> Date { current.withLock { $0 } }
    public func set(_ date: Date) { current.withLock { $0 = date } }
    public func advance(by interval: TimeInterval) { current.withLock { $0 += interval } }
}

/// Decides which ticks of an entry are due, given the last tick fired and the time now. Pure: no
/// I/O, no clock; the runner supplies `lastFired` (from Redis) and `now` (from its `WallClock`),
/// then claims each returned tick in Redis before enqueuing it:
///
/// ```swift
/// for entry in file.entries {
///     for tick in planner.dueTicks(entry: entry, lastFired: lastFired[entry.name], now: clock.now()) {
///         if try claim(entry, tick) { try enqueue(entry.className, entry.queue, entry.arguments(forTick: tick)) }
///     }
/// }
/// ```
///
/// Rules (a *tick* is a fire time of `entry.cron` in `entry.timeZone`; only ticks `t` with
/// `lastFired < t <= now` are ever candidates, so a tick fires at most once per `lastFired` record):
/// * disabled entry: nothing;
/// * no `lastFired` (the entry never fired, e.g. just added): only the current tick
///   (`previous(atOrBefore: now)`), and only if it is at most `grace` old — a new entry does not
///   replay its past, whatever its policy (like sidekiq-cron, which marks the current tick at save);
/// * `skip`: the current tick if it is at most `grace` old (sidekiq-cron's 60 s rule); a tick that
///   no round saw within `grace` is lost;
/// * `latest`: the current tick, however old, if it is after `lastFired` (and within the window, if
///   one is set) — all older missed ticks are folded into it;
/// * `all`: every tick after `lastFired` and at most `window` old, oldest first, capped to the most
///   recent `maxTicks` (a very frequent entry after a long outage must not flood the queue).
public struct CatchUpPlanner: Sendable {
    /// How old the current tick may be and still count as "on time" (sidekiq-cron: 60 s).
    public var grace: TimeInterval
    /// The most ticks `all` returns for one entry in one round.
    public var maxTicks: Int

    public init(grace: TimeInterval = 60, maxTicks: Int = 1000) {
        precondition(grace >= 0 && maxTicks > 0)
        self.grace = grace
        self.maxTicks = maxTicks
    }

    /// The ticks to fire now, in increasing order (see the type's rules).
    public func dueTicks(entry: ScheduleEntry, lastFired: Date?, now: Date) -> [Date] {
        guard entry.enabled, let current = entry.previousTick(atOrBefore: now) else { return [] }
        if let lastFired, current <= lastFired { return [] }
        let age = now.timeIntervalSince(current)

        guard let lastFired else { return age <= grace ? [current] : [] }
        switch entry.catchUp.mode {
        case .skip:
            return age <= grace ? [current] : []
        case .latest:
            if let window = entry.catchUp.window, age > window { return [] }
            return [current]
        case .all:
            let window = entry.catchUp.window ?? CatchUpPolicy.defaultAllWindow
            // Ticks t with lastFired < t, now - window <= t <= now.
            let oldest = now.addingTimeInterval(-window)
            var ticks: [Date] = []
            var cursor = current
            // Walk backwards from the current tick so the cap keeps the most recent ones.
            while ticks.count < maxTicks, cursor > lastFired, cursor >= oldest {
                ticks.append(cursor)
                guard let earlier = entry.previousTick(atOrBefore: cursor.addingTimeInterval(-1)) else { break }
                cursor = earlier
            }
            return ticks.reversed()
        }
    }

    /// Convenience for the runner: the same, with `now` read from `clock`.
    public func dueTicks(entry: ScheduleEntry, lastFired: Date?, clock: some WallClock) -> [Date] {
        dueTicks(entry: entry, lastFired: lastFired, now: clock.now())
    }
}
