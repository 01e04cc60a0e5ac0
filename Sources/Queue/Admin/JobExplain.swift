import Foundation

/// Why a job is not running (or what became of it): the FIRST thing that keeps it from running, read from the
/// state in Redis (and the ledger, when one is given). What `workerctl jobs explain JID` prints and
/// `WorkersClient.explain(jid:)` returns (docs/workerctl.md "Why isn't my job running?").
///
/// Immutable value; every time is a `Date`, every span a `Duration`. `description` is one line for operators,
/// with no job arguments in it (only ids, class, queue and the error class/message as the runtime stored them).
public enum JobExplanation: Sendable, Equatable, CustomStringConvertible {
    /// In `schedule`, due at `at` (then moved to its queue by the housekeeper).
    case scheduled(at: Date, queue: String)
    /// In `retry` after a failure: the next run is attempt `attempt` (retry_count + 2; the first run was 1) of at most
    /// `maxAttempts` (1 + the payload's `retry: N`; nil when the job class decides, Sidekiq's default being 25 retries).
    case retryWaiting(at: Date, attempt: Int, maxAttempts: Int?, errorClass: String?)
    /// Rescheduled by a limiter (`overrated` > 0, docs/limiters.md): tried again at `nextTry`. `full`: the limiter
    /// instances at their maximum now (the payload does not name its limiter, so these are the candidates), and
    /// `holders`: the running jobs of the same class (who holds the slots).
    case overLimit(nextTry: Date, reschedules: Int, full: [LimiterState], holders: [RunningJob])
    /// In its queue, but the queue is in the `paused` set (`workerctl queues resume NAME`).
    case queuePaused(queue: String)
    /// In its queue, but no live process (a heartbeat in `processes`) lists the queue.
    case noLiveProcess(queue: String, processes: Int)
    /// In its queue, served by `processes` live processes, none of which registers its class (each lists its classes
    /// in its process info; a process that does not — Ruby Sidekiq, an older worker — makes the answer unknown, and
    /// explain goes on): whichever fetches it gives it back to `schedule`, and sends it to dead once no live process
    /// has known it for the unknown-class grace (docs/deploy.md, "Rolling deploys").
    case classNotRegistered(queue: String, className: String, processes: Int)
    /// In `schedule`, given back `giveBacks` times by processes that do not register its class (a rolling deploy, a
    /// class only Ruby knows; docs/deploy.md, "Rolling deploys"); tried again at `nextTry`. `announcedBy`: the live
    /// processes serving its queue that register the class; `unannounced`: those that list no classes (they may
    /// know it); both empty: no live process knows it, and it goes to dead once the unknown-class grace has passed.
    case unknownClassGivenBack(nextTry: Date, giveBacks: Int, className: String, announcedBy: [String], unannounced: [String])
    /// In its queue with the same unique lock as another live job (`unique_for`): it is dropped when fetched.
    case duplicateOfUnique(lock: String, ownerJid: String)
    /// A batch callback whose batch has not finished: its jid is fixed at creation, the job is pushed when the
    /// batch's `pending` jobs have finished.
    case batchCallbackWaiting(bid: String, event: String, pending: Int)
    /// In its queue with `ahead` jobs to be fetched before it (`exact` false: more than `ahead`, the bound of the
    /// search). `drainPerSecond`: jobs processed per second over the last 5 minutes, every queue of the shard
    /// (the per-minute history is not kept per queue); nil when nothing was processed.
    case behind(queue: String, ahead: Int, exact: Bool, drainPerSecond: Double?)
    /// Being run by `job.identity` on thread `job.thread` since `job.since`.
    case running(RunningJob)
    /// Finished: a `job_ledger` row (only jobs that write the ledger have one).
    case done(finishedAt: Date?, className: String, queue: String)
    /// Settled for good — done, dead or cancelled — as the job's completion record says (`completion:<jid>`, kept
    /// for classes that opt in with `JobOptions.completionRecord`, until its TTL).
    case completed(JobCompletion)
    /// Found nowhere, and `completion:<jid>` holds something that is not a completion record: `problem` says what
    /// (never the value). Read as unknown (`isUnknown`).
    case unreadableRecord(jid: String, problem: String)
    /// In the dead set since `at`, with the error the runtime stored (already redacted when it was written).
    case dead(at: Date, errorClass: String?, errorMessage: String?)
    /// Found nowhere: not in Redis (every state searched, within the budget), no completion record, not in the
    /// ledger. `searchIncomplete`: the scan budget ran out, so it may still be in a long queue. What it means
    /// (docs/writing-jobs.md, "What became of my job"): never enqueued here, or finished with no trace kept — its class
    /// keeps no completion record and writes no ledger row, or the record's TTL (the ledger's retention) has passed.

    case unknown(jid: String, searchIncomplete: Bool)

    /// A short stable name of the reason (`--json`'s `reason`).
    public var reason: String {
        switch self {
        case .scheduled: return "scheduled"
        case .retryWaiting: return "retry"
        case .overLimit: return "over_limit"
        case .queuePaused: return "queue_paused"
        case .noLiveProcess: return "no_live_process"
        case .classNotRegistered: return "class_not_registered"
        case .unknownClassGivenBack: return "unknown_class_given_back"
        case .duplicateOfUnique: return "duplicate"
        case .batchCallbackWaiting: return "batch_callback_waiting"
        case .behind: return "behind"
        case .running: return "running"
        case .done: return "done"
        case .dead: return "dead"
        case .completed(let record): return record.state.rawValue
        case .unknown, .unreadableRecord: return "unknown"
        }
    }

    public var description: String { description(now: Date()) }

    /// One line for operators, relative times taken against `now`.
    public func description(now: Date) -> String {
        switch self {
        case .scheduled(let at, let queue):
            return "scheduled for later: runs at \(ExplainFormat.time(at)) (\(ExplainFormat.relative(at, now: now))) in queue \(queue)"
        case .retryWaiting(let at, let attempt, let maxAttempts, let errorClass):
            let of = maxAttempts.map { " of \($0)" } ?? " (the class's retry limit, 25 retries by default)"
            let error = errorClass.map { " after \($0)" } ?? ""
            return "waiting for a retry\(error): attempt \(attempt)\(of) at \(ExplainFormat.time(at)) (\(ExplainFormat.relative(at, now: now)))"
        case .overLimit(let nextTry, let reschedules, let full, let holders):
            var line = "over a limiter: rescheduled \(reschedules) time\(reschedules == 1 ? "" : "s"), next try at \(ExplainFormat.time(nextTry)) (\(ExplainFormat.relative(nextTry, now: now)))"
            if !full.isEmpty {
                line += "; full now: " + full.map { limiter in
                    "\(limiter.name)\(limiter.key.isEmpty ? "" : ":\(limiter.key)") (\(limiter.invalid.map { "invalid: \($0); max " } ?? "\(limiter.used)/")\(limiter.max), next free in \(ExplainFormat.duration(limiter.nextFreeIn)))"
                }.joined(separator: ", ")
            }
            if !holders.isEmpty {
                line += "; held by " + holders.prefix(5).map { "\($0.jid) on \($0.identity)" }.joined(separator: ", ")
                    + (holders.count > 5 ? " and \(holders.count - 5) more" : "")
            }
            return line
        case .queuePaused(let queue):
            return "queue \(queue) is paused (workerctl queues resume \(queue))"
        case .noLiveProcess(let queue, let processes):
            return "no live process serves queue \(queue) (\(processes) live process\(processes == 1 ? "" : "es"), none lists it)"
        case .classNotRegistered(let queue, let className, let processes):
            return "no live process serving queue \(queue) registers class \(className) (\(processes) serve the queue): the one that fetches it gives it back to schedule, and sends it to dead once none has for the unknown-class grace (docs/deploy.md, \"Rolling deploys\")"
        case .unknownClassGivenBack(let nextTry, let giveBacks, let className, let announcedBy, let unannounced):
            let known: String
            if !announcedBy.isEmpty {
                known = "registered by \(announcedBy.prefix(5).joined(separator: ", "))\(announcedBy.count > 5 ? " and \(announcedBy.count - 5) more" : "")"
            } else if !unannounced.isEmpty {
                known = "registered by no live process; \(unannounced.prefix(5).joined(separator: ", ")) list no classes and may know it"
            } else {
                known = "known to no live process serving its queue: it goes to dead once the unknown-class grace has passed"
            }
            return "class \(className) given back \(giveBacks) time\(giveBacks == 1 ? "" : "s") by processes that do not register it; next try at \(ExplainFormat.time(nextTry)) (\(ExplainFormat.relative(nextTry, now: now))); \(known)"
        case .duplicateOfUnique(let lock, let ownerJid):
            return "a duplicate of live unique job \(ownerJid) (lock \(lock)): it is dropped when fetched"
        case .batchCallbackWaiting(let bid, let event, let pending):
            return "the \(event) callback of batch \(bid): pushed when its \(pending) pending job\(pending == 1 ? "" : "s") have finished"
        case .behind(let queue, let ahead, let exact, let drain):
            let count = exact ? "\(ahead)" : "more than \(ahead)"
            var line = exact && ahead == 0
                ? "next in line in queue \(queue) (waiting for a free worker thread)"
                : "behind \(count) job\(ahead == 1 && exact ? "" : "s") in queue \(queue)"
            if let drain, drain > 0 {
                line += drain >= 1 ? String(format: ", draining %.1f jobs/s", drain) : String(format: ", draining %.1f jobs/min", drain * 60)
                line += " (all queues, last 5 min)"
                if exact && ahead > 0 { line += ", about \(ExplainFormat.duration(seconds: Double(ahead) / drain))" }
            } else {
                line += ", nothing processed in the last 5 min"
            }
            return line
        case .running(let job):
            return "running on \(job.identity) thread \(job.thread) since \(ExplainFormat.time(job.since)) (\(ExplainFormat.duration(seconds: now.timeIntervalSince(job.since))))"
        case .done(let finishedAt, let className, let queue):
            return "done: \(className) on queue \(queue) finished at \(finishedAt.map(ExplainFormat.time) ?? "unknown") (job_ledger)"
        case .dead(let at, let errorClass, let errorMessage):
            return "dead since \(ExplainFormat.time(at)): \(errorClass ?? "unknown error")\(errorMessage.map { ": \($0)" } ?? "")"
        case .completed(let record):
            let runs = "\(record.attempts) run\(record.attempts == 1 ? "" : "s")"
            return "\(record.state.rawValue): \(record.className) on queue \(record.queue) settled at \(ExplainFormat.time(record.finishedAt)) after \(runs) (completion record)"
        case .unreadableRecord(let jid, let problem):
            return "unknown jid \(jid): not in Redis, and \(problem)"
        case .unknown(let jid, let incomplete):
            return "unknown jid \(jid): not in Redis\(incomplete ? " (search stopped at its budget)" : ""), no completion record, nor in the ledger when one is read"
        }
    }
}

extension JobExplanation {
    /// True for `.unknown` and `.unreadableRecord`: nothing says what became of the job.
    public var isUnknown: Bool {
        switch self {
        case .unknown, .unreadableRecord: return true
        default: return false
        }
    }
}

/// A job a process is running (from its `<identity>:work` hash).
public struct RunningJob: Sendable, Equatable {
    public var jid: String
    public var identity: String
    public var thread: String
    public var since: Date

    public init(jid: String, identity: String, thread: String, since: Date) {
        self.jid = jid
        self.identity = identity
        self.thread = thread
        self.since = since
    }
}

/// A limiter instance as explain names it.
public struct LimiterState: Sendable, Equatable {
    public var name: String
    public var key: String
    public var used: Int
    public var max: Int
    public var nextFreeIn: Duration
    /// What Redis holds that is not a number in range (`LimitSummary.invalid`); `used` is then clamped.
    public var invalid: String? = nil
}

/// A job's status by jid: where it is, its attempts, its progress, and why it is not running.
/// (`WorkersClient.status(jid:)`, `workerctl jobs show`). Immutable.
public struct JobStatus: Sendable, Equatable {
    /// `enqueued`, `scheduled`, `retry`, `dead`, `busy`; nil when it is in none (done or unknown).
    public var state: JobState?
    /// Runs so far: `retry_count + 1` after a failure, 0 before the first failure (1 while the first run is busy).
    public var attempts: Int
    public var progress: JobProgress?
    /// When a cancel was requested (`cancelled-<jid>`), if one was.
    public var cancelRequestedAt: Date?
    public var explanation: JobExplanation
    /// The shard the job was found on (`ShardMap.defaultName` without sharding).
    public var shard: String
    /// Set while that shard's Redis is full (`used_memory` at `maxmemory`): what that means for every job there.
    public var redisFull: String?

    public init(state: JobState?, attempts: Int, progress: JobProgress?, cancelRequestedAt: Date?,
                explanation: JobExplanation, shard: String) {
        self.state = state
        self.attempts = attempts
        self.progress = progress
        self.cancelRequestedAt = cancelRequestedAt
        self.explanation = explanation
        self.shard = shard
    }
}

/// A finished job's `job_ledger` row, for explain's "done".
public struct LedgerRow: Sendable, Equatable {
    public var className: String
    public var queue: String
    public var startedAt: Date?
    public var finishedAt: Date?

    public init(className: String, queue: String, startedAt: Date?, finishedAt: Date?) {
        self.className = className
        self.queue = queue
        self.startedAt = startedAt
        self.finishedAt = finishedAt
    }
}

/// Reads `job_ledger` by jid for explain (Queue does not import Storage: the caller that has a database passes
/// one, e.g. workerctl with `--database-url`). Called from the explaining thread; implementations own their
/// connection.
public protocol JobLedgerLookup: Sendable {
    /// The row of `jid`, or nil when there is none.
    func row(jid: String) throws -> LedgerRow?
}

/// Explains one jid on one Redis (one shard). Stateless apart from its limits; any thread with its own
/// connection may use it. Every read is bounded: the jid search by `scanBudget` entries (`ScanBudget`), the
/// position in the queue by `aheadBound` (one `LPOS … RANK -1 MAXLEN aheadBound+1` from the tail, the side
/// workers fetch from), the batch-callback search by the newest `batchBound` batches.
///
/// The reads that grow with what producers add are bounded too (review M5): queue names (`QueueAdmin.searchNames`,
/// each queue visited costs an entry of the search budget), processes (at most `Stats.sampleProcesses`, `SSCAN`),
/// limiter instances (`LimitAdmin.list`'s budget). A dashboard page passes its own `budget`, so explain shares the
/// page's entries and deadline.
public struct JobExplain: Sendable {
    public let connection: RedisConnection
    public let scanBudget: Int
    public let aheadBound: Int
    public let batchBound: Int
    /// The request's budget (a dashboard page's), used instead of a fresh `scanBudget` one; its deadline bounds
    /// every read of explain.
    public let budget: ScanBudget?

    public init(connection: RedisConnection, scanBudget: Int = 100_000, aheadBound: Int = 10_000, batchBound: Int = 1000,
                budget: ScanBudget? = nil) {
        self.connection = connection
        self.scanBudget = max(1, scanBudget)
        self.aheadBound = max(0, aheadBound)
        self.batchBound = max(1, batchBound)
        self.budget = budget
    }

    /// The processes one explanation reads (within the request's deadline).
    private func processBudget() -> ScanBudget { ScanBudget(maxEntries: Stats.sampleProcesses, deadline: budget?.deadline) }

    /// The explanation alone.
    public func explain(jid: String, ledger: (any JobLedgerLookup)? = nil, now: Date = Date()) throws -> JobExplanation {
        try status(jid: jid, ledger: ledger, now: now).explanation
    }

    /// Where `jid` is and why it is not running, with its progress and a cancel request.
    /// Throws `AdminError.invalidArgument` for a jid that cannot be searched, `RedisError` on I/O, and what
    /// `ledger` throws.
    public func status(jid: String, ledger: (any JobLedgerLookup)? = nil, now: Date = Date(),
                       shard: String = ShardMap.defaultName) throws -> JobStatus {
        try JobAdmin.validate(jid: jid)
        let budget = self.budget ?? ScanBudget(maxEntries: scanBudget)
        let record = try locate(jid: jid, budget: budget)
        let explanation: JobExplanation
        if let record {
            explanation = try explain(record, now: now)
        } else if let waiting = try batchCallback(jid: jid) {
            explanation = waiting
        } else {
            switch try completion(jid: jid) {
            case .record(let completion): explanation = .completed(completion)
            case .unreadable(let problem):
                if let row = try ledger?.row(jid: jid) {
                    explanation = .done(finishedAt: row.finishedAt, className: row.className, queue: row.queue)
                } else {
                    explanation = .unreadableRecord(jid: jid, problem: problem)
                }
            case .none:
                if let row = try ledger?.row(jid: jid) {
                    explanation = .done(finishedAt: row.finishedAt, className: row.className, queue: row.queue)
                } else {
                    explanation = .unknown(jid: jid, searchIncomplete: budget.exhausted)
                }
            }
        }
        return try status(jid: jid, record: record, explanation: explanation, shard: shard)
    }

    /// The status of a job the caller already found (`JobAdmin.find`: the dashboard's job page), without searching
    /// for it again.
    public func status(of record: JobRecord, now: Date = Date(), shard: String = ShardMap.defaultName) throws -> JobStatus {
        guard let jid = record.jid else { throw AdminError.invalidArgument("the entry has no jid") }
        try JobAdmin.validate(jid: jid)
        return try status(jid: jid, record: record, explanation: try explain(record, now: now), shard: shard)
    }

    /// The job's completion record (`completion:<jid>`), read by one `GET` whose reply, whatever the key holds, ends
    /// in a reading (`JobCompletion.read`).
    func completion(jid: String) throws -> JobCompletion.Reading {
        JobCompletion.read(try connection.send(["GET", JobCompletion.key(jid: jid)]))
    }

    private func status(jid: String, record: JobRecord?, explanation: JobExplanation, shard: String) throws -> JobStatus {
        let extras = try connection.pipeline([["GET", JobProgress.key(jid: jid)], ["GET", JobCancels.markKey(jid: jid)]])
        let progress = extras[0].string.flatMap(JobProgress.init(json:))
        let cancel = extras[1].string.flatMap { Bounded.epochSeconds(Double($0)) }.map { Date(timeIntervalSince1970: $0) }
        let retryCount = record?.retryCount.map { Bounded.int($0, in: -1...Bounded.maxCount) }
        var attempts = retryCount.map { $0 + 1 } ?? (record?.state == .busy ? 1 : 0)
        if case .completed(let completion) = explanation { attempts = completion.attempts }
        var status = JobStatus(state: record?.state, attempts: max(0, attempts), progress: progress,
                               cancelRequestedAt: cancel, explanation: explanation, shard: shard)
        if let memory = try RedisMemoryReading.read(connection), memory.isFull {
            status.redisFull = "Redis is full (used_memory \(memory.used) of maxmemory \(memory.max)): producers are refused, and the workers hold retries, dead jobs and counters until it has room (docs/redis-full.md)"
        }
        return status
    }


    // MARK: Finding

    /// The job's entry: busy first (a job being run may also sit in `retry` a moment), then retry, scheduled,
    /// enqueued, dead. Queues are read from the head in chunks and the search stops at the first match.
    func locate(jid: String, budget: ScanBudget) throws -> JobRecord? {
        let processes = processBudget()
        let running = try WorkSet.all(connection, budget: processes)
        if processes.exhausted { budget.stop() }
        if let busy = running.first(where: { $0.jid == jid }) { return busy }
        for state in [JobState.retry, .scheduled] {
            if let found = try SortedJobSet(state).find(connection, jid: jid, budget: budget).first { return found }
        }
        if let found = try firstInQueues(jid: jid, budget: budget) { return found }
        return try SortedJobSet(.dead).find(connection, jid: jid, budget: budget).first
    }

    private func firstInQueues(jid: String, budget: ScanBudget) throws -> JobRecord? {
        let needle = Array(jid.utf8)
        for name in try QueueAdmin.searchNames(connection, budget: budget) {
            if budget.remaining <= 0 { budget.stop(); return nil }
            let queue = JobQueue(name)
            let before = budget.scanned
            defer { if budget.scanned == before { budget.consume(1) } }  // an empty queue still costs an entry
            var start = 0
            while true {
                let allowed = min(JobQueue.chunk, budget.remaining)
                if allowed <= 0 { budget.stop(); return nil }
                let items = (try connection.command("LRANGE", queue.key, start, start + allowed - 1)).array ?? []
                budget.consume(items.count)
                for item in items {
                    guard let raw = item.bytes, ByteSearch.contains(raw, needle) else { continue }
                    let record = JobRecord(state: .enqueued, raw: raw, listQueue: name)
                    if record.jid == jid { return record }
                }
                if items.count < allowed { break }
                start += allowed
            }
        }
        return nil
    }

    // MARK: Reasons

    func explain(_ record: JobRecord, now: Date) throws -> JobExplanation {
        // Scores and run times are read through `Bounded.epochSeconds` (a `1e300` score reads as unknown: 0).
        func date(_ seconds: Double?) -> Date { Date(timeIntervalSince1970: Bounded.epochSeconds(seconds) ?? 0) }
        switch record.state {
        case .busy:
            let work = record.work
            return .running(RunningJob(jid: record.jid ?? "", identity: work?.identity ?? "?", thread: work?.thread ?? "?",
                                       since: date(work?.runAt)))
        case .retry:
            let count = Bounded.int(record.retryCount ?? 0, in: 0...Bounded.maxCount)
            let maxAttempts: Int?
            switch record.payload?.retry {
            case .limit(let n)?: maxAttempts = n + 1
            default: maxAttempts = nil
            }
            return .retryWaiting(at: date(record.score), attempt: count + 2, maxAttempts: maxAttempts, errorClass: record.errorClass)
        case .scheduled:
            let overrated = Bounded.int(record.item?["overrated"]?.intValue ?? 0, in: 0...Bounded.maxCount)
            let giveBacks = Bounded.int(record.item?["unknown_class_count"]?.intValue ?? 0, in: 0...Bounded.maxCount)
            if giveBacks > 0, let className = record.className {
                let knowledge = ClassKnowledge.of(className: className, queue: record.queue,
                                                  processes: try ProcessRegistry.list(connection, budget: processBudget()))
                var announced: [String] = [], unannounced: [String] = []
                switch knowledge {
                case .announced(let identities): announced = identities
                case .mayKnow(let identities): unannounced = identities
                case .nobody: break
                }
                return .unknownClassGivenBack(nextTry: date(record.score), giveBacks: giveBacks, className: className,
                                              announcedBy: announced, unannounced: unannounced)
            }
            if overrated > 0 {
                return .overLimit(nextTry: date(record.score), reschedules: overrated, full: try fullLimiters(),
                                  holders: try holders(className: record.className, except: record.jid))
            }
            return .scheduled(at: date(record.score), queue: record.queue)
        case .dead:
            return .dead(at: date(record.score), errorClass: record.errorClass,
                         errorMessage: record.errorMessage.map { String($0.prefix(500)) })
        case .enqueued:
            return try explainEnqueued(record, now: now)
        }
    }

    /// The order for a job in its queue: a unique duplicate (it will never run), a paused queue, no live process
    /// for the queue, no live process registering its class, then its place in the line.
    private func explainEnqueued(_ record: JobRecord, now: Date) throws -> JobExplanation {
        if let payload = record.payload, let policy = UniquePolicy.requested(by: payload), let jid = record.jid {
            let lock = UniqueLockKey(payload: payload, policy: policy)
            if let owner = try connection.command("GET", lock.redisKey).string, owner != jid {
                return .duplicateOfUnique(lock: lock.redisKey, ownerJid: owner)
            }
        }
        let queue = record.queue
        if try connection.command("SISMEMBER", Keys.paused, queue).integer == 1 { return .queuePaused(queue: queue) }
        let processes = try ProcessRegistry.list(connection, budget: processBudget())
        let serving = processes.filter { !$0.quiet && $0.queues.contains(queue) }
        if serving.isEmpty { return .noLiveProcess(queue: queue, processes: processes.count) }
        if let className = record.className,
           case .nobody(let count) = ClassKnowledge.of(className: className, queue: queue, processes: processes) {
            return .classNotRegistered(queue: queue, className: className, processes: count)
        }
        let key = Keys.queue(queue)
        let replies = try connection.pipeline([["LLEN", key], ["LPOS", key, record.raw, "RANK", -1, "MAXLEN", aheadBound + 1]])
        let length = Int(try replies[0].checked().integer ?? 0)
        let drain = try drainPerSecond(now: now)
        if let position = try replies[1].checked().integer {
            return .behind(queue: queue, ahead: max(0, length - 1 - Int(position)), exact: true, drainPerSecond: drain)
        }
        // Not within `aheadBound + 1` of the tail: more than `aheadBound` are ahead (or it was fetched meanwhile).
        return .behind(queue: queue, ahead: aheadBound, exact: false, drainPerSecond: drain)
    }

    private func drainPerSecond(now: Date) throws -> Double? {
        let buckets = try Throughput.load(connection, minutes: 5, now: now.timeIntervalSince1970)
        let processed = buckets.reduce(0) { $0 + $1.processed }
        return processed > 0 ? Double(processed) / 300 : nil
    }

    private func fullLimiters() throws -> [LimiterState] {
        try LimitAdmin.list(connection, budget: ScanBudget(maxEntries: LimitAdmin.scannedKeys, deadline: budget?.deadline)).filter { ($0.used >= Double($0.max) && $0.max > 0) || $0.invalid != nil }.map {
            LimiterState(name: $0.name, key: $0.key, used: Bounded.int($0.used, in: 0...Bounded.maxCounter), max: $0.max,
                         nextFreeIn: Bounded.duration(seconds: $0.resetsInSeconds), invalid: $0.invalid)
        }
    }

    private func holders(className: String?, except jid: String?) throws -> [RunningJob] {
        try WorkSet.all(connection, budget: processBudget()).filter { $0.className == className && $0.jid != jid }.map {
            RunningJob(jid: $0.jid ?? "", identity: $0.work?.identity ?? "?", thread: $0.work?.thread ?? "?",
                       since: Date(timeIntervalSince1970: Bounded.epochSeconds($0.work?.runAt) ?? 0))
        }
    }

    /// A callback jid of one of the newest `batchBound` batches that has not fired yet.
    private func batchCallback(jid: String) throws -> JobExplanation? {
        let bids = try connection.command("ZREVRANGE", Keys.batches, 0, batchBound - 1).strings
        if bids.isEmpty { return nil }
        let replies = try connection.pipeline(bids.map {
            ["HMGET", Keys.batch($0), "cb_complete_tail", "cb_success_tail", "complete_at", "success_at", "pending"]
        })
        // The callback's payload template is `head` + status + `tail`; its jid is in the tail (after `args`).
        let marker = "\"jid\":\"\(jid)\""
        for (bid, reply) in zip(bids, replies) {
            let fields = reply.array ?? []
            guard fields.count == 5 else { continue }
            let pending = fields[4].string.flatMap { Int($0) } ?? 0
            if fields[2].isNull, fields[0].string?.contains(marker) == true {
                return .batchCallbackWaiting(bid: bid, event: "complete", pending: pending)
            }
            if fields[3].isNull, fields[1].string?.contains(marker) == true {
                return .batchCallbackWaiting(bid: bid, event: "success", pending: pending)
            }
        }
        return nil
    }
}

/// Times in explain's lines: UTC, to the second.
enum ExplainFormat {
    static func time(_ date: Date) -> String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime]
        return formatter.string(from: date)
    }

    static func duration(_ duration: Duration) -> String { Self.duration(seconds: duration.inSeconds) }

    /// Never traps: a span that is not finite is "unknown", one beyond `Bounded.maxIntervalSeconds` is clamped.
    static func duration(seconds: Double) -> String {
        guard seconds.isFinite else { return "unknown" }
        let s = Bounded.seconds(max(0, seconds), max: Bounded.maxIntervalSeconds)
        if s < 60 { return String(format: "%.1fs", s) }
        let whole = Bounded.int(s, in: 0...Int.max)
        if whole < 3600 { return String(format: "%dm%02ds", whole / 60, whole % 60) }
        if whole < 86_400 { return String(format: "%dh%02dm", whole / 3600, (whole % 3600) / 60) }
        return String(format: "%dd%02dh", whole / 86_400, (whole % 86_400) / 3600)
    }

    static func relative(_ date: Date, now: Date) -> String {
        let delta = date.timeIntervalSince(now)
        return delta >= 0 ? "in \(duration(seconds: delta))" : "\(duration(seconds: -delta)) ago"
    }
}
