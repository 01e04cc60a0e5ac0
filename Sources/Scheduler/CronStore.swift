import Foundation
import WorkersQueue

/// What became of one attempt to fire a tick (see `CronScripts.fire`).
public enum FireOutcome: Sendable, Equatable, CustomStringConvertible {
    /// This call claimed the tick and enqueued the job with this jid.
    case fired(jid: String)
    /// The entry's persisted last tick is at or after this tick: already fired (by anyone).
    case stale
    /// Another scheduler had already claimed this tick in `cron_job:NAME:enqueued`.
    case taken
    /// The entry is disabled in Redis.
    case disabled
    /// The entry has no hash in Redis (removed by a newer schedule file or by hand).
    case missing

    public var jid: String? { if case .fired(let jid) = self { return jid } else { return nil } }

    public var description: String {
        switch self {
        case .fired(let jid): return "fired \(jid)"
        case .stale: return "stale"
        case .taken: return "taken"
        case .disabled: return "disabled"
        case .missing: return "missing"
        }
    }
}

/// One tick of one entry to fire (`CronStore.fire(_:now:)`).
public struct FireRequest: Sendable {
    public var entry: ScheduleEntry
    public var tick: Date

    public init(entry: ScheduleEntry, tick: Date) {
        self.entry = entry
        self.tick = tick
    }
}

/// Failures of the cron store that are not Redis I/O.
public enum CronStoreError: Error, Sendable, Equatable, CustomStringConvertible {
    case notFound(String)
    /// The entry's hash cannot be turned into a job (hand-edited or written by another tool).
    case unusableEntry(name: String, reason: String)
    case unexpectedReply(String)

    public var description: String {
        switch self {
        case .notFound(let name): return "no cron entry named '\(name)'"
        case .unusableEntry(let name, let reason): return "cron entry '\(name)' cannot be enqueued: \(reason)"
        case .unexpectedReply(let what): return "unexpected reply from Redis: \(what)"
        }
    }
}

/// The per-round view of one entry in Redis: whether it exists, its status and its catch-up cursor.
public struct CronEntryState: Sendable, Equatable {
    public var exists: Bool
    public var status: CronStatus?
    public var lastTick: Date?
    public var enabledAt: Date?

    /// Disabled only when Redis says so; an entry without `status` counts as enabled (sidekiq-cron's rule).
    public var isEnabled: Bool { status != .disabled }

    /// The cursor for the planner: ticks at or before it are never fired. `max(lastTick, enabledAt)`:
    /// ticks that passed while an operator had the entry disabled are not caught up.
    public var catchUpCursor: Date? {
        switch (lastTick, enabledAt) {
        case (nil, nil): return nil
        case (let tick?, nil): return tick
        case (nil, let enabled?): return enabled
        case (let tick?, let enabled?): return max(tick, enabled)
        }
    }
}

/// One entry as stored in Redis (for `workerctl cron ls`).
public struct CronRecord: Sendable, Equatable {
    public var name: String
    public var fields: [String: String]

    public var status: CronStatus { fields[CronHashField.status].flatMap(CronStatus.init(rawValue:)) ?? .enabled }
    public var className: String? { fields[CronHashField.klass].nonEmpty ?? messageObject?["class"]?.stringValue }
    public var queue: String { fields[CronHashField.queue].nonEmpty ?? messageObject?["queue"]?.stringValue ?? "default" }
    public var timezone: String { fields[CronHashField.timezone].nonEmpty ?? "UTC" }
    public var description: String? { fields[CronHashField.description].nonEmpty }
    public var catchUp: String? { fields[CronHashField.catchUp].nonEmpty }
    public var passTick: String? { fields[CronHashField.passTick].nonEmpty }
    public var lastTick: String? { fields[CronHashField.lastTick].nonEmpty }
    public var lastEnqueueTime: String? { fields[CronHashField.lastEnqueueTime].nonEmpty }
    public var isOurs: Bool { fields[CronHashField.source] == CronHashField.sourceValue }

    /// The cron expression without the time-zone suffix added for sidekiq-cron (see `CronStore.sync`).
    public var cron: String {
        let text = fields[CronHashField.cron] ?? ""
        let suffix = " " + timezone
        return text.hasSuffix(suffix) ? String(text.dropLast(suffix.count)) : text
    }

    /// `args` parsed (`[]` when absent or not a JSON array).
    public var args: [JSONValue] {
        guard let text = fields[CronHashField.args].nonEmpty, case .array(let items)? = try? JSONValue.parse(text) else {
            return messageObject?["args"]?.arrayValue ?? []
        }
        return items
    }

    var messageObject: JSONObject? {
        fields[CronHashField.message].nonEmpty.flatMap { try? JSONValue.parse($0) }?.objectValue
    }

    /// The next tick after `date`, if the stored expression and zone can be read by this scheduler.
    public func nextTick(after date: Date) -> Date? {
        guard let zone = TimeZone(identifier: timezone), let expression = try? CronExpression(cron) else { return nil }
        return expression.next(after: date, in: zone)
    }
}

/// One line of `cron_job:NAME:jid_history`.
public struct CronHistoryItem: Sendable, Equatable {
    public var jid: String
    /// sidekiq-cron's `enqueued` text, `2026-11-22 07:01:05 +0000`.
    public var enqueued: String
    /// The tick fired (ISO-8601 UTC); nil for `cron run` and for sidekiq-cron's own entries.
    public var tick: String?
    /// True for `cron run` (not a tick).
    public var manual: Bool
    /// True for `cron run --tick` (a past tick fired by hand; `tick` is set).
    public var backfill: Bool = false
    /// The raw JSON line.
    public var raw: String
}

/// What `sync` changed.
public struct CronSyncReport: Sendable, Equatable {
    public var created: [String] = []
    public var updated: [String] = []
    /// Entries this scheduler had created that are no longer in the schedule file.
    public var removed: [String] = []
}

/// Reads and writes sidekiq-cron's keys for this scheduler (layout: `CronKeys`, `CronHashField`).
///
/// Thread rule: a store uses its one `RedisConnection` and so belongs to one thread at a time.
/// Atomicity: `fire` and `runNow` are one Lua script each (claim + enqueue + bookkeeping), so a
/// process dying at any point leaves either everything or nothing of a fire.
public final class CronStore: @unchecked Sendable {
    public let connection: RedisConnection
    /// How many history lines to keep per entry (sidekiq-cron: 10).
    public let historySize: Int
    /// Claimed-tick ZSET members scored older than this (relative to now) are pruned after a fire,
    /// as sidekiq-cron does with 24 h. Safe: the persisted `last_tick_epoch` stops old ticks anyway.
    public let claimRetention: TimeInterval
    /// The most fires `fire(_:now:)` sends in one pipeline (one round trip): a long catch-up is sent in several,
    /// so the request buffer stays bounded (500 fires of a small job: ~300 kB).
    public let firesPerPipeline: Int

    public init(connection: RedisConnection, historySize: Int = 10, claimRetention: TimeInterval = 86_400,
                firesPerPipeline: Int = 500) {
        precondition(historySize > 0 && claimRetention > 0 && firesPerPipeline > 0)
        self.connection = connection
        self.firesPerPipeline = firesPerPipeline
        self.historySize = historySize
        self.claimRetention = claimRetention
    }

    // MARK: Sync

    /// Writes the entries of a schedule file into Redis: creates or updates each hash with
    /// sidekiq-cron's fields and ours, adds it to `cron_jobs`, keeps `status` (and the fire
    /// bookkeeping) when already set, and removes the entries this scheduler had created
    /// (`source` = `swift-scheduler`) that the file no longer lists. Entries created by other tools
    /// are left alone.
    @discardableResult
    public func sync(_ entries: [ScheduleEntry]) throws -> CronSyncReport {
        var report = CronSyncReport()
        let members = try Self.named("SMEMBERS \(CronKeys.jobs)") { () throws(RedisError) -> RedisReply in
            try connection.command("SMEMBERS", CronKeys.jobs)
        }
        let existing = Set(members.strings.compactMap(CronKeys.name(fromJobKey:)))
        var commands: [[any RedisArgument]] = []
        for entry in entries {
            let key = CronKeys.job(entry.name)
            commands.append(["SADD", CronKeys.jobs, key])
            commands.append(["HSET", key] + Self.definitionFields(entry).flatMap { [$0.0, $0.1] as [any RedisArgument] })
            commands.append(["HSETNX", key, CronHashField.status, (entry.enabled ? CronStatus.enabled : .disabled).rawValue])
            commands.append(["HSETNX", key, CronHashField.lastEnqueueTime, ""])
            if existing.contains(entry.name) { report.updated.append(entry.name) } else { report.created.append(entry.name) }
        }
        let listed = Set(entries.map(\.name))
        for name in existing.subtracting(listed).sorted() {
            let source = try connection.command("HGET", CronKeys.job(name), CronHashField.source).string
            guard source == CronHashField.sourceValue else { continue }
            commands.append(["SREM", CronKeys.jobs, CronKeys.job(name)])
            commands.append(["DEL", CronKeys.job(name), CronKeys.enqueued(name), CronKeys.jidHistory(name)])
            report.removed.append(name)
        }
        let results = try connection.transaction(commands)
        for index in results.indices {
            guard case .error(let message) = results[index] else { continue }
            throw Self.naming(.server(message), "\(commands[index][0]) \(commands[index][1])")
        }
        return report
    }

    /// A refusal by Redis with the command that drew it (e.g. `HSET cron_job:NAME`): a key of another type, which
    /// anyone with Redis access can write, is then named for the operator. Other errors unchanged.
    /// `body`'s result, or its error named by `naming`.
    static func named<T>(_ command: String, _ body: () throws(RedisError) -> T) throws(RedisError) -> T {
        do { return try body() } catch { throw naming(error, command) }
    }

    static func naming(_ error: RedisError, _ command: String) -> RedisError {
        guard case .server(let message) = error else { return error }
        return .server("\(message) (\(command))")
    }

    /// The hash fields that describe an entry (everything but status and fire bookkeeping).
    static func definitionFields(_ entry: ScheduleEntry) -> [(String, String)] {
        let message: JSONValue = .object(["queue": .string(entry.queue), "class": .string(entry.className),
                                          "args": .array(entry.args)])
        // sidekiq-cron (fugit) reads a trailing zone in the expression; UTC is left implicit.
        let zone = entry.timeZone.identifier
        let cron = zone == "UTC" || zone == "GMT" ? entry.cron.source : "\(entry.cron.source) \(zone)"
        return [
            (CronHashField.name, entry.name),
            (CronHashField.klass, entry.className),
            (CronHashField.cron, cron),
            (CronHashField.description, entry.description ?? ""),
            (CronHashField.args, JSONValue.array(entry.args).serialized()),
            (CronHashField.dateAsArgument, "false"),
            (CronHashField.message, message.serialized()),
            (CronHashField.activeJob, "false"),
            (CronHashField.queueNamePrefix, ""),
            (CronHashField.queueNameDelimiter, ""),
            (CronHashField.symbolizeArgs, "false"),
            (CronHashField.queue, entry.queue),
            (CronHashField.timezone, zone),
            (CronHashField.catchUp, entry.catchUp.description),
            (CronHashField.passTick, entry.tickArgument.description),
            (CronHashField.source, CronHashField.sourceValue),
        ]
    }

    // MARK: Rounds

    /// Status and cursor of each named entry, in one round trip.
    public func states(for names: [String]) throws -> [String: CronEntryState] {
        if names.isEmpty { return [:] }
        let replies = try connection.pipeline(names.map {
            ["HMGET", CronKeys.job($0), CronHashField.name, CronHashField.status, CronHashField.lastTickEpoch, CronHashField.enabledAtEpoch,
             CronHashField.klass]
        })
        var states: [String: CronEntryState] = [:]
        for (name, reply) in zip(names, replies) {
            let values = try reply.checked().array ?? []
            func value(_ index: Int) -> String? { index < values.count ? values[index].string : nil }
            func date(_ index: Int) -> Date? { value(index).flatMap(Double.init).map(Date.init(timeIntervalSince1970:)) }
            states[name] = CronEntryState(exists: values.contains { !$0.isNull },
                                          status: value(1).flatMap(CronStatus.init(rawValue:)),
                                          lastTick: date(2), enabledAt: date(3))
        }
        return states
    }

    /// Claims `tick` of `entry` and enqueues its job (jid derived from entry and tick,
    /// `created_at`/`enqueued_at` = `now`), atomically. See `FireOutcome`.
    public func fire(_ entry: ScheduleEntry, tick: Date, now: Date) throws -> FireOutcome {
        try fire([FireRequest(entry: entry, tick: tick)], now: now)[0].get()
    }

    /// Fires each request as `fire(_:tick:now:)` does (one `CronScripts.fire` each: every claim stays atomic on
    /// its own), sent in pipelines of at most `firesPerPipeline` fires, one round trip each, and returns the
    /// outcomes in the order of `requests`. A request that fails alone (its job cannot be built, a key of the wrong
    /// type) gets its error; the others still fire. A connection-level failure is the result of every request from
    /// the failed pipeline on: those sent may or may not have fired (the cursor in Redis says which).
    public func fire(_ requests: [FireRequest], now: Date) -> [Result<FireOutcome, any Error>] {
        var results: [Result<FireOutcome, any Error>] = []
        results.reserveCapacity(requests.count)
        var next = requests.startIndex
        while next < requests.endIndex {
            let chunk = requests[next..<min(next + firesPerPipeline, requests.endIndex)]
            next = chunk.endIndex
            let built = chunk.map { request in Result { try fireCall(request, now: now) } }
            let replies: [RedisReply]
            do {
                replies = try connection.evaluate(CronScripts.fire, calls: built.compactMap { try? $0.get() }.map { ($0.keys, $0.arguments) })
            } catch let error where error.isConnectionLevel {
                return results + Array(repeating: .failure(error), count: requests.endIndex - chunk.startIndex)
            } catch {
                results += built.map { $0.flatMap { _ in .failure(error) } }  // e.g. SCRIPT LOAD refused
                continue
            }
            var reply = replies.makeIterator()
            for call in built {
                results.append(call.flatMap { call in Result { try Self.outcome(reply.next()!.checked(), jid: call.jid) } })
            }
        }
        return results
    }

    /// One `CronScripts.fire` call: keys, arguments, and the jid its job gets.
    private func fireCall(_ request: FireRequest, now: Date) throws -> (keys: [any RedisArgument], arguments: [any RedisArgument], jid: String) {
        let (entry, tick) = (request.entry, request.tick)
        let jid = CronJobID.jid(entry: entry.name, tick: tick)
        let job = NewJob(entry.className, args: entry.arguments(forTick: tick), queue: entry.queue)
        let payload = try JobClient.payload(for: job, jid: jid, createdAt: now.timeIntervalSince1970,
                                            enqueuedAt: now.timeIntervalSince1970)
        let tickText = TickFormat.iso8601UTC(tick)
        let enqueued = CronTimeText.enqueueTime(now.timeIntervalSince1970)
        let history: JSONValue = .object(["jid": .string(jid), "enqueued": .string(enqueued), "tick": .string(tickText)])
        return (keys: [CronKeys.job(entry.name), CronKeys.enqueued(entry.name), CronKeys.jidHistory(entry.name),
                       Keys.queues, Keys.queue(entry.queue)],
                arguments: [tickText, Int(tick.timeIntervalSince1970.rounded(.down)), payload.serialized(), entry.queue,
                            history.serialized(), historySize, enqueued,
                            Int((now.timeIntervalSince1970 - claimRetention).rounded(.down))],
                jid: jid)
    }

    private static func outcome(_ reply: RedisReply, jid: String) throws -> FireOutcome {
        switch reply.strings.first {
        case "fired": return .fired(jid: jid)
        case "stale": return .stale
        case "taken": return .taken
        case "disabled": return .disabled
        case "missing": return .missing
        default: throw CronStoreError.unexpectedReply("\(reply)")
        }
    }

    // MARK: Operator actions

    /// Enqueues the entry's job now with a fresh jid (`workerctl cron run`). Uses the job stored in
    /// Redis (`message`, else `klass`/`args`/`queue`), without a tick argument (the job's own default
    /// applies). Does not count as a tick: `last_tick` does not move. Returns the jid.
    public func runNow(name: String, now: Date) throws -> String {
        guard let record = try record(named: name) else { throw CronStoreError.notFound(name) }
        guard let className = record.className else {
            throw CronStoreError.unusableEntry(name: name, reason: "no class (klass) in the hash")
        }
        let jid = Identifiers.jid()
        let payload: JobPayload
        do {
            payload = try JobClient.payload(for: NewJob(className, args: record.args, queue: record.queue), jid: jid,
                                            createdAt: now.timeIntervalSince1970, enqueuedAt: now.timeIntervalSince1970)
        } catch {
            throw CronStoreError.unusableEntry(name: name, reason: error.description)
        }
        let enqueued = CronTimeText.enqueueTime(now.timeIntervalSince1970)
        let history: JSONValue = .object(["jid": .string(jid), "enqueued": .string(enqueued), "manual": .bool(true)])
        let reply = try connection.evaluate(
            CronScripts.runNow,
            keys: [CronKeys.job(name), CronKeys.jidHistory(name), Keys.queues, Keys.queue(record.queue)],
            arguments: [payload.serialized(), record.queue, history.serialized(), historySize, enqueued])
        switch reply.string {
        case "fired": return jid
        case "missing": throw CronStoreError.notFound(name)
        default: throw CronStoreError.unexpectedReply("\(reply)")
        }
    }

    /// Sets `status`. Enabling records `enabled_at_epoch` = `now`, so ticks missed while disabled are
    /// not caught up. Returns the previous status (nil if none was set); throws `notFound`.
    @discardableResult
    public func setStatus(name: String, _ status: CronStatus, now: Date) throws -> CronStatus? {
        let reply = try connection.evaluate(CronScripts.setStatus, keys: [CronKeys.job(name)],
                                            arguments: [status.rawValue, Int(now.timeIntervalSince1970.rounded(.down))])
        if reply.isNull { throw CronStoreError.notFound(name) }
        return reply.string.flatMap(CronStatus.init(rawValue:))
    }

    /// Deletes an entry and its fire bookkeeping (hash, claimed ticks, history), as sidekiq-cron's
    /// `Job#destroy` does; throws `notFound` if there is none. Running schedulers stop firing it at their
    /// next round; a scheduler that starts with the entry still in its schedule file creates it again.
    public func delete(name: String) throws {
        let key = CronKeys.job(name)
        let replies = try connection.transaction([
            ["SREM", CronKeys.jobs, key],
            ["DEL", key, CronKeys.enqueued(name), CronKeys.jidHistory(name)],
        ])
        for reply in replies { try reply.checked() }
        guard (replies.last?.integer ?? 0) > 0 || (replies.first?.integer ?? 0) > 0 else { throw CronStoreError.notFound(name) }
    }

    /// Every entry in `cron_jobs` whose hash exists, sorted by name.
    public func list() throws -> [CronRecord] {
        let names = try connection.command("SMEMBERS", CronKeys.jobs).strings.compactMap(CronKeys.name(fromJobKey:)).sorted()
        if names.isEmpty { return [] }
        let replies = try connection.pipeline(names.map { ["HGETALL", CronKeys.job($0)] })
        var records: [CronRecord] = []
        for (name, reply) in zip(names, replies) {
            let fields = Self.hash(try reply.checked())
            if !fields.isEmpty { records.append(CronRecord(name: name, fields: fields)) }
        }
        return records
    }

    /// One entry, or nil when its hash does not exist.
    public func record(named name: String) throws -> CronRecord? {
        let fields = Self.hash(try connection.command("HGETALL", CronKeys.job(name)))
        return fields.isEmpty ? nil : CronRecord(name: name, fields: fields)
    }

    /// The entry's fire history, newest first. Throws `notFound` when the entry does not exist.
    public func history(name: String) throws -> [CronHistoryItem] {
        let replies = try connection.pipeline([["EXISTS", CronKeys.job(name)], ["LRANGE", CronKeys.jidHistory(name), 0, -1]])
        guard try replies[0].checked().integer == 1 else { throw CronStoreError.notFound(name) }
        return try replies[1].checked().strings.map { line in
            let object = (try? JSONValue.parse(line))?.objectValue
            return CronHistoryItem(jid: object?["jid"]?.stringValue ?? "", enqueued: object?["enqueued"]?.stringValue ?? "",
                                   tick: object?["tick"]?.stringValue, manual: object?["manual"]?.boolValue ?? false,
                                   backfill: object?["backfill"]?.boolValue ?? false, raw: line)
        }
    }

    static func hash(_ reply: RedisReply) -> [String: String] {
        let items = (reply.array ?? []).map { $0.string ?? "" }
        var fields: [String: String] = [:]
        var index = 0
        while index + 1 < items.count {
            fields[items[index]] = items[index + 1]
            index += 2
        }
        return fields
    }
}

extension Optional where Wrapped == String {
    /// nil for nil and for `""` (sidekiq-cron writes nil as an empty string).
    var nonEmpty: String? { self.flatMap { $0.isEmpty ? nil : $0 } }
}
