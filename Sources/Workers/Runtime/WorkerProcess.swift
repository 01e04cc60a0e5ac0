import Foundation
import Logging
import Queue
import Storage
import Synchronization

/// A worker process: N pool threads running jobs fetched reliably from Redis.
///
/// Threads and what they own:
/// - **fetcher** (one Redis connection): moves jobs from the queues into this process's in-flight
///   lists and hands them to the pool through `JobBuffer`;
/// - **pool threads** (no connection): run jobs and queue their settlements;
/// - **settler** (one connection): writes settlements and counters in batches, one script call each;
/// - **heartbeat** (one connection): Sidekiq's process registry, workers hash, fetcher heartbeat,
///   and Sidekiq's signal list (`TSTP` quiet, `TERM` stop, `TTIN` dump);
/// - **housekeeper** (one connection): moves due `retry`/`schedule` jobs, takes back dead
///   processes' in-flight jobs, prunes the process set;
/// - **watchdog** (no connection): fails runs that pass their timeout and replaces their thread.
///
/// Invariant: a job leaves this process's in-flight list only through the settler (or another
/// process's orphan sweep once our heartbeat has expired), so a crash at any point loses nothing.
public final class WorkerProcess: @unchecked Sendable {
    public let identity: String
    public let configuration: WorkerConfiguration
    let runner: JobRunner
    let logger: Logger
    let endpoint: RedisEndpoint
    let buffer: JobBuffer
    let settlements = SettlementQueue()
    let running = RunningJobs()
    let outages: OutageLog
    let startedAt = Clock.now()
    /// Time from `enqueued_at` to the start of the run, for every job this process ran.
    public let pickupLatency = LatencyHistogram()
    /// Run time of every job this process ran.
    public let runTime = LatencyHistogram()
    /// Counters, timers and gauges for a metrics backend.
    public let metrics = RuntimeMetrics()

    private let quiet = Atomic<Bool>(false)
    private let stopping = Atomic<Bool>(false)
    private let settlerStop = Atomic<Bool>(false)
    private let backgroundStop = Atomic<Bool>(false)
    private let threadSerial = Atomic<Int>(0)
    private let processedTotal = Atomic<Int>(0)
    /// Recent average run time in seconds (exponentially weighted; stored as Double bits). Races
    /// between pool threads only blur the average, which is all the fetcher needs.
    private let recentRunSeconds = Atomic<UInt64>(0.02.bitPattern)  // assume slowish until measured
    private let failedTotal = Atomic<Int>(0)
    private let fetcherDone = DispatchGroup()
    private let poolDone = DispatchGroup()
    private let settlerDone = DispatchGroup()
    private let backgroundDone = DispatchGroup()
    private let finished = DispatchSemaphore(value: 0)
    private let shutdownOnce = Mutex<Bool>(false)
    private var signalSources: [DispatchSourceSignal] = []
    /// Time of the last heartbeat Redis accepted (0 before the first).
    private let lastBeatAt = Atomic<Double>(0)

    public init(configuration: WorkerConfiguration, registry: JobRegistry, database: JobDatabase? = nil,
                logger: Logger = Logger(label: "workers")) throws {
        try configuration.validate()
        self.configuration = configuration
        self.endpoint = try RedisEndpoint(url: configuration.redisURL)
        self.identity = Identifiers.processIdentity()
        var logger = logger
        logger[metadataKey: "process"] = "\(identity)"
        self.logger = logger
        self.runner = JobRunner(registry: registry, configuration: configuration, database: database, logger: logger)
        self.buffer = JobBuffer(capacity: configuration.concurrency + configuration.prefetch)
        self.outages = OutageLog(logger: logger)
    }

    /// Jobs run so far (successes and failures) and failures, in this process.
    public var processedCount: Int { processedTotal.load(ordering: .relaxed) }
    public var failedCount: Int { failedTotal.load(ordering: .relaxed) }
    public var busyCount: Int { running.count }
    public var isQuiet: Bool { quiet.load(ordering: .relaxed) }

    /// Healthy while heartbeats reach Redis (the last one within three intervals) and the process
    /// is not shutting down. For `/healthz`.
    public var health: (ok: Bool, detail: String) {
        let age = Clock.now() - lastBeatAt.load(ordering: .relaxed)
        if stopping.load(ordering: .relaxed) { return (false, "shutting down") }
        if age > 3 * configuration.heartbeatInterval { return (false, "no heartbeat reached Redis for \(Int(age)) s") }
        return (true, "ok: \(busyCount) busy of \(configuration.concurrency), \(processedCount) processed\(isQuiet ? ", quiet" : "")")
    }

    // MARK: Life cycle

    /// Registers the process (first heartbeat) and starts every thread. Throws if Redis cannot be
    /// reached at all.
    public func start() throws {
        let connection = try RedisConnection(endpoint: endpoint)
        try beat(connection)  // the fetcher heartbeat must exist before the first fetch
        logger.info("worker started", metadata: [
            "concurrency": "\(configuration.concurrency)",
            "queues": "\(configuration.queues.map { "\($0.name):\($0.weight)" }.joined(separator: ","))",
            "redis": "\(endpoint)",
        ])
        spawn("heartbeat", group: backgroundDone) { [self] in heartbeatLoop(connection) }
        spawn("housekeeper", group: backgroundDone) { [self] in housekeeperLoop() }
        spawn("watchdog", group: backgroundDone) { [self] in watchdogLoop() }
        spawn("settler", group: settlerDone) { [self] in settlerLoop() }
        for _ in 0..<configuration.concurrency { spawnProcessor() }
        spawn("fetcher", group: fetcherDone) { [self] in fetcherLoop() }
    }

    /// Starts, handles SIGTERM/SIGINT (shut down), SIGTSTP (quiet) and SIGTTIN (dump), and returns
    /// once the process has shut down.
    public func run() throws {
        try start()
        installSignalHandlers()
        waitUntilStopped()
    }

    public func waitUntilStopped() {
        finished.wait()
        finished.signal()
    }

    /// Stops fetching; jobs fetched but not started go back to the front of their queues.
    /// Running jobs finish. (Sidekiq's TSTP / "quiet".)
    public func quietDown() {
        guard !quiet.exchange(true, ordering: .acquiringAndReleasing) else { return }
        logger.notice("quiet: no longer fetching")
        fetcherDone.wait()
        requeueUnstarted()
    }

    /// Graceful stop (SIGTERM): quiet, wait up to `shutdownTimeout` for running jobs, put the
    /// unfinished ones back (with `interrupted_count` + 1), write every settlement, deregister.
    /// Safe to call from any thread, more than once; returns when the process has stopped.
    public func shutdown() {
        let first = shutdownOnce.withLock { started in
            defer { started = true }
            return !started
        }
        guard first else { waitUntilStopped(); return }
        logger.notice("shutting down", metadata: ["timeout_s": "\(configuration.shutdownTimeout)"])
        stopping.store(true, ordering: .releasing)
        quietDown()
        if poolDone.wait(timeout: .now() + configuration.shutdownTimeout) == .timedOut {
            for execution in running.all where execution.abandon() {
                running.remove(execution)
                settlements.add(.init(job: execution.job, settlement: .requeue(payload: Self.interrupted(execution.job)),
                                      failed: true, processed: true))
                logger.warning("job unfinished at shutdown; put back", metadata: [
                    "jid": "\(execution.payload?.jid ?? "-")", "class": "\(execution.payload?.className ?? "-")"])
            }
        }
        if !settlements.waitUntilDrained(timeout: max(configuration.shutdownTimeout, 5)) {
            logger.error("could not write every settlement before exit; the jobs stay in flight and will be recovered")
        }
        settlerStop.store(true, ordering: .releasing)
        settlerDone.wait()
        backgroundStop.store(true, ordering: .releasing)
        backgroundDone.wait()
        deregister()
        logger.notice("stopped", metadata: [
            "processed": "\(processedCount)", "failed": "\(failedCount)",
            "pickup_p50_ms": "\(Self.milliseconds(pickupLatency.percentile(0.5)))",
            "pickup_p99_ms": "\(Self.milliseconds(pickupLatency.percentile(0.99)))",
            "peak_rss_kb": "\(Self.peakRSSKilobytes())",
        ])
        finished.signal()
    }

    private func requeueUnstarted() {
        giveBack(buffer.close())
    }

    /// Puts fetched jobs that never started back at the front of their queues, unchanged.
    private func giveBack(_ jobs: [FetchedJob]) {
        for job in jobs {
            settlements.add(.init(job: job, settlement: .requeue(payload: String(decoding: job.raw, as: UTF8.self)),
                                  failed: false, processed: false))
        }
        if !jobs.isEmpty { logger.info("put back \(jobs.count) fetched jobs that had not started") }
    }

    /// The payload of an interrupted job, with `interrupted_count` + 1 (as gitlab's fetcher does).
    static func interrupted(_ job: FetchedJob) -> String {
        guard var payload = try? JobPayload(parsing: job.raw) else { return String(decoding: job.raw, as: UTF8.self) }
        payload.fields["interrupted_count"] = .int(Int64(payload.interruptedCount + 1))
        return payload.serialized()
    }

    private func installSignalHandlers() {
        let queue = DispatchQueue(label: "signals")
        for (number, action) in [(SIGTERM, "stop"), (SIGINT, "stop"), (SIGTSTP, "quiet"), (SIGTTIN, "dump")] {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: queue)
            source.setEventHandler { [self] in handle(signal: action) }
            source.resume()
            signalSources.append(source)
        }
    }

    private func handle(signal action: String) {
        switch action {
        case "stop": Thread.detachNewThread { [self] in shutdown() }
        case "quiet": Thread.detachNewThread { [self] in quietDown() }
        default: dumpRunning()
        }
    }

    private func dumpRunning() {
        for execution in running.all {
            logger.notice("running", metadata: [
                "thread": "\(execution.threadID)", "jid": "\(execution.payload?.jid ?? "-")",
                "class": "\(execution.payload?.className ?? "-")",
                "seconds": "\(Int(Clock.now() - execution.startedAt))"])
        }
    }

    // MARK: Threads

    private func spawn(_ name: String, group: DispatchGroup, _ body: @escaping @Sendable () -> Void) {
        group.enter()
        let thread = Thread {
            body()
            group.leave()
        }
        thread.name = name
        thread.start()
    }

    private func spawnProcessor() {
        let serial = threadSerial.wrappingAdd(1, ordering: .relaxed).newValue
        let threadID = String(serial, radix: 36)
        spawn("pool-\(threadID)", group: poolDone) { [self] in processorLoop(threadID: threadID) }
    }

    private func processorLoop(threadID: String) {
        let slot = running.slot(for: threadID)
        var metricHandles: [String: RuntimeMetrics.JobHandles] = [:]
        defer { running.retire(threadID) }
        var carried: TakenJob?
        while let taken = carried ?? buffer.take().map(TakenJob.init) {
            carried = nil
            if runner.sharesCommits(taken.payload), let database = runner.database {
                let group = runGroup(first: taken, database: database, slot: slot, threadID: threadID,
                                     metricHandles: &metricHandles)
                if group.retire {
                    if let carried = group.carried { giveBack([carried.job]) }
                    return
                }
                carried = group.carried
                continue
            }
            guard let ran = runOne(taken, slot: slot, threadID: threadID, metricHandles: &metricHandles) else {
                return
            }
            ran.metrics.record(failed: ran.outcome.failed)
            settlements.add(.init(job: taken.job, settlement: ran.outcome.settlement, failed: ran.outcome.failed, processed: true))
        }
    }

    /// A job taken from the buffer, parsed once.
    private struct TakenJob {
        let job: FetchedJob
        let parsed: Result<JobPayload, PayloadError>
        var payload: JobPayload? { try? parsed.get() }
        init(_ job: FetchedJob) {
            self.job = job
            self.parsed = JobRunner.parse(job)
        }
    }

    /// A finished run's Prometheus figures, recorded by the caller once the outcome is final (a
    /// group-commit job's success is final only after its group's COMMIT).
    private struct RunMetrics {
        let handles: RuntimeMetrics.JobHandles
        let seconds: Double
        func record(failed: Bool) { RuntimeMetrics.finished(handles, failed: failed, runSeconds: seconds) }
    }

    /// Runs one job on this pool thread; the caller records `metrics`. Nil when the watchdog abandoned
    /// (and settled) the run meanwhile (its metrics are recorded here): the thread must retire, a
    /// replacement is already running.
    private func runOne(_ taken: TakenJob, slot: RunningJobs.Slot, threadID: String,
                        metricHandles: inout [String: RuntimeMetrics.JobHandles],
                        sharedTransaction: PostgresConnection? = nil) -> (outcome: JobRunner.Outcome, metrics: RunMetrics)? {
        let job = taken.job
        let payload = taken.payload
        let execution = Execution(job: job, payload: payload, threadID: threadID, startedAt: Clock.now(),
                                  timeout: runner.timeout(for: payload))
        slot.set(execution)
        let metricClass = payload.map { runner.registry.options(for: $0.className) == nil ? "_unregistered" : $0.className }
            ?? "_unreadable"
        let handles = metrics.job(className: metricClass, queue: job.queue, cache: &metricHandles)
        if let enqueuedAt = payload?.enqueuedAt {
            let waited = execution.startedAt - enqueuedAt
            pickupLatency.record(seconds: waited)
            handles.pickup.recordNanoseconds(Int64(max(0, waited) * 1e9))
        }
        let outcome = runner.run(job, payload: taken.parsed, execution: execution, sharedTransaction: sharedTransaction)
        let seconds = Clock.now() - execution.startedAt
        runTime.record(seconds: seconds)
        let runMetrics = RunMetrics(handles: handles, seconds: seconds)
        let average = Double(bitPattern: recentRunSeconds.load(ordering: .relaxed))
        recentRunSeconds.store((average * 0.95 + seconds * 0.05).bitPattern, ordering: .relaxed)
        guard execution.finish() else {
            runMetrics.record(failed: true)  // the watchdog settled it as timed out
            logger.info("overran job returned; thread retired", metadata: ["thread": "\(threadID)"])
            return nil
        }
        slot.clear(execution)
        return (outcome, runMetrics)
    }

    /// Group commit: runs `first` and then, while more group-commit jobs are already waiting in the
    /// buffer (at most `commitBatch` jobs, for at most `commitWindow` seconds), the next ones, all in one
    /// transaction on one pooled connection, each in its own savepoint; then commits once.
    ///
    /// Invariants: a job whose effects are in the open transaction is acknowledged only after COMMIT
    /// succeeded (until then it stays in flight in Redis and is listed in the slot's `awaitingCommit`, so a
    /// reconciliation never takes it for lost). A job that failed is settled at once: its savepoint was
    /// rolled back, so its settlement does not depend on the commit. If BEGIN, COMMIT or the connection
    /// fails, every job awaiting the commit gets a failure settlement (retry); the ledger makes the retry
    /// apply once. Only this pool thread touches the connection and the group.
    ///
    /// Returns a job it took from the buffer that cannot join a group (to run next), and whether the
    /// thread must retire (the watchdog abandoned one of the runs).
    private func runGroup(first: TakenJob, database: JobDatabase, slot: RunningJobs.Slot, threadID: String,
                          metricHandles: inout [String: RuntimeMetrics.JobHandles]) -> (carried: TakenJob?, retire: Bool) {
        var awaiting: [(taken: TakenJob, metrics: RunMetrics)] = []
        var carried: TakenJob?
        var retire = false
        var firstStarted = false
        let openedAt = Clock.now()
        defer { slot.clearAwaitingCommit() }
        do {
            try database.pool.withConnection { connection in
                try connection.execute("BEGIN")
                var next: TakenJob? = first
                while let taken = next {
                    next = nil
                    firstStarted = true
                    guard let ran = runOne(taken, slot: slot, threadID: threadID, metricHandles: &metricHandles,
                                           sharedTransaction: connection) else {
                        // The watchdog settled this run; commit what the others did, then retire.
                        retire = true
                        break
                    }
                    if case .ack = ran.outcome.settlement {
                        awaiting.append((taken, ran.metrics))
                        slot.awaitCommit(taken.job)
                    } else {
                        ran.metrics.record(failed: ran.outcome.failed)
                        settlements.add(.init(job: taken.job, settlement: ran.outcome.settlement, failed: ran.outcome.failed,
                                              processed: true))
                    }
                    guard connection.isOpen, connection.isInTransaction, !connection.isTransactionFailed else {
                        throw GroupCommitBroken()
                    }
                    guard awaiting.count < configuration.commitBatch,
                          Clock.now() - openedAt < configuration.commitWindow,
                          let candidate = buffer.tryTake().map(TakenJob.init) else { break }
                    if runner.sharesCommits(candidate.payload) { next = candidate } else { carried = candidate }
                }
                let commit = try connection.query("COMMIT")
                if commit.commandTag == "ROLLBACK" { throw GroupCommitBroken() }
            }
        } catch {
            if !awaiting.isEmpty {
                logger.warning("group commit failed; its jobs will be retried",
                               metadata: ["jobs": "\(awaiting.count)", "error": "\(error)"])
            }
            // BEGIN (or the checkout) failed before the first job ran: it fails like any job whose
            // database is unreachable.
            for waiting in awaiting { waiting.metrics.record(failed: true) }
            let unsettled = firstStarted ? awaiting.map(\.taken) : [first]
            for taken in unsettled {
                guard let payload = taken.payload else { continue }  // only parsed jobs share commits
                let options = runner.registry.options(for: payload.className) ?? JobOptions()
                let outcome = runner.failure(error, payload: payload, job: taken.job, options: options, logger: logger)
                settlements.add(.init(job: taken.job, settlement: outcome.settlement, failed: true, processed: true))
            }
            return (carried, retire)
        }
        for (taken, metrics) in awaiting {
            metrics.record(failed: false)
            settlements.add(.init(job: taken.job, settlement: .ack, failed: false, processed: true))
        }
        return (carried, retire)
    }

    private func fetcherLoop() {
        var connection: RedisConnection?
        var backoff = ReconnectBackoff()
        var idleWait = 0.001
        /// Set when a fetch failed: its reply may have been lost after Redis moved jobs.
        var mustReconcile = false
        let names = configuration.queues.map(\.name)
        let single = names.count == 1 ? names[0] : nil
        while !quiet.load(ordering: .acquiring) {
            let limit = configuration.concurrency + allowedPrefetch()
            let room = min(buffer.freeSlots, limit - (buffer.capacity - buffer.freeSlots))
            if room <= 0 {
                buffer.waitForRoom(limit: limit, timeout: 0.1)
                continue
            }
            do {
                if connection == nil { connection = try RedisConnection(endpoint: endpoint) }
                let conn = connection!
                if mustReconcile {
                    let reclaimed = try ReliableQueue.reclaimUnknown(conn, identity: identity, queues: names,
                                                                    known: knownInFlight)
                    if reclaimed > 0 { logger.notice("put back jobs a lost fetch reply had left in flight", metadata: ["count": "\(reclaimed)"]) }
                    mustReconcile = false
                }
                var jobs = try ReliableQueue.fetch(conn, identity: identity, queues: queueOrder(),
                                                   limit: min(room, configuration.fetchBatch))
                if jobs.isEmpty, let single {
                    if try conn.command("SISMEMBER", Keys.paused, single).integer == 0,
                       let job = try ReliableQueue.fetchBlocking(conn, identity: identity, queue: single, timeout: 0.5) {
                        jobs = [job]
                    } else if jobs.isEmpty {
                        Thread.sleep(forTimeInterval: 0.05)
                    }
                }
                outages.succeeded("Redis")
                backoff.reset()
                if jobs.isEmpty {
                    if single == nil {
                        Thread.sleep(forTimeInterval: idleWait)
                        idleWait = min(idleWait * 2, configuration.idlePollMax)
                    }
                    continue
                }
                idleWait = 0.001
                if quiet.load(ordering: .acquiring) {
                    // Quiet arrived while this fetch was in flight: the jobs go back untouched.
                    giveBack(jobs)
                    break
                }
                buffer.put(jobs)
            } catch {
                mustReconcile = true
                let wasConnected = connection != nil
                connection?.close()
                connection = nil
                // A link that broke while idle (e.g. Redis restarted) is not an outage: reconnect at once.
                if wasConnected, error.isConnectionFailure,
                   let fresh = try? RedisConnection(endpoint: endpoint) {
                    connection = fresh
                    continue
                }
                outages.failed("Redis", error)
                backoff.wait { !quiet.load(ordering: .relaxed) }
            }
        }
    }

    /// How many jobs may wait for a thread now: enough to cover the fetch round trip for fast jobs,
    /// few for slow ones (expected wait of a buffered job ≤ `prefetchWait`).
    private func allowedPrefetch() -> Int {
        let average = max(1e-6, Double(bitPattern: recentRunSeconds.load(ordering: .relaxed)))
        let allowed = Double(configuration.concurrency) * configuration.prefetchWait / average
        return Int(min(Double(configuration.prefetch), allowed))
    }

    /// Every raw job this process holds in memory, read downstream-last (buffer, then running,
    /// then unwritten settlements) so a job moving along the pipeline during the read is seen.
    private func knownInFlight() -> [[UInt8]] {
        buffer.snapshot() + running.all.map(\.job.raw) + running.awaitingCommit.map(\.raw) + settlements.snapshot()
    }

    /// Runs `body` on `connection` (opening it if needed). A link found broken is replaced and the
    /// call made once more at once: after a Redis restart every idle connection is dead, which is
    /// not itself an outage. Only for idempotent calls (settle, heartbeat, housekeeping).
    private func withRedis<T>(_ connection: inout RedisConnection?, _ body: (RedisConnection) throws -> T) throws -> T {
        if let existing = connection {
            do { return try body(existing) } catch let error as RedisError where error.isConnectionFailure {
                existing.close()
                connection = nil
            }
        }
        let fresh = try RedisConnection(endpoint: endpoint)
        connection = fresh
        return try body(fresh)
    }

    /// Strict: the configured order. Weighted: a weighted random order, drawn per fetch.
    private func queueOrder() -> [String] {
        if configuration.strictOrder { return configuration.queues.map(\.name) }
        var pool = configuration.queues
        var order: [String] = []
        while !pool.isEmpty {
            let total = pool.reduce(0) { $0 + $1.weight }
            var pick = Int.random(in: 0..<total)
            let index = pool.firstIndex { entry in
                if pick < entry.weight { return true }
                pick -= entry.weight
                return false
            }!
            order.append(pool.remove(at: index).name)
        }
        return order
    }

    private func settlerLoop() {
        var connection: RedisConnection?
        var backoff = ReconnectBackoff()
        while true {
            let batch = settlements.takeBatch(limit: 1000, timeout: 0.05)
            if batch.isEmpty {
                if settlerStop.load(ordering: .acquiring) { return }
                continue
            }
            let processed = batch.reduce(0) { $0 + ($1.processed ? 1 : 0) }
            let failed = batch.reduce(0) { $0 + ($1.failed ? 1 : 0) }
            while true {
                do {
                    _ = try withRedis(&connection) { conn in
                        try ReliableQueue.settle(conn, batch.map { ($0.job, $0.settlement) }, processed: processed,
                                                 failed: failed, deadLimits: configuration.deadLimits)
                    }
                    outages.succeeded("Redis")
                    backoff.reset()
                    break
                } catch {
                    connection?.close()
                    connection = nil
                    outages.failed("Redis", error)
                    backoff.wait()
                }
            }
            processedTotal.wrappingAdd(processed, ordering: .relaxed)
            failedTotal.wrappingAdd(failed, ordering: .relaxed)
            settlements.markWritten(batch.count)
        }
    }

    private func watchdogLoop() {
        while !backgroundStop.load(ordering: .acquiring) {
            Thread.sleep(forTimeInterval: 0.1)
            let now = Clock.now()
            for execution in running.all where now > execution.deadline && execution.abandon() {
                running.remove(execution)
                let outcome = runner.timedOut(execution)
                metrics.jobTimeouts.increment()
                settlements.add(.init(job: execution.job, settlement: outcome.settlement, failed: true, processed: true))
                if !stopping.load(ordering: .relaxed) { spawnProcessor() }
            }
        }
    }

    // MARK: Heartbeat

    private func heartbeatLoop(_ initial: RedisConnection) {
        var connection: RedisConnection? = initial
        var next = Date(timeIntervalSinceNow: configuration.heartbeatInterval)
        while !backgroundStop.load(ordering: .acquiring) {
            if Date() < next {
                Thread.sleep(forTimeInterval: min(0.1, next.timeIntervalSinceNow))
                continue
            }
            next = Date(timeIntervalSinceNow: configuration.heartbeatInterval)
            do {
                try withRedis(&connection) { try beat($0) }
                outages.succeeded("Redis")
            } catch {
                connection?.close()
                connection = nil
                outages.failed("Redis", error)
                next = Date(timeIntervalSinceNow: min(1, configuration.heartbeatInterval))
            }
        }
    }

    /// One heartbeat in Sidekiq's format (§10.1), plus the fetcher heartbeat, and the signal
    /// list. Acts on a signal it finds.
    func beat(_ connection: RedisConnection) throws {
        let now = Clock.now()
        let executions = running.all
        metrics.busyThreads.record(executions.count)
        var workers: [any RedisArgument] = ["HSET", Keys.workers(identity)]
        for execution in executions {
            let work: JSONObject = ["queue": .string(execution.job.queue), "payload": .string(execution.payloadText),
                                    "run_at": .int(Int64(execution.startedAt))]
            workers += [execution.threadID, JSONValue.object(work).serialized()]
        }
        var first: [[any RedisArgument]] = [["UNLINK", Keys.workers(identity)]]
        if workers.count > 2 {
            first.append(workers)
            first.append(["EXPIRE", Keys.workers(identity), 60])
        }
        _ = try connection.transaction(first)
        let pingStart = Clock.now()
        try connection.command("PING")
        let rtt = Int((Clock.now() - pingStart) * 1_000_000)
        let results = try connection.transaction([
            ["SADD", Keys.processes, identity],
            ["HSET", Keys.process(identity), "info", processInfo(), "busy", executions.count, "beat", now,
             "quiet", isQuiet ? "true" : "false", "rss", Self.rssKilobytes(), "rtt_us", rtt],
            ["EXPIRE", Keys.process(identity), 60],
            ["SET", Keys.fetcherHeartbeat(identity: identity), "1", "EX", Int(configuration.fetcherHeartbeatTTL.rounded(.up))],
            ["RPOP", Keys.signals(identity)],
        ])
        lastBeatAt.store(Clock.now(), ordering: .relaxed)
        if let signal = results.last?.string {
            logger.notice("signal received through Redis", metadata: ["signal": "\(signal)"])
            switch signal {
            case "TSTP": Thread.detachNewThread { [self] in quietDown() }
            case "TERM": Thread.detachNewThread { [self] in shutdown() }
            case "TTIN": dumpRunning()
            default: break
            }
        }
    }

    private func processInfo() -> String {
        let info: JSONObject = [
            "hostname": .string(Identifiers.hostname), "started_at": .double(startedAt),
            "pid": .int(Int64(ProcessInfo.processInfo.processIdentifier)), "tag": .string(configuration.tag),
            "concurrency": .int(Int64(configuration.concurrency)),
            "queues": .array(configuration.queues.map { .string($0.name) }),
            "labels": .array(configuration.labels.map { .string($0) }), "identity": .string(identity),
        ]
        return JSONValue.object(info).serialized()
    }

    static func milliseconds(_ seconds: Double?) -> String {
        seconds.map { String(format: "%.2f", $0 * 1000) } ?? "-"
    }

    /// VmHWM: the process's peak resident set, in kB.
    static func peakRSSKilobytes() -> Int {
        guard let text = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
              let line = text.split(separator: "\n").first(where: { $0.hasPrefix("VmHWM:") }) else { return 0 }
        return Int(line.split(separator: " ").dropFirst().first ?? "0") ?? 0
    }

    static func rssKilobytes() -> Int {
        guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return 0 }
        let fields = text.split(separator: " ")
        guard fields.count > 1, let pages = Int(fields[1]) else { return 0 }
        return pages * Int(sysconf(Int32(_SC_PAGESIZE))) / 1024
    }

    private func deregister() {
        do {
            let connection = try RedisConnection(endpoint: endpoint)
            _ = try connection.pipeline([
                ["SREM", Keys.processes, identity],
                ["UNLINK", Keys.workers(identity)],
                ["DEL", Keys.fetcherHeartbeat(identity: identity)],
            ])
        } catch {
            logger.warning("could not deregister; the entry expires by itself", metadata: ["error": "\(error)"])
        }
    }

    // MARK: Housekeeping

    private func housekeeperLoop() {
        var connection: RedisConnection?
        var nextPoll = Date(timeIntervalSinceNow: Double.random(in: 0...min(1, configuration.pollInterval)))
        var nextSweep = Date()
        while !backgroundStop.load(ordering: .acquiring) {
            let wake = min(nextPoll, nextSweep)
            if Date() < wake {
                Thread.sleep(forTimeInterval: min(0.1, wake.timeIntervalSinceNow))
                continue
            }
            do {
                try withRedis(&connection) { conn in try housekeeping(conn, nextPoll: &nextPoll, nextSweep: &nextSweep) }
                outages.succeeded("Redis")
            } catch {
                connection?.close()
                connection = nil
                outages.failed("Redis", error)
                nextPoll = Date(timeIntervalSinceNow: 1)
            }
        }
    }

    private func housekeeping(_ conn: RedisConnection, nextPoll: inout Date, nextSweep: inout Date) throws {
        if Date() >= nextPoll {
            let moved = try ReliableQueue.moveDue(conn, from: Keys.retry)
                + ReliableQueue.moveDue(conn, from: Keys.schedule)
            if moved > 0 { logger.debug("moved due jobs to their queues", metadata: ["count": "\(moved)"]) }
            nextPoll = Date(timeIntervalSinceNow: configuration.pollInterval * Double.random(in: 0.5...1.5))
        }
        if Date() >= nextSweep {
            try sweepOrphans(conn)
            nextSweep = Date(timeIntervalSinceNow: configuration.orphanSweepInterval)
        }
    }

    /// One process in the fleet sweeps per interval (a short lease), taking back the in-flight
    /// jobs of processes whose heartbeat expired and pruning dead entries from `processes`.
    private func sweepOrphans(_ connection: RedisConnection) throws {
        let lease = try connection.command("SET", Keys.orphanSweepLock, identity, "NX", "PX",
                                           max(1, Int(configuration.orphanSweepInterval * 1000) - 100))
        guard lease.string == "OK" else { return }
        let report = try ReliableQueue.recoverOrphans(connection, ownIdentity: identity,
                                                      interruptLimit: configuration.interruptLimit,
                                                      deadLimits: configuration.deadLimits)
        metrics.orphansRecovered.increment(by: report.requeued + report.killed)
        if !report.deadProcesses.isEmpty {
            logger.notice("recovered in-flight jobs of dead processes", metadata: [
                "processes": "\(report.deadProcesses.joined(separator: ","))",
                "requeued": "\(report.requeued)", "dead": "\(report.killed)"])
        }
        try ProcessRegistry.prune(connection)
    }
}

/// A group-commit transaction can no longer commit: the connection broke, or a statement failed
/// outside any job's savepoint. Every job awaiting its commit is retried.
struct GroupCommitBroken: Error, CustomStringConvertible {
    var description: String { "the shared group-commit transaction was lost before COMMIT; the jobs of the group are retried" }
}
