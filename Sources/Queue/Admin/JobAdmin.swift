import Foundation

/// What an operator can do to a job, and the states each action applies to.
public enum JobAction: String, Sendable, CaseIterable {
    /// Back to its queue with `retry_count − 1` (Ruby's `SortedEntry#retry`), so the manual
    /// retry does not use up an attempt.
    case retry
    /// Back to its queue unchanged but for `enqueued_at` (Ruby's `add_to_queue`, "Enqueue now").
    case run
    /// Into the dead set, bytes unchanged (Ruby's `SortedEntry#kill` → `DeadSet#kill`).
    case kill
    /// Removed (`ZREM`/`LREM` of the exact bytes).
    case delete

    public var allowedStates: [JobState] {
        switch self {
        case .retry: return [.scheduled, .retry, .dead]
        case .run: return [.scheduled, .retry]
        case .kill: return [.enqueued, .scheduled, .retry]
        case .delete: return [.enqueued, .scheduled, .retry, .dead]
        }
    }
}

/// The result of a bulk action.
public struct BulkResult: Sendable, Equatable {
    /// Entries that matched the filter when the set was read.
    public var matched = 0
    /// Entries this call moved or deleted.
    public var done = 0
    /// Entries gone before we got to them (moved by a worker or another operator).
    public var gone = 0
    /// Entries that are not valid jobs and so could not be moved to a queue.
    public var invalid = 0

    public init(matched: Int = 0, done: Int = 0, gone: Int = 0, invalid: Int = 0) {
        self.matched = matched
        self.done = done
        self.gone = gone
        self.invalid = invalid
    }
}

/// Finding jobs and acting on them (wire doc §7). Every action removes the job by its exact
/// bytes and writes the destination in the same Lua script, only if the removal happened: two
/// operators acting at once never duplicate or lose a job; the second one gets `jobGone`.
///
/// Errors: `AdminError` for requests that cannot be served, `RedisError` for Redis failures.
public struct JobAdmin: Sendable {
    public let connection: RedisConnection
    public let deadLimits: DeadSetLimits

    public init(connection: RedisConnection, deadLimits: DeadSetLimits = DeadSetLimits()) {
        self.connection = connection
        self.deadLimits = deadLimits
    }

    /// Search order when no state is given: retry, scheduled, dead, enqueued, busy.
    public static let searchOrder: [JobState] = [.retry, .scheduled, .dead, .enqueued, .busy]

    /// Rejects jids that cannot be searched safely with `MATCH *jid*` (empty, whitespace, glob
    /// characters).
    public static func validate(jid: String) throws(AdminError) {
        if jid.isEmpty { throw .invalidArgument("the jid is empty") }
        if jid.contains(where: { $0.isWhitespace || "*?[]\\".contains($0) }) {
            throw .invalidArgument("'\(jid)' is not a jid (no whitespace or glob characters allowed)")
        }
    }

    // MARK: Reading

    /// Every entry with this jid in `states` (in that order). Usually zero or one. With a `budget`, the search
    /// reads at most that many entries in all (then `budget.exhausted` says the answer may be incomplete).
    public func find(jid: String, in states: [JobState] = JobAdmin.searchOrder, budget: ScanBudget? = nil) throws -> [JobRecord] {
        try Self.validate(jid: jid)
        var found: [JobRecord] = []
        for state in states {
            switch state {
            case .scheduled, .retry, .dead:
                found += try SortedJobSet(state).find(connection, jid: jid, budget: budget)
            case .enqueued:
                for name in try QueueAdmin.searchNames(connection, budget: budget) {
                    if budget.remaining <= 0 { budget?.stop(); break }
                    guard let budget else { found += try JobQueue(name).find(connection, jid: jid); continue }
                    try budget.chargeVisit { () throws(RedisError) in found += try JobQueue(name).find(connection, jid: jid, budget: budget) }
                }
            case .busy:
                let processes = budget.map(Self.processBudget)
                found += try WorkSet.all(connection, budget: processes).filter { $0.jid == jid }
                if processes?.exhausted == true { budget?.stop() }
            }
        }
        return found
    }

    /// The processes a search with `budget` reads (at most `Stats.sampleProcesses`, within its deadline); when
    /// some are left unread, `budget` is marked exhausted once the read is done (`WorkSet.all` leaves that to us).
    static func processBudget(_ budget: ScanBudget) -> ScanBudget {
        ScanBudget(maxEntries: Stats.sampleProcesses, deadline: budget.deadline)
    }

    /// The single entry with this jid; throws `jobNotFound` or `ambiguousJob`.
    public func findOne(jid: String, in states: [JobState] = JobAdmin.searchOrder, budget: ScanBudget? = nil) throws -> JobRecord {
        let found = try find(jid: jid, in: states, budget: budget)
        guard let first = found.first else { throw AdminError.jobNotFound(jid: jid, searched: states) }
        if found.count > 1 { throw AdminError.ambiguousJob(jid: jid, locations: found.map(\.location)) }
        return first
    }

    /// One page of jobs in `state`. Sorted sets: highest score first; enqueued: queues by name,
    /// each newest first; busy: oldest start first. A filtered listing reads the entries in chunks and keeps only
    /// the page; with a `budget` it reads at most that many (then `Page.isPartial`).
    public func list(_ state: JobState, filter: JobFilter = JobFilter(), page: PageRequest,
                     budget: ScanBudget? = nil) throws -> Page<JobRecord> {
        switch state {
        case .scheduled, .retry, .dead:
            return try SortedJobSet(state).page(connection, filter: filter, page: page, budget: budget)
        case .enqueued:
            if let queue = filter.queue { return try JobQueue(queue).page(connection, filter: filter, page: page, budget: budget) }
            if filter.isEmpty { return try enqueuedPage(page, budget: budget) }
            let names = try QueueAdmin.searchNames(connection, budget: budget)
            let sizes = try connection.pipeline(names.map { ["LLEN", Keys.queue($0)] }).map { Bounded.int($0.integer ?? 0, in: 0...Bounded.maxCounter) }
            return try Page.filtered(page, filter: filter, available: sizes.reduce(0) { Bounded.sum($0, $1) }) { (body) throws(RedisError) in
                for name in names {
                    if budget.remaining <= 0 { budget?.stop(); return }
                    guard let budget else { try JobQueue(name).forEach(connection, body); continue }
                    try budget.chargeVisit { () throws(RedisError) in try JobQueue(name).forEach(connection, budget: budget, body) }
                }
            }
        case .busy:
            guard let budget else { return paginate(try all(.busy, filter: filter), page) }
            let processes = Self.processBudget(budget)
            let records = try WorkSet.all(connection, budget: processes).filter(filter.matches)
            if processes.exhausted { budget.stop() }
            return paginate(records, page)
        }
    }

    /// Every matching job in `state`, in listing order.
    public func all(_ state: JobState, filter: JobFilter = JobFilter()) throws -> [JobRecord] {
        switch state {
        case .scheduled, .retry, .dead:
            return try SortedJobSet(state).all(connection, filter: filter)
        case .enqueued:
            let names = try filter.queue.map { [$0] } ?? QueueAdmin.names(connection)
            var out: [JobRecord] = []
            for name in names { out += try JobQueue(name).all(connection, filter: filter) }
            return out
        case .busy:
            return try WorkSet.all(connection).filter(filter.matches)
        }
    }

    /// An unfiltered page across all queues (by name, each newest first), reading only the
    /// ranges the page covers.
    private func enqueuedPage(_ page: PageRequest, budget: ScanBudget?) throws -> Page<JobRecord> {
        let names = try QueueAdmin.searchNames(connection, budget: budget)
        let sizes = try connection.pipeline(names.map { ["LLEN", Keys.queue($0)] }).map { Bounded.int($0.integer ?? 0, in: 0...Bounded.maxCounter) }
        var items: [JobRecord] = []
        var skip = page.offset
        for (name, size) in zip(names, sizes) where items.count < page.size {
            if skip >= size { skip -= size; continue }
            let wanted = page.size - items.count
            items += try JobQueue(name).range(connection, start: skip, stop: skip + wanted - 1)
            skip = 0
        }
        return Page(items: items, request: page, total: sizes.reduce(0) { Bounded.sum($0, $1) })
    }

    private func paginate(_ records: [JobRecord], _ page: PageRequest) -> Page<JobRecord> {
        let start = min(page.offset, records.count)
        let end = min(start + page.size, records.count)
        return Page(items: Array(records[start..<end]), request: page, total: records.count)
    }

    // MARK: Acting on one job

    /// Applies `action` to `record` (found by `find`). Throws `actionNotAllowed` for a state the
    /// action does not cover, `invalidJob` when a non-job would have to go to a queue, and
    /// `jobGone` when someone else moved it first.
    public func perform(_ action: JobAction, on record: JobRecord, now: Double = Clock.now()) throws {
        let jid = record.jid ?? "(no jid)"
        guard action.allowedStates.contains(record.state) else {
            throw AdminError.actionNotAllowed(action: action.rawValue, jid: jid, state: record.state,
                                              allowed: action.allowedStates)
        }
        let outcome = try apply(action, to: [record], now: now)
        if outcome.invalid > 0 { throw AdminError.invalidJob(jid: record.jid, reason: record.invalidReason ?? "invalid") }
        if outcome.done == 0 { throw AdminError.jobGone(jid: jid, location: record.location) }
    }

    /// Finds the job (in the action's states, or `states` if given) and applies the action.
    @discardableResult
    /// With a `budget` (the dashboard's bulk route: one for all the jids of a request) the search reads at most
    /// what it has left; a job past it is reported not found and `budget.exhausted` says so.
    public func perform(_ action: JobAction, jid: String, in states: [JobState]? = nil,
                        now: Double = Clock.now(), budget: ScanBudget? = nil) throws -> JobRecord {
        let searched = states ?? Self.searchOrder
        // The states the action applies to first (a found job then costs no queue scan); the
        // others only to explain a refusal. A busy copy of a retried job is not ambiguous.
        let applicableStates = searched.filter { action.allowedStates.contains($0) }
        let applicable = try find(jid: jid, in: applicableStates, budget: budget)
        guard let record = applicable.first else {
            let elsewhere = try find(jid: jid, in: searched.filter { !applicableStates.contains($0) }, budget: budget)
            guard let other = elsewhere.first else { throw AdminError.jobNotFound(jid: jid, searched: searched) }
            throw AdminError.actionNotAllowed(action: action.rawValue, jid: jid, state: other.state,
                                              allowed: action.allowedStates)
        }
        if applicable.count > 1 { throw AdminError.ambiguousJob(jid: jid, locations: applicable.map(\.location)) }
        try perform(action, on: record, now: now)
        return record
    }

    // MARK: Bulk

    /// Applies `action` to every job in `state` matching `filter`, oldest first (so retried jobs
    /// go back to their queues in their original order). Sorted sets are streamed in pages of
    /// `pageSize` (`SortedJobSet.forEachPageAscending`): memory is bounded by a page however many
    /// jobs match, and jobs added meanwhile with a later score are not touched. Queues (enqueued
    /// jobs) are read whole first. Each batch of 100 is one atomic script; `progress` is called
    /// with the running total after each batch.
    public func performAll(_ action: JobAction, state: JobState, filter: JobFilter = JobFilter(),
                           now: Double = Clock.now(), pageSize: Int = 1000,
                           progress: (BulkResult) -> Void = { _ in }) throws -> BulkResult {
        guard action.allowedStates.contains(state) else {
            throw AdminError.actionNotAllowed(action: action.rawValue, jid: "--all", state: state, allowed: action.allowedStates)
        }
        var total = BulkResult()
        func run(_ records: [JobRecord]) throws {
            var index = 0
            while index < records.count {
                let outcome = try apply(action, to: Array(records[index..<min(index + 100, records.count)]), now: now)
                total.matched += outcome.matched
                total.done += outcome.done
                total.gone += outcome.gone
                total.invalid += outcome.invalid
                index += 100
                progress(total)
            }
        }
        if state.setKey != nil {
            try SortedJobSet(state).forEachPageAscending(connection, pageSize: pageSize) { page in
                try run(page.filter(filter.matches))
            }
        } else {
            try run(Array(try all(state, filter: filter).reversed()))
        }
        return total
    }

    // MARK: Redis

    /// Runs one batch; all records are in the same state (and, for lists, may be in different
    /// queues). Records that are invalid for a move to a queue are counted, not sent.
    private func apply(_ action: JobAction, to records: [JobRecord], now: Double) throws -> BulkResult {
        var result = BulkResult()
        result.matched = records.count
        guard let state = records.first?.state else { return result }
        switch action {
        case .retry, .run:
            guard let key = state.setKey else { return result }
            var arguments: [any RedisArgument] = []
            for record in records {
                guard let payload = record.payload else { result.invalid += 1; continue }
                let pushed = Self.requeued(payload, decrementRetryCount: action == .retry, now: now)
                arguments += [record.raw, pushed.queue ?? "default", pushed.serialized()]
            }
            if arguments.isEmpty { return result }
            let reply = try connection.evaluate(AdminScripts.setToQueue, keys: [key], arguments: arguments)
            count(reply, into: &result)
            // Retrying a cancelled job withdraws its cancel on this shard (JobCancel.swift), or it would not start.
            try JobCancels.forget(connection, jids: records.filter { $0.errorClass == JobCancels.errorClass }.compactMap(\.jid))
        case .kill:
            // Group list members by queue (one script call per source key).
            var groups: [(key: String, records: [JobRecord])] = []
            for record in records {
                let key = state.setKey ?? Keys.queue(record.queue)
                if let index = groups.firstIndex(where: { $0.key == key }) { groups[index].records.append(record) } else {
                    groups.append((key, [record]))
                }
            }
            var gone: [String] = []
            for group in groups {
                let arguments: [any RedisArgument] = [state.setKey == nil ? "list" : "zset", now, deadLimits.maxJobs,
                                                      deadLimits.maxAgeSeconds] + group.records.map(\.raw)
                let reply = try connection.evaluate(AdminScripts.toDead, keys: [group.key], arguments: arguments)
                count(reply, into: &result)
                for (record, flag) in zip(group.records, reply.array ?? []) where flag.integer == 1 {
                    gone.append(record.jid ?? "")
                }
            }
            // A killed job is over: it releases the unique lock it owns (docs/unique-jobs.md).
            try UniqueLocks.release(connection, jids: gone)
        case .delete:
            let commands: [[any RedisArgument]] = records.map { record in
                if let key = state.setKey { return ["ZREM", key, record.raw] }
                return ["LREM", Keys.queue(record.queue), 1, record.raw]
            }
            var gone: [String] = []
            for (record, reply) in zip(records, try connection.pipeline(commands)) {
                if try reply.checked().integer == 1 {
                    result.done += 1
                    gone.append(record.jid ?? "")
                } else { result.gone += 1 }
            }
            // A deleted job is over: it releases the unique lock it owns (docs/unique-jobs.md).
            try UniqueLocks.release(connection, jids: gone)
        }
        return result
    }

    private func count(_ reply: RedisReply, into result: inout BulkResult) {
        for flag in reply.array ?? [] {
            if flag.integer == 1 { result.done += 1 } else { result.gone += 1 }
        }
    }

    /// The payload pushed when a job goes back to its queue, as Ruby's client push does it
    /// (same fields as `JobClient.push(existing:)`): `retry_count − 1` when retrying (if present; never below −1),
    /// `queue`/`retry`/`created_at` defaults filled in, `enqueued_at` = now.
    public static func requeued(_ payload: JobPayload, decrementRetryCount: Bool, now: Double) -> JobPayload {
        var payload = payload
        if decrementRetryCount, let count = payload.fields["retry_count"]?.intValue {
            // Clamped first (a hostile count at Int64.min would overflow), and never below −1, the least a readable
            // job carries: Ruby's `retry` of a job retried by hand at 0 used to make it −2, and unreadable (issue 51).
            let bounded = min(max(count, -1), Int64(Bounded.maxCount))
            payload.fields["retry_count"] = .int(max(-1, bounded - 1))
        }
        if payload.queue == nil { payload.queue = "default" }
        if payload.fields["retry"] == nil { payload.fields["retry"] = .bool(true) }
        if payload.fields["created_at"] == nil { payload.setTimestamp("created_at", now) }
        payload.setTimestamp("enqueued_at", now)
        return payload
    }
}
