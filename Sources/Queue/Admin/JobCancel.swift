import Foundation

/// The cancel mark of a job (docs/workerctl.md "Cancel a job"), on one Redis (shard):
///
/// - `cancelled-<jid>`: a string key, value the epoch seconds of the request, TTL `JobCancels.ttl` (7 days). It is
///   the key of Sidekiq's documented `cancelled?` pattern (wiki "FAQ: How do I cancel a Sidekiq job?":
///   `Sidekiq.redis { |c| c.exists("cancelled-#{jid}") }`), so a Ruby job using that pattern sees our cancel;
/// - `cancels`: a sorted set, member the jid, score the epoch seconds at which the mark expires. Worker processes look
///   up the jids they hold (Workers/Runtime/RunSteering.swift): each heartbeat those it runs (pruning the expired
///   marks and counting the live ones), and, while the set is not empty, each fetched batch's: a job found marked
///   never starts, and a running one is told through its context. A member leaves the set once its job is settled
///   for good (dead, dropped or done): `JobAdmin.cancel` removes it when it moved the waiting job to dead itself, a
///   worker when it settled a run it knew marked; marks of jids never seen expire.
///
/// Both are written on every shard by a cancel (`JobAdmin.cancel(jid:)` on each), and removed again on the shard of a
/// job an operator retries or runs out of the dead set (`JobAdmin.perform(.retry…)`: the retry withdraws the cancel).
/// Stateless; any thread.
public enum JobCancels {
    /// The sorted set of live marks, which worker processes look their jids up in.
    public static let set = CancelKeys.set
    /// How long a mark lasts: longer than any schedule or retry horizon a cancelled job is likely to wait for.
    public static let ttl: Duration = .seconds(7 * 86_400)
    /// The `error_class` of a cancelled job in the dead set.
    public static let errorClass = "Cancelled"

    /// `cancelled-<jid>` (Sidekiq's `cancelled?` pattern).
    public static func markKey(jid: String) -> String { CancelKeys.mark(jid: jid) }

    static var ttlSeconds: Int { Int(ttl.components.seconds) }

    /// The two writes of a mark requested at `now` (epoch seconds).
    static func markCommands(jid: String, now: Double) -> [[any RedisArgument]] {
        [["SET", markKey(jid: jid), Int(now), "EX", ttlSeconds],
         ["ZADD", set, now + Double(ttlSeconds), jid]]
    }

    /// Removes the marks of `jids` on `connection`'s Redis (an operator retried or ran those jobs again).
    static func forget(_ connection: RedisConnection, jids: [String]) throws(RedisError) {
        guard !jids.isEmpty else { return }
        _ = try connection.pipeline([["ZREM", set] + jids.map { $0 as any RedisArgument },
                                     ["DEL"] + jids.map { markKey(jid: $0) as any RedisArgument }])
    }

    /// The payload a job waiting in a set or a queue goes to the dead set with when cancelled: its bytes with
    /// `error_class` `Cancelled`, an `error_message`, and `failed_at` when it had none (its retry count unchanged).
    static func deadPayload(_ payload: JobPayload, now: Double) -> String {
        var payload = payload
        payload.fields["error_class"] = .string(errorClass)
        payload.fields["error_message"] = .string(message)
        if payload.fields["failed_at"] == nil { payload.setTimestamp("failed_at", now) }
        return payload.serialized()
    }

    /// The `error_message` of a cancelled job.
    public static let message = "cancelled by an operator (workerctl jobs cancel)"
}

/// What a cancel did on one Redis (shard).
public struct CancelOutcome: Sendable, Equatable {
    /// Where the job was waiting and was taken out of, to the dead set (`Cancelled`): `scheduled`, `retry`, `enqueued`.
    public var movedToDead: [JobState] = []
    /// The processes (`HOST:PID:NONCE`) running the job now: each tells it within one heartbeat interval.
    public var runningOn: [String] = []
    /// True when the bounded search stopped before reading every queue entry: a waiting copy left unread is still
    /// cancelled when a worker takes it (the mark).
    public var searchIncomplete = false
    /// Waiting entries that are not valid jobs, left in place (the mark still applies to a jid that parses).
    public var invalid = 0

    public init() {}

    /// True when the job was found neither waiting nor running here (it may be on another shard, not pushed yet, or
    /// over): the mark still applies for `JobCancels.ttl`.
    public var foundNothing: Bool { movedToDead.isEmpty && runningOn.isEmpty }
}

extension JobAdmin {
    /// The default bound of `cancel`'s search: entries of the scheduled and retry sets and of the queues.
    public static let cancelSearchEntries = 100_000

    /// Cancels the job `jid` on this connection's Redis: writes its mark (`JobCancels`) first, then moves it from the
    /// scheduled set, the retry set or its queue (searched within `searchEntries` entries in all) to the dead set with
    /// `error_class` `Cancelled` (releasing its unique lock), and names the processes running it. A job found nowhere
    /// is still marked: should it appear (pushed later, or moved between sets while we searched) it never starts.
    ///
    /// With several shards call it on every shard (`workerctl jobs cancel` and `WorkersClient.cancel(jid:)` do): the
    /// mark must be on the shard of the job's queue. Idempotent. Throws `AdminError.invalidArgument` for a jid that
    /// cannot be searched, `RedisError` for Redis failures.
    ///
    /// Running jobs are cooperative: they stop at their next `context.checkCancellation()` (or HTTP call) after their
    /// process's next heartbeat; a run that ends anyway (or whose ledger transaction had committed) is done.
    @discardableResult
    public func cancel(jid: String, now: Double = Clock.now(),
                       searchEntries: Int = JobAdmin.cancelSearchEntries) throws -> CancelOutcome {
        try Self.validate(jid: jid)
        // EXEC answers each command on its own: a mark Redis refused (a `cancels` key of another type, which anyone
        // with Redis access can write) fails the cancel instead of reporting a cancel no worker will see.
        for reply in try connection.transaction(JobCancels.markCommands(jid: jid, now: now)) { _ = try reply.checked() }
        var outcome = CancelOutcome()
        let budget = ScanBudget(maxEntries: searchEntries)
        let waiting = try find(jid: jid, in: [.scheduled, .retry, .enqueued], budget: budget)
        outcome.searchIncomplete = budget.exhausted
        var released: [String] = []
        for record in waiting {
            guard let payload = record.payload else { outcome.invalid += 1; continue }
            let kind = record.state.setKey == nil ? "list" : "zset"
            let reply = try connection.evaluate(CancelScripts.toDead, keys: [record.state.setKey ?? Keys.queue(record.queue)],
                                                arguments: [kind, now, deadLimits.maxJobs, deadLimits.maxAgeSeconds,
                                                            record.raw, JobCancels.deadPayload(payload, now: now)])
            if reply.integer == 1 {
                outcome.movedToDead.append(record.state)
                released.append(jid)
            }
        }
        // A cancelled job is over: it releases the unique lock it owns (docs/unique-jobs.md), as a kill does.
        if !released.isEmpty { try UniqueLocks.release(connection, jids: [jid]) }
        outcome.runningOn = try WorkSet.all(connection).filter { $0.jid == jid }.compactMap { $0.work?.identity }
        // Its job is dead here and nothing else of it was seen: the mark leaves `cancels` (no process needs to look
        // it up again); `cancelled-<jid>` stays for Sidekiq's pattern. Kept while a copy may still be waiting unread
        // or is running (its process removes it once it settled that run).
        if !outcome.movedToDead.isEmpty, outcome.runningOn.isEmpty, !outcome.searchIncomplete {
            try connection.command("ZREM", JobCancels.set, jid)
        }
        return outcome
    }
}

/// The cancel's move of a waiting job to the dead set.
enum CancelScripts {
    /// KEYS[1] the set or list the job waits in; ARGV: `list`|`zset`, now, the dead set's most jobs and most age
    /// (seconds), the job's exact bytes, the payload it goes to `dead` with. Returns 1 when it moved the job, 0 when
    /// the entry was gone. Trims the dead set as a kill does; records the death in the job's batch.
    static let toDead = RedisScript(keys: BatchScripts.keys.dead, BatchScripts.functions + """

        local removed
        if ARGV[1] == 'list' then removed = redis.call('LREM', KEYS[1], 1, ARGV[5])
        else removed = redis.call('ZREM', KEYS[1], ARGV[5]) end
        if removed ~= 1 then return 0 end
        local now = ARGV[2]
        redis.call('ZADD', DEAD, now, ARGV[6])
        batch_outcome(ARGV[6], 'dead', now)
        redis.call('ZREMRANGEBYSCORE', DEAD, '-inf', tonumber(now) - tonumber(ARGV[4]))
        redis.call('ZREMRANGEBYRANK', DEAD, 0, -(tonumber(ARGV[3]) + 1))
        return 1
        """)
}
