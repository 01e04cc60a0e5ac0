import Foundation
import WorkersQueue

/// What became of `CronStore.backfill` (`workerctl cron run NAME --tick T`).
public enum BackfillOutcome: Sendable, Equatable {
    /// This call claimed the tick and enqueued its job with this jid (the scheduler's jid for the tick).
    case fired(jid: String)
    /// The tick's claim already exists (a scheduler or an earlier backfill fired it, with this jid):
    /// nothing enqueued.
    case alreadyFired(jid: String)
}

/// Why a tick cannot be backfilled. All of them are about the operator's `T`, not about Redis.
public enum CronBackfillError: Error, Sendable, Equatable, CustomStringConvertible {
    /// `T` is not a fire time of the entry's cron in its time zone.
    case notATick(entry: String, tick: String, cron: String, zone: String, previous: String?, next: String?)
    /// `T` is after now: only past ticks can be fired by hand.
    case future(entry: String, tick: String)
    /// `T` is at or before the entry's cursor and older than the claim retention: its claim may have
    /// been pruned, so whether it fired cannot be known (firing could enqueue it a second time).
    case forgotten(entry: String, tick: String, lastTick: String, retentionHours: Int)

    public var description: String {
        switch self {
        case .notATick(let entry, let tick, let cron, let zone, let previous, let next):
            return "\(tick) is not a tick of '\(entry)' (\(cron) in \(zone)); nearest ticks: "
                + "\(previous ?? "none") and \(next ?? "none")"
        case .future(let entry, let tick):
            return "\(tick) is in the future; only past ticks of '\(entry)' can be fired by hand"
        case .forgotten(let entry, let tick, let lastTick, let hours):
            return "\(tick) is older than the \(hours) h claim record of '\(entry)' and not after its last tick "
                + "\(lastTick): whether it fired is no longer known, so it is not fired again"
        }
    }
}

extension TickFormat {
    /// Parses an ISO-8601 instant with `Z` or an offset (`2026-11-20T00:15:00Z`,
    /// `2026-11-20T01:15:00+01:00`), whole seconds; nil for anything else.
    public static func parse(_ text: String) -> Date? {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime]
        return formatter.date(from: text)
    }
}

extension CronRecord {
    /// The entry as the scheduler would fire it, rebuilt from the hash (cron, time zone, class,
    /// queue, args, `pass_tick`). Throws `unusableEntry` when a field cannot be read.
    public func scheduleEntry() throws(CronStoreError) -> ScheduleEntry {
        func unusable(_ reason: String) -> CronStoreError { .unusableEntry(name: name, reason: reason) }
        guard let className else { throw unusable("no class (klass) in the hash") }
        guard let zone = TimeZone(identifier: timezone) else { throw unusable("unknown time zone '\(timezone)'") }
        let expression: CronExpression
        do { expression = try CronExpression(cron) } catch { throw unusable("cron '\(cron)': \(error)") }
        var tickArgument = TickArgument.none
        if let passTick {
            guard let value = TickArgument(yaml: passTick) else { throw unusable("pass_tick '\(passTick)' is not understood") }
            tickArgument = value
        }
        do {
            return try ScheduleEntry(name: name, cron: expression, className: className, queue: queue, args: args,
                                     timeZone: zone, enabled: status == .enabled, tickArgument: tickArgument)
        } catch {
            throw unusable(error.description)
        }
    }
}

extension CronStore {
    /// Fires one past tick of a stored entry by hand, exactly once: the same claim
    /// (`cron_job:NAME:enqueued`), the same jid (`CronJobID`) and the same arguments
    /// (`ScheduleEntry.arguments(forTick:)`, from the hash's `pass_tick`) as the scheduler's fire of
    /// that tick, so a tick a scheduler fired is never enqueued again, and neither is one backfilled
    /// before. The cursor does not move. Works on disabled entries (an operator's explicit act).
    ///
    /// Throws `CronStoreError.notFound` / `.unusableEntry`, `CronBackfillError` for a `tick` that is
    /// not a past tick of the entry or whose claim may have been pruned (see `CronScripts.backfill`),
    /// `RedisError` on I/O.
    public func backfill(name: String, tick: Date, now: Date) throws -> BackfillOutcome {
        guard let record = try record(named: name) else { throw CronStoreError.notFound(name) }
        let entry = try record.scheduleEntry()
        let tickText = TickFormat.iso8601UTC(tick)
        guard entry.previousTick(atOrBefore: tick) == tick, tick.timeIntervalSince1970.rounded(.down) == tick.timeIntervalSince1970 else {
            throw CronBackfillError.notATick(entry: name, tick: tickText, cron: entry.cron.source, zone: entry.timeZone.identifier,
                                             previous: entry.previousTick(atOrBefore: tick).map(TickFormat.iso8601UTC),
                                             next: entry.nextTick(after: tick).map(TickFormat.iso8601UTC))
        }
        guard tick <= now else { throw CronBackfillError.future(entry: name, tick: tickText) }

        let jid = CronJobID.jid(entry: entry.name, tick: tick)
        let payload: JobPayload
        do {
            payload = try JobClient.payload(for: NewJob(entry.className, args: entry.arguments(forTick: tick), queue: entry.queue),
                                            jid: jid, createdAt: now.timeIntervalSince1970, enqueuedAt: now.timeIntervalSince1970)
        } catch {
            throw CronStoreError.unusableEntry(name: name, reason: error.description)
        }
        let enqueued = CronTimeText.enqueueTime(now.timeIntervalSince1970)
        let history: JSONValue = .object(["jid": .string(jid), "enqueued": .string(enqueued), "tick": .string(tickText),
                                          "backfill": .bool(true)])
        let reply = try connection.evaluate(
            CronScripts.backfill,
            keys: [CronKeys.job(name), CronKeys.enqueued(name), CronKeys.jidHistory(name), Keys.queues, Keys.queue(entry.queue)],
            arguments: [tickText, Int(tick.timeIntervalSince1970), payload.serialized(), entry.queue, history.serialized(),
                        historySize, enqueued, Int((now.timeIntervalSince1970 - claimRetention).rounded(.down))])
        let parts = reply.strings
        switch parts.first {
        case "fired": return .fired(jid: jid)
        case "taken": return .alreadyFired(jid: jid)
        case "missing": throw CronStoreError.notFound(name)
        case "forgotten":
            let last = parts.count > 1 ? Double(parts[1]).map { TickFormat.iso8601UTC(Date(timeIntervalSince1970: $0)) } : nil
            throw CronBackfillError.forgotten(entry: name, tick: tickText, lastTick: last ?? "?",
                                              retentionHours: Int(claimRetention / 3600))
        default: throw CronStoreError.unexpectedReply("\(reply)")
        }
    }
}
