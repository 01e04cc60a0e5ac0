import WorkersBoundary
import Foundation

/// A job fetched into this process's in-flight list. `raw` is the exact bytes taken from the
/// queue; acknowledging removes exactly those bytes.
package struct FetchedJob: Sendable {
    public let queue: String
    public let raw: [UInt8]
    public let workingKey: String
    /// The jid of this job when it owns a unique lock (set by the worker's fetch-time check): its
    /// settlement then releases or keeps that lock (`Scripts.complete`). Nil for other jobs.
    public var uniqueJid: String?
    /// Index in the worker's `ShardMap` of the Redis this job was fetched from (0 with one Redis):
    /// its settlement goes to that shard, whose in-flight list holds it.
    public var shard: Int
    /// When this job's jid was found in its shard's `cancels` set at fetch (the worker's fetch-time check, while the
    /// set is not empty): the epoch seconds of the cancel request. The runner's pre-run check settles such a job
    /// without running it (unless it is a copy retried after that cancel). Nil for other jobs.
    public var cancelRequestedAt: Double?
    /// The completion record its settlement writes (`JobCompletion`, set by the runner when the job settles for good
    /// and its class keeps one): written by `Scripts.complete` in the call that takes the job off its in-flight list,
    /// never while Redis is full. Nil for other jobs (a settlement without it writes no record).
    package var completion: CompletionWrite?

    public init(queue: String, raw: [UInt8], workingKey: String, uniqueJid: String? = nil, shard: Int = 0) {
        self.queue = queue
        self.raw = raw
        self.workingKey = workingKey
        self.uniqueJid = uniqueJid
        self.shard = shard
    }
}

/// What to do with an in-flight job when its run is over.
package enum Settlement: Sendable, Equatable {
    /// Done (success, or a duplicate already applied): remove it.
    case ack
    /// Failed and will be retried: `payload` (with the error fields) goes to `retry` at `at`.
    case retry(payload: String, at: Double)
    /// Failed for good: `payload` goes to `dead`.
    case dead(payload: String)
    /// Not run or not finished: `payload` goes back to the front of `queue`.
    case requeue(payload: String)
    /// Failed with `retry: false`: removed without a trace (Sidekiq's behaviour).
    case drop
    /// Not run (over a limit, docs/limiters.md): `payload` goes to `schedule` at `at`; not a failure.
    case schedule(payload: String, at: Double)
}

/// Which `stat:*` counters a settled run moves. The settle script applies them only when the
/// job was still in flight, so a run is counted once however often its settlement is sent.
package struct RunCounts: OptionSet, Sendable, Equatable {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }

    /// A run that ended (success or failure): `stat:processed`.
    public static let processed = RunCounts(rawValue: 1)
    /// A run that failed: `stat:failed`.
    public static let failed = RunCounts(rawValue: 2)

    public init(processed: Bool, failed: Bool) {
        self = []
        if processed { insert(.processed) }
        if failed { insert(.failed) }
    }
}

/// Limits of the dead set (Sidekiq defaults: 10,000 jobs, 180 days; Ruby Sidekiq trims by count and age only) and
/// ours by bytes: with payloads up to 1 MiB, 10,000 dead jobs could hold 10 GB of Redis (docs/redis-full.md).
public struct DeadSetLimits: Sendable, Equatable {
    public var maxJobs: Int
    /// Dead jobs older than this are trimmed when another job dies.
    public var maxAge: Duration
    /// The most Redis memory the dead set may take (`MEMORY USAGE`, sampled), oldest trimmed first: after each batch
    /// that killed a job, and at every orphan sweep (so entries other writers add — Ruby Sidekiq, the API — are
    /// trimmed too). 0: no byte limit.
    public var maxBytes: Int

    public init(maxJobs: Int = 10_000, maxAge: Duration = .seconds(180 * 86_400), maxBytes: Int = 256 << 20) {
        self.maxJobs = maxJobs
        self.maxAge = maxAge
        self.maxBytes = maxBytes
    }

    /// `maxAge` in seconds (the dead scripts' argument).
    package var maxAgeSeconds: Double { maxAge.inSeconds }
}

/// What the fetch measures (issue 51, review L7): a payload over `maxPayloadBytes` goes to dead as a stub instead of
/// to the worker (`OversizedScripts`), and the dead set is then trimmed to `dead`'s age and count.
package struct FetchLimits: Sendable, Equatable {
    public var maxPayloadBytes: Int
    public var dead: DeadSetLimits

    public init(maxPayloadBytes: Int = JobClient.maxPayloadBytes, dead: DeadSetLimits = DeadSetLimits()) {
        self.maxPayloadBytes = maxPayloadBytes
        self.dead = dead
    }
}

/// A payload the fetch took off `queue` and buried in dead because it was over the size limit: its stub's jid (the
/// producer's, or one made up when none could be read) and its size. Nothing of its content.
package struct BuriedPayload: Sendable, Equatable {
    public let queue: String
    public let jid: String
    public let bytes: Int64

    public init(queue: String, jid: String, bytes: Int64) {
        self.queue = queue
        self.jid = jid
        self.bytes = bytes
    }
}

/// What one fetch call brought: the jobs now in this process's in-flight lists, and the payloads it buried instead.
package struct FetchReply: Sendable {
    public var jobs: [FetchedJob]
    public var buried: [BuriedPayload]
}

/// The reliable-fetch protocol on one connection: fetch into an in-flight list, settle, move due
/// scheduled/retry jobs, take back the jobs of dead processes. Compatible with
/// gitlab-sidekiq-fetcher's keys, so Ruby cleaners and ours recover each other's orphans.
package enum ReliableQueue {
    /// Moves up to `limit` jobs from `queues` (tried in the given order; paused queues skipped)
    /// into this process's in-flight lists. A payload over `limits.maxPayloadBytes` is not among them: the script
    /// buried it in `dead` as a stub (`FetchReply.buried`, `OversizedScripts`).
    public static func fetch(_ connection: RedisConnection, identity: String, queues: [String],
                             limit: Int, limits: FetchLimits = FetchLimits(),
                             now: Double = Clock.now()) throws(RedisError) -> FetchReply {
        let arguments = fetchArguments(identity: identity, limit: limit, limits: limits, now: now) + queues
        return try fetchReply(connection.evaluate(Scripts.fetch, arguments: arguments), identity: identity)
    }

    /// The fetch script's arguments before its queue names.
    static func fetchArguments(identity: String, limit: Int, limits: FetchLimits, now: Double) -> [any RedisArgument] {
        [identity, limit, limits.maxPayloadBytes, now, Clock.utcDay(now), limits.dead.maxJobs, limits.dead.maxAgeSeconds]
    }

    /// The jobs and buried payloads in the fetch script's reply (`[queue, [jobs…]]` pairs, then, when it buried any,
    /// one array of `queue, jid, bytes` triples).
    static func fetchReply(_ reply: RedisReply, identity: String) throws(RedisError) -> FetchReply {
        guard case .array(let items) = reply else { throw .unexpectedReply("fetch returned \(reply)") }
        var jobs: [FetchedJob] = []
        var index = 0
        while index + 1 < items.count {
            guard let name = items[index].bytes, case .array(let chunk) = items[index + 1] else {
                throw .unexpectedReply("fetch returned a malformed chunk")
            }
            guard let queue = UTF8Text.validated(name) else { throw .unexpectedReply("fetch returned a queue name that is not UTF-8") }
            let working = Keys.working(queue: queue, identity: identity)
            jobs.reserveCapacity(jobs.count + chunk.count)
            for item in chunk {
                guard let raw = item.bytes else { throw .unexpectedReply("fetch returned a non-string job") }
                jobs.append(FetchedJob(queue: queue, raw: raw, workingKey: working))
            }
            index += 2
        }
        var buried: [BuriedPayload] = []
        if index < items.count {
            guard case .array(let triples) = items[index], triples.count % 3 == 0 else {
                throw .unexpectedReply("fetch returned a malformed list of buried payloads")
            }
            for start in stride(from: 0, to: triples.count, by: 3) {
                guard let queue = triples[start].bytes.flatMap(UTF8Text.validated), let jid = triples[start + 1].string,
                      let bytes = triples[start + 2].integer else {
                    throw .unexpectedReply("fetch returned a malformed buried payload")
                }
                buried.append(BuriedPayload(queue: queue, jid: jid, bytes: bytes))
            }
        }
        return FetchReply(jobs: jobs, buried: buried)
    }

    /// A fetch of up to `limit` jobs from a single queue (`fetch`), then in the same round trip whether the queue is
    /// paused and a wait of up to `timeout` seconds for one more job (`BLMOVE`), so that a worker that has caught up is
    /// waiting inside Redis when the next job is pushed: Redis hands it over in the push's own event-loop iteration
    /// (under AOF `always`, after the push's own disk sync) instead of at the fetcher's next fetch. `fetched` gets
    /// the fetch's jobs as soon as its reply is read, before the wait ends; it must not use `connection`.
    ///
    /// Returns the job the wait took (nil when it timed out) and whether the queue was paused. A paused queue's
    /// fetch moves nothing, but the wait, sent before the answer was known, may have taken a job from it: the caller
    /// gives that job back. The fetch script is sent as `EVAL` with its source (no `NOSCRIPT` inside a pipeline;
    /// Redis caches it by its digest). A failure leaves what the fetch or the wait moved in the in-flight list: the
    /// caller reconciles, as after any lost fetch reply.
    public static func fetchThenWait(_ connection: RedisConnection, identity: String, queue: String, limit: Int,
                                     limits: FetchLimits = FetchLimits(), timeout: Double,
                                     fetched: (FetchReply) -> Void) throws(RedisError)
        -> (waited: FetchedJob?, paused: Bool) {
        let working = Keys.working(queue: queue, identity: identity)
        var failure: RedisError?
        var paused = false
        var waited: FetchedJob?
        let fetch: [any RedisArgument] = ["EVAL", Scripts.fetch.source] + Scripts.fetch.keyArguments([])
            + fetchArguments(identity: identity, limit: limit, limits: limits, now: Clock.now()) + [queue]
        try connection.pipeline([fetch,
                                 ["SISMEMBER", Keys.paused, queue],
                                 waitCommand(queue: queue, working: working, timeout: timeout)]) { index, reply in
            do throws(RedisError) {
                let checked = try reply.checked()
                switch index {
                case 0: fetched(try fetchReply(checked, identity: identity))
                case 1: paused = checked.integer != 0
                default: waited = job(waitedFor: checked, queue: queue, working: working)
                }
            } catch {
                failure = failure ?? error
            }
        }
        if let failure { throw failure }
        return (waited, paused)
    }

    /// Whether `queue` is paused and, in the same round trip, a wait of up to `timeout` seconds for one job
    /// (`BLMOVE`): a worker's extra waiting connections. Like `fetchThenWait`'s wait, it is sent before the answer is
    /// known, so a job it took from a paused queue is the caller's to give back. A failure leaves what the wait moved
    /// in the in-flight list: the caller reconciles.
    public static func waitForJob(_ connection: RedisConnection, identity: String, queue: String,
                                  timeout: Double) throws(RedisError) -> (job: FetchedJob?, paused: Bool) {
        let working = Keys.working(queue: queue, identity: identity)
        let replies = try connection.pipeline([["SISMEMBER", Keys.paused, queue],
                                               waitCommand(queue: queue, working: working, timeout: timeout)])
        let paused = try replies[0].checked().integer != 0
        return (job(waitedFor: try replies[1].checked(), queue: queue, working: working), paused)
    }

    /// The wait for one job of `queue` into its in-flight list `working` (every blocking fetch sends this one).
    private static func waitCommand(queue: String, working: String, timeout: Double) -> [any RedisArgument] {
        ["BLMOVE", Keys.queue(queue), working, "RIGHT", "LEFT", timeout]
    }

    /// The job a wait's (checked) reply brought; nil when it timed out.
    private static func job(waitedFor reply: RedisReply, queue: String, working: String) -> FetchedJob? {
        reply.bytes.map { FetchedJob(queue: queue, raw: $0, workingKey: working) }
    }

    /// Blocks up to `timeout` seconds for one job on a single queue (used when every queue was
    /// empty and the process serves one queue, so pickup is immediate instead of polled).
    public static func fetchBlocking(_ connection: RedisConnection, identity: String, queue: String,
                                     timeout: Double) throws(RedisError) -> FetchedJob? {
        let working = Keys.working(queue: queue, identity: identity)
        return job(waitedFor: try connection.send(waitCommand(queue: queue, working: working, timeout: timeout)).checked(),
                   queue: queue, working: working)
    }

    /// Settles jobs and adds each settled run's `counts` to the processed/failed counters. A job no longer in flight
    /// (taken back by a sweep, or already settled by an earlier send of the same batch whose reply was lost) is
    /// neither settled nor counted. Returns how many of the jobs were still in flight (and so were settled).
    ///
    /// Plain acks (`isPlainAck`: what a successful run settles as) go first, off their lists' tails by `acknowledge`
    /// (a transaction whose commands carry no acknowledged payload); those it does not take, and every other
    /// settlement, then go in their order through one call of `Scripts.complete`. The order matters only when the
    /// same bytes are in flight twice and one copy is gone.
    ///
    /// `redisHasRoom` false (a Redis at `maxmemory`, docs/redis-full.md): no tail cut — its transaction holds
    /// `RPUSH` and `INCRBY`, which a full Redis refuses — so every settlement goes through the script, whose first
    /// write (`LREM`) Redis accepts. The caller then sends only settlements that free memory (`freesMemory`), with
    /// no counts, and no completion record (`FetchedJob.completion`) is written.
    @discardableResult
    public static func settle(_ connection: RedisConnection,
                              _ items: [(job: FetchedJob, settlement: Settlement, counts: RunCounts)],
                              deadLimits: DeadSetLimits = DeadSetLimits(),
                              now: Double = Clock.now(), redisHasRoom: Bool = true) throws(RedisError) -> Int {
        if items.isEmpty { return 0 }
        // Plain acks by in-flight list, in order.
        var plainAcks: [(workingKey: String, jobs: [FetchedJob])] = []
        var others: [(job: FetchedJob, settlement: Settlement, counts: RunCounts)] = []
        for (job, settlement, counts) in items {
            guard redisHasRoom, isPlainAck(job, settlement, counts) else {
                others.append((job, settlement, counts))
                continue
            }
            if let index = plainAcks.firstIndex(where: { $0.workingKey == job.workingKey }) {
                plainAcks[index].jobs.append(job)
            } else {
                plainAcks.append((job.workingKey, [job]))
            }
        }
        // Settlements that grow Redis are written only while it has room: first a write that a Redis at `maxmemory`
        // refuses and that changes nothing otherwise (`SADD` of a queue already listed), so a full Redis refuses the
        // batch before anything of it is written (`-OOM`; the scripts below would not refuse it after their first
        // write, docs/redis-full.md). Between this and the script, memory can still fill: one batch at most overshoots.
        // A completion record grows Redis too (a full Redis then gets the batch again without records).
        if redisHasRoom, let growing = others.first(where: { !freesMemory($0.job, $0.settlement) || $0.job.completion != nil }) {
            try connection.command("SADD", Keys.queues, growing.job.queue)
        }
        var settled = 0
        var ops: [(job: FetchedJob, settlement: Settlement, counts: RunCounts)] = []
        if !plainAcks.isEmpty {
            let cut = try acknowledge(connection, plainAcks.map { ($0.workingKey, $0.jobs.map(\.raw)) }, now: now)
            settled += cut.settled
            for (group, leftovers) in zip(plainAcks, cut.leftovers) {
                for index in leftovers { ops.append((group.jobs[index], .ack, .processed)) }
            }
        }
        if ops.isEmpty && others.isEmpty { return settled }
        ops += others
        var arguments: [any RedisArgument] = [now, Clock.utcDay(now), deadLimits.maxJobs, deadLimits.maxAgeSeconds]
        arguments.reserveCapacity(4 + ops.count * 10)
        // Appended one by one: an array literal per job (`+= [...]`) allocated a temporary array each time.
        for (job, settlement, counts) in ops {
            let op: String, payload: String
            let target: any RedisArgument
            switch settlement {
            case .ack: (op, payload, target) = ("ack", "", "")
            case .drop: (op, payload, target) = ("drop", "", "")
            case .retry(let json, let at): (op, payload, target) = ("retry", json, at)
            case .dead(let json): (op, payload, target) = ("dead", json, "")
            case .requeue(let json): (op, payload, target) = ("requeue", json, job.queue)
            case .schedule(let json, let at): (op, payload, target) = ("schedule", json, at)
            }
            arguments.append(op)
            arguments.append(job.workingKey)
            arguments.append(job.raw)
            arguments.append(payload)
            arguments.append(target)
            arguments.append(counts.rawValue)
            arguments.append(job.uniqueJid ?? "")
            if redisHasRoom, let completion = job.completion {
                arguments.append(completion.jid)
                arguments.append(completion.json)
                arguments.append(completion.ttlSeconds)
            } else {
                arguments.append("")
                arguments.append("")
                arguments.append(0)
            }
        }
        let reply = try connection.evaluate(Scripts.complete, arguments: arguments)
        return settled + Int(reply.integer ?? 0)
    }

    /// Takes plain acks (`raws`, by in-flight list) off their lists' tails with `TailCut`s in one transaction:
    /// `WATCH` the lists' owners' fetcher heartbeats, check they exist and read each list's last n + `TailCut.slack`
    /// entries, plan the cuts here, then `MULTI`, per list one `LTRIM` and the `RPUSH` of the entries that stay, the
    /// processed counters for the jobs cut, `EXEC`. Returns how many jobs were cut (settled and counted, exactly once:
    /// the cut applies only to the entries read) and, per group, the indices of the jobs it did not take — not in the
    /// stretch read, in a group whose cut would not pay, or all of them when a heartbeat is gone, a list's key is not
    /// an in-flight list's or `attempts` transactions aborted — which the caller settles as `ack` ops of
    /// `Scripts.complete` (one `LREM` each). `afterRead` runs between each read and its transaction (tests write there
    /// what a fetch, a sweep or the heartbeat may write).
    ///
    /// Why a cut planned from a read stays right until `EXEC` (the invariant the `WATCH` keeps; SettleRemovalTests):
    /// a live process's in-flight list is written at its tail only by its settler (the one thread calling this), and
    /// at its head by its fetch, which the cut leaves alone (`LTRIM` and `RPUSH` both count from the tail). Every other
    /// writer — the orphan sweep (`Scripts.recover`), `JobPurge`, gitlab-sidekiq-fetcher's cleanup — acts only on a
    /// list whose fetcher heartbeat is gone: present at the read and neither refreshed, deleted nor expired until `EXEC`
    /// (any of which aborts it: read and planned again), it was present throughout, so none of them ran. (Our own
    /// reconciliation after a lost fetch reply goes through the settler too: `Fetcher`.) Watching the lists instead
    /// aborted on every fetch in between: half the transactions of an 8-process drain, each one read again.
    ///
    /// Why not in the settle script: Redis's Lua hashes every byte of each string that enters it, and matching there
    /// brought each acknowledged payload in twice (the argument and the list read); here Redis only copies the
    /// region out (issue 38: the acknowledgement's Redis time per job, docs/benchmarks.md).
    package static func acknowledge(_ connection: RedisConnection, _ groups: [(workingKey: String, raws: [[UInt8]])],
                                    now: Double, attempts: Int = 3,
                                    afterRead: () -> Void = {}) throws(RedisError) -> (settled: Int, leftovers: [[Int]]) {
        let everyJob = groups.map { Array($0.raws.indices) }
        var heartbeats: [String] = []
        for group in groups {
            guard let owner = Keys.parseWorking(group.workingKey)?.identity else { return (0, everyJob) }
            let heartbeat = Keys.fetcherHeartbeat(identity: owner)
            if !heartbeats.contains(heartbeat) { heartbeats.append(heartbeat) }
        }
        for _ in 0..<attempts {
            var reads: [[any RedisArgument]] = [["WATCH"] + heartbeats, ["EXISTS"] + heartbeats]
            for group in groups { reads.append(["LRANGE", group.workingKey, -(group.raws.count + TailCut.slack), -1]) }
            let replies = try connection.pipeline(reads)
            try replies[0].checked()
            // A heartbeat gone: a sweep may take the list back at any moment (or has): nothing is cut blind.
            guard try replies[1].checked().integer == Int64(heartbeats.count) else {
                try connection.command("UNWATCH")
                return (0, everyJob)
            }
            var plans: [TailCut?] = []
            for (group, region) in zip(groups, replies.dropFirst(2)) {
                let entries = try region.checked().array?.compactMap(\.bytes) ?? []
                plans.append(TailCut.plan(region: entries, acknowledged: group.raws))
            }
            let found = plans.reduce(0) { $0 + ($1?.found ?? 0) }
            if found == 0 {
                try connection.command("UNWATCH")
                return (0, everyJob)
            }
            afterRead()
            var writes: [[any RedisArgument]] = []
            for (group, plan) in zip(groups, plans) {
                guard let plan else { continue }
                writes.append(["LTRIM", group.workingKey, 0, -(plan.length + 1)])
                for start in stride(from: 0, to: plan.kept.count, by: 1000) {
                    var push: [any RedisArgument] = ["RPUSH", group.workingKey]
                    for entry in plan.kept[start..<min(plan.kept.count, start + 1000)] { push.append(entry) }
                    writes.append(push)
                }
            }
            writes += processedCounters(found, now: now)
            // Nil: a heartbeat moved since it was read (nothing was written); read and plan again.
            guard let results = try connection.transactionUnlessWatchedKeysMoved(writes) else { continue }
            for result in results { try result.checked() }
            return (found, zip(plans, everyJob).map { plan, all in plan?.leftovers ?? all })
        }
        return (0, everyJob)
    }

    /// The commands that add `count` runs to the processed counters at `now`: `stat:processed`, the UTC day's
    /// counter (`Keys.dailyStatRetention`) and the day's per-minute hash (`Keys.minutelyRetention`) — the same keys, expiries and
    /// minute as the ending of `Scripts.complete`, which moves them for the runs it settles.
    static func processedCounters(_ count: Int, now: Double) -> [[any RedisArgument]] {
        let day = Clock.utcDay(now)
        let minute = Int((now / 60).rounded(.down)) % 1440
        return [["INCRBY", Keys.statProcessed, count],
                ["INCRBY", Keys.statProcessed(day: day), count],
                ["EXPIRE", Keys.statProcessed(day: day), Keys.dailyStatRetention],
                ["HINCRBY", Keys.statMinutelyProcessed(day: day), minute, count],
                ["EXPIRE", Keys.statMinutelyProcessed(day: day), Keys.minutelyRetention]]
    }

    /// Trims the dead set to `maxBytes` of Redis memory (as `MEMORY USAGE … SAMPLES 32` estimates it), oldest first,
    /// in at most 64 steps of one script. Returns how many entries went. 0 `maxBytes`: nothing.
    @discardableResult
    public static func trimDead(_ connection: RedisConnection, maxBytes: Int) throws(RedisError) -> Int {
        guard maxBytes > 0 else { return 0 }
        return Int(try connection.evaluate(Scripts.trimByBytes, keys: [Keys.dead], arguments: [maxBytes]).integer ?? 0)
    }

    /// Whether settling `job` so takes memory off Redis, or leaves it as it was, without counting: what may be written
    /// while Redis is full (docs/redis-full.md). An ack, a drop (each one `LREM`, and a unique lock's `DEL`) and a
    /// give-back (`LREM` + `RPUSH` of the same bytes) do; a retry, a dead job or a reschedule (a sorted-set entry in
    /// place of a list entry, the payload rewritten larger) and any job of a batch (its outcome is recorded) do not.
    public static func freesMemory(_ job: FetchedJob, _ settlement: Settlement) -> Bool {
        switch settlement {
        case .ack, .drop: return !mayBelongToBatch(job.raw)
        case .requeue(let payload): return !mayBelongToBatch(job.raw) && payload.utf8.count <= job.raw.count
        case .retry, .dead, .schedule: return false
        }
    }

    /// Adds `processed` and `failed` runs to the `stat:*` counters at `now` (the ones `Scripts.complete` and
    /// `processedCounters` move): the runs a full Redis settled without counting, once it has room.
    public static func addCounters(_ connection: RedisConnection, processed: Int, failed: Int,
                                   now: Double = Clock.now()) throws(RedisError) {
        var commands: [[any RedisArgument]] = processed > 0 ? processedCounters(processed, now: now) : []
        if failed > 0 {
            let day = Clock.utcDay(now)
            let minute = Int((now / 60).rounded(.down)) % 1440
            commands += [["INCRBY", Keys.statFailed, failed],
                         ["INCRBY", Keys.statFailed(day: day), failed],
                         ["EXPIRE", Keys.statFailed(day: day), Keys.dailyStatRetention],
                         ["HINCRBY", Keys.statMinutelyFailed(day: day), minute, failed],
                         ["EXPIRE", Keys.statMinutelyFailed(day: day), Keys.minutelyRetention]]
        }
        for reply in try connection.pipeline(commands) { try reply.checked() }
    }

    /// An `ack` of a run counted as processed only (not failed), of a job without a unique lock or a completion
    /// record and not of a batch:
    /// what a successful run settles as, taken off its list's tail by `acknowledge`.
    private static func isPlainAck(_ job: FetchedJob, _ settlement: Settlement, _ counts: RunCounts) -> Bool {
        guard case .ack = settlement else { return false }
        return counts == .processed && job.uniqueJid == nil && job.completion == nil && !mayBelongToBatch(job.raw)
    }

    /// Whether `raw` holds the bytes `"bid"` anywhere — the settle script's own test before it looks for a batch
    /// (`batch_outcome`), made here on the settler's thread so that Redis, which a fleet shares, does not search every
    /// acknowledged payload (issue 38: that search was 16 % of the settle script's Redis time).
    static func mayBelongToBatch(_ raw: [UInt8]) -> Bool { ByteSearch.contains(raw, batchNeedle) }

    private static let batchNeedle = Array(#""bid""#.utf8)

    /// Moves the jobs of `set` (`schedule` or `retry`) whose time has come to their queues, in
    /// batches of `batchSize`, until none is due. Each job is pushed once however many processes
    /// poll (the script pushes only what its own ZREM removed). Members that are not valid jobs go
    /// to `dead`. Returns the number moved.
    @discardableResult
    public static func moveDue(_ connection: RedisConnection, from set: String, now: Double = Clock.now(),
                               batchSize: Int = 100) throws(RedisError) -> Int {
        var total = 0
        while true {
            let reply = try connection.command("ZRANGEBYSCORE", set, "-inf", now, "LIMIT", 0, batchSize)
            let members = reply.array ?? []
            if members.isEmpty { return total }
            var arguments: [any RedisArgument] = []
            var invalid: [(raw: [UInt8], reason: String)] = []
            for member in members {
                guard let raw = member.bytes else { continue }
                let parsed: JobPayload
                do { parsed = try JobPayload(parsing: raw) } catch {
                    invalid.append((raw, error.description))
                    continue
                }
                var payload = parsed
                let queue = payload.queue ?? "default"
                payload.queue = queue
                if payload.fields["retry"] == nil { payload.fields["retry"] = .bool(true) }
                if payload.fields["created_at"] == nil { payload.setTimestamp("created_at", now) }
                payload.setTimestamp("enqueued_at", Clock.now())
                arguments += [raw, queue, payload.serialized()]
            }
            if !arguments.isEmpty {
                let moved = try connection.evaluate(Scripts.moveDue, keys: [set], arguments: arguments)
                total += Int(moved.integer ?? 0)
            }
            for (raw, reason) in invalid {
                // One script: only the poller whose ZREM removed it writes the dead entry, and a full Redis, which
                // would refuse a ZADD sent alone after the ZREM, lets it through after the script's first write
                // (docs/redis-full.md): the member is never lost between the two.
                _ = try connection.evaluate(Scripts.buryUnreadable, keys: [set], arguments: [
                    raw, now, UnreadableJob.deadEntry(raw: raw, queue: "default", reason: reason, now: now)])
            }
            if members.count < batchSize { return total }
        }
    }

    /// The jobs in this process's in-flight lists (for `queues`) that the process does not know it holds: a fetch
    /// whose reply was lost (the link broke after Redis ran it) leaves such jobs behind, and nobody else would recover
    /// them while our heartbeat lives. The caller puts them back through its settler (`SettlementQueue.giveBack`):
    /// only the settler takes a job off a live process's list (`acknowledge`'s invariant).
    ///
    /// `known` must be read *after* the lists (see `WorkerProcess`): a job settled in between is then "unknown" here,
    /// but the requeue only acts on a job still in the list, so it is a no-op. Read only.
    public static func unknownInFlight(_ connection: RedisConnection, identity: String, queues: [String],
                                       known: () -> [[UInt8]]) throws(RedisError) -> [FetchedJob] {
        var listed: [FetchedJob] = []
        for queue in queues {
            let key = Keys.working(queue: queue, identity: identity)
            for reply in try connection.command("LRANGE", key, 0, -1).array ?? [] {
                if let raw = reply.bytes { listed.append(FetchedJob(queue: queue, raw: raw, workingKey: key)) }
            }
        }
        if listed.isEmpty { return [] }
        var held: [[UInt8]: Int] = [:]
        for raw in known() { held[raw, default: 0] += 1 }
        var unknown: [FetchedJob] = []
        for job in listed {
            if let count = held[job.raw], count > 0 {
                held[job.raw] = count - 1
            } else {
                unknown.append(job)
            }
        }
        return unknown
    }

    /// What the orphan sweep does with one job of a dead process (`identity`) from `queue`'s in-flight list: back to
    /// its queue with `interrupted_count` + 1, or to dead once interrupted `interruptLimit` times, or straight to dead
    /// in an `UnreadableJob` envelope with the reason when it is not a job the runtime can read (review H1: a counter
    /// no process could add 1 to crashed every sweeper). Pure; any thread (the fuzz harness calls it).
    public static func recovery(of raw: [UInt8], queue: String, identity: String, interruptLimit: Int,
                                now: Double) -> (toDead: Bool, payload: String) {
        var payload: JobPayload
        do { payload = try JobPayload(parsing: raw) } catch {
            return (true, UnreadableJob.deadEntry(raw: raw, queue: queue, reason: error.description, now: now))
        }
        let count = payload.interruptedCount + 1
        payload.fields["interrupted_count"] = .int(Int64(count))
        guard count >= interruptLimit && interruptLimit > 0 else { return (false, payload.serialized()) }
        payload.fields["error_class"] = "Interrupted"
        payload.fields["error_message"] = .string(
            "interrupted \(count) times: the worker process died while running it (last owner \(identity))")
        if payload.fields["failed_at"] == nil { payload.setTimestamp("failed_at", now) }
        return (true, payload.serialized())
    }

    /// What an orphan sweep found and did.
    public struct RecoveryReport: Sendable, Equatable {
        public var deadProcesses: [String] = []
        public var requeued = 0
        public var killed = 0
    }

    /// Takes back the in-flight jobs of every process whose fetcher heartbeat has expired: each
    /// job goes back to the front of its queue with `interrupted_count` + 1, or to `dead` once it
    /// has been interrupted `interruptLimit` times (a job that kills its worker must not loop).
    public static func recoverOrphans(_ connection: RedisConnection, ownIdentity: String,
                                      interruptLimit: Int = 3, deadLimits: DeadSetLimits = DeadSetLimits(),
                                      now: Double = Clock.now()) throws(RedisError) -> RecoveryReport {
        var report = RecoveryReport()
        let keys = try connection.scanKeys(matching: Keys.workingPattern)

        var aliveCache: [String: Bool] = [:]
        for key in Set(keys).sorted() {
            guard let (queue, identity) = Keys.parseWorking(key), identity != ownIdentity else { continue }
            let heartbeat = Keys.fetcherHeartbeat(identity: identity)
            let alive: Bool
            if let cached = aliveCache[identity] { alive = cached } else {
                alive = try connection.command("EXISTS", heartbeat).integer == 1
                aliveCache[identity] = alive
            }
            if alive { continue }
            let jobs = try connection.command("LRANGE", key, 0, -1).array ?? []
            if jobs.isEmpty { continue }
            var arguments: [any RedisArgument] = [now, deadLimits.maxJobs, deadLimits.maxAgeSeconds, queue]
            var killed = 0
            for job in jobs {
                guard let raw = job.bytes else { continue }
                let decision = recovery(of: raw, queue: queue, identity: identity, interruptLimit: interruptLimit, now: now)
                arguments += [raw, decision.toDead ? "dead" : "requeue", decision.payload]
                if decision.toDead { killed += 1 }
            }
            let moved = try connection.evaluate(Scripts.recover, keys: [key, heartbeat], arguments: arguments)
            if let count = moved.integer, count >= 0 {
                if !report.deadProcesses.contains(identity) { report.deadProcesses.append(identity) }
                report.requeued += Int(count) - min(killed, Int(count))
                report.killed += min(killed, Int(count))
            }
        }
        return report
    }
}
