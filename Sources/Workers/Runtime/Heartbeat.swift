import Foundation
import Logging
import WorkersQueue
import Synchronization
import CoreMetrics

/// The heartbeat: every `heartbeatInterval`, Sidekiq's process registry (`processes`, the process
/// hash), the workers hash (what each pool thread runs), the fetcher heartbeat whose expiry lets
/// other processes take back our in-flight jobs, and Sidekiq's signal list (`TSTP` quiet, `TERM`
/// stop, `TTIN` dump).
///
/// Thread rules: owns the `heartbeat` thread and its Redis connection. `register` runs on the
/// life-cycle thread before `start` and hands the connection over to the heartbeat thread; after
/// that only the heartbeat thread touches it. Reads `running` and the life-cycle flags. A signal
/// found in Redis is passed to the `onSignal` given to `start`, on the heartbeat thread (which must
/// not block on shutdown: the handler starts its own thread for that). `lastBeatAt` may be read
/// from any thread.
final class Heartbeat: @unchecked Sendable {
    // @unchecked: `initial` holds a RedisConnection, written once by `register` before the thread
    // starts and taken by the thread; never touched by two threads at once.
    private let identity: String
    private let configuration: WorkerConfiguration
    private let endpoint: RedisEndpoint
    private let running: RunningJobs
    private let flags: LifeCycleFlags
    private let metrics: RuntimeMetrics
    private let classMetrics: ClassMetricsRecorder
    /// The job classes this process runs, listed in its `info` (`SidekiqProcessInfo`).
    private let registeredClasses: [String]
    /// The `args_version`s decoded per versioned class, listed in its `info` too.
    private let argumentVersions: [String: ClosedRange<Int>]
    private let startedAt: Double
    private let outages: OutageLog
    private let logger: Logger
    /// Cancels read and progress written once per beat (RunSteering.swift).
    private let steering: RunSteering
    /// The fetched jobs waiting for a pool thread: each beat looks their jids up in `cancels` too.
    private let buffer: JobBuffer
    /// With several shards, the shard this heartbeat writes to: its workers hash and busy count show
    /// only the jobs fetched from that shard. Nil with one Redis (every running job).
    private let shard: Int?
    /// Whether this heartbeat records the process-wide busy-threads gauge (exactly one per process does).
    private let recordsBusyGauge: Bool
    private let thread: RuntimeThread
    private var initial: RedisConnection?
    /// Whether this heartbeat's Redis has room (it records each beat's `INFO memory` reading there).
    private let room: RedisRoom
    /// Time of the last heartbeat Redis accepted (0 before the first).
    private let lastBeat = Atomic<Double>(0)

    /// `shard`: with several shards, the index in `parts.shardMap` of the Redis it writes to; nil with one Redis.
    init(_ parts: RuntimeParts, shard: Int? = nil, recordsBusyGauge: Bool = true) {
        self.shard = shard
        self.recordsBusyGauge = recordsBusyGauge
        thread = RuntimeThread(name: shard.map { "heartbeat-\($0)" } ?? "heartbeat")
        identity = parts.identity
        configuration = parts.configuration
        endpoint = parts.shardMap.shards[shard ?? 0].endpoint
        running = parts.running
        flags = parts.flags
        metrics = parts.metrics
        classMetrics = parts.classMetrics
        registeredClasses = parts.registeredClasses
        argumentVersions = parts.argumentVersions
        startedAt = parts.startedAt
        outages = parts.outages
        logger = parts.logger
        steering = parts.steering
        buffer = parts.buffer
        room = parts.room
    }

    var lastBeatAt: Double { lastBeat.load(ordering: .relaxed) }

    /// The first heartbeat, on the caller's thread: the fetcher heartbeat must exist before the first
    /// fetch. Throws if Redis cannot be reached. A signal already waiting is passed to `onSignal`.
    func register(onSignal: (String) -> Void) throws {
        let connection = try RedisConnection(endpoint: endpoint)
        try RedisAccessCheck.verify(connection)  // an ACL user without @scripting stops here, named
        if let signal = try beat(connection) { onSignal(signal) }
        initial = connection
    }

    func start(onSignal: @escaping @Sendable (String) -> Void) {
        let connection = initial
        initial = nil
        thread.start { [self] in loop(RedisLink(endpoint: endpoint, connection: connection), onSignal: onSignal) }
    }

    func stopAndWait() { thread.stopAndWait() }
    func requestStop() { thread.requestStop() }
    func wait() { thread.wait() }
    /// Waits at most `timeout` seconds for the thread to return; true if it did.
    func wait(timeout: Double) -> Bool { thread.wait(timeout: timeout) }

    private func loop(_ initial: RedisLink, onSignal: (String) -> Void) {
        var link = initial
        var backoff = ReconnectBackoff()
        var next = Date(timeIntervalSinceNow: configuration.heartbeatInterval.inSeconds)
        while !thread.shouldStop {
            if Date() < next {
                Thread.sleep(forTimeInterval: min(0.1, next.timeIntervalSinceNow))
                continue
            }
            next = Date(timeIntervalSinceNow: configuration.heartbeatInterval.inSeconds)
            do {
                if let signal = try link.withRetryOnStaleLink({ try beat($0) }) { onSignal(signal) }
                outages.succeeded("Redis")
                backoff.reset()
            } catch {
                link.drop()
                outages.failed("Redis", error)
                // The next beat once the reconnect backoff has run out, not at the next heartbeat.
                next = Date(timeIntervalSinceNow: backoff.failed())
            }
        }
    }

    /// One heartbeat, then a reading of Redis's memory for `RedisRoom`. While Redis is full (or when this beat is
    /// refused with `-OOM`) the beat that Redis accepts at `maxmemory` (`ProcessRegistry.fullBeat`): the fetcher
    /// heartbeat never lapses on a full Redis. Returns the signal it popped, if any.
    private func beat(_ connection: RedisConnection) throws -> String? {
        let shardIndex = shard ?? 0
        let signal: String?
        if room.isFull(shard: shardIndex) {
            signal = try fullBeat(connection)
        } else {
            do {
                signal = try recordBeat(connection)
            } catch let error as RedisError where error.isOutOfMemory {
                room.noteRefused(shard: shardIndex, error)
                signal = try fullBeat(connection)
            }
        }
        if let memory = try RedisMemoryReading.read(connection) { room.noteMemory(shard: shardIndex, memory) }
        return signal
    }

    /// The beat of a full Redis: keeps this process's keys alive without growing Redis (`ProcessRegistry.fullBeat`);
    /// the registry entry, busy hashes, progress and per-class figures wait until Redis has room.
    private func fullBeat(_ connection: RedisConnection) throws -> String? {
        let (signal, created) = try ProcessRegistry.fullBeat(
            connection, identity: identity, fetcherHeartbeatTTL: Int(configuration.fetcherHeartbeatTTL.inSeconds.rounded(.up)))
        if created { logger.notice("fetcher heartbeat created on a full Redis (the one key that may grow it: ~100 bytes)") }
        // Cancels are still read (progress `SET`s are refused by a full Redis, and lost: they are only progress).
        let all = running.all
        try steering.beat(connection, shard: shard ?? 0, executions: shard.map { shard in all.filter { $0.job.shard == shard } } ?? all,
                          buffered: bufferedHere(), now: Clock.now())
        lastBeat.store(Clock.now(), ordering: .relaxed)
        if let signal { logger.notice("signal received through Redis", metadata: ["signal": "\(signal)"]) }
        return signal
    }

    /// One heartbeat in Sidekiq's format (§10.1), plus the fetcher heartbeat, and the signal
    /// list. Returns the signal it popped, if any.
    private func recordBeat(_ connection: RedisConnection) throws -> String? {
        let now = Clock.now()
        let all = running.all
        if recordsBusyGauge { metrics.busyThreads.record(all.count) }
        let executions = shard.map { shard in all.filter { $0.job.shard == shard } } ?? all
        var workers: [any RedisArgument] = ["HSET", Keys.workers(identity)]
        for execution in executions {
            let work: JSONObject = ["queue": .string(execution.job.queue), "payload": .string(execution.payloadText),
                                    "run_at": .int(Int64(execution.startedAt))]
            workers += [execution.threadID, JSONValue.object(work).serialized()]
        }
        // The same hash under Sidekiq 6's name (`:workers`) and Sidekiq 7/8's (`:work`).
        var first: [[any RedisArgument]] = [["UNLINK", Keys.workers(identity), Keys.work(identity)]]
        if workers.count > 2 {
            first.append(workers)
            first.append(["EXPIRE", Keys.workers(identity), 60])
            first.append(["HSET", Keys.work(identity)] + Array(workers.dropFirst(2)))
            first.append(["EXPIRE", Keys.work(identity), 60])
        }
        for reply in try connection.transaction(first) { try reply.checked() }
        let pingStart = Clock.now()
        try connection.command("PING")
        let rtt = Int((Clock.now() - pingStart) * 1_000_000)
        let results = try connection.transaction([
            ["SADD", Keys.processes, identity],
            ["HSET", Keys.process(identity), "info", processInfo(), "concurrency", configuration.concurrency,
             "busy", executions.count, "beat", now,
             "quiet", flags.isQuiet ? "true" : "false", "rss", ProcessFigures.rssKilobytes(), "rtt_us", rtt],
            ["EXPIRE", Keys.process(identity), 60],
            ["SET", Keys.fetcherHeartbeat(identity: identity), "1", "EX", Int(configuration.fetcherHeartbeatTTL.inSeconds.rounded(.up))],
            ["RPOP", Keys.signals(identity)],
        ])
        try steering.beat(connection, shard: shard ?? 0, executions: executions, buffered: bufferedHere(), now: now)
        lastBeat.store(Clock.now(), ordering: .relaxed)
        flushClassMetrics(connection)
        guard let signal = results.last?.string else { return nil }
        logger.notice("signal received through Redis", metadata: ["signal": "\(signal)"])
        return signal
    }

    /// The buffered jobs fetched from this heartbeat's shard.
    private func bufferedHere() -> [FetchedJob] {
        let waiting = buffer.waiting()
        guard let shard else { return waiting }
        return waiting.filter { $0.shard == shard }
    }

    /// The process's per-class figures, flushed by one heartbeat per process (the one that records the gauge). A
    /// failure loses that beat's figures, never the beat (its signal is already popped).
    private func flushClassMetrics(_ connection: RedisConnection) {
        guard recordsBusyGauge else { return }
        do {
            try classMetrics.flush(on: connection)
        } catch {
            logger.debug("per-class metrics not flushed", metadata: ["error": "\(error)"])
        }
    }

    private func processInfo() -> String {
        SidekiqProcessInfo(configuration: configuration, identity: identity, startedAt: startedAt,
                           registeredClasses: registeredClasses, argumentVersions: argumentVersions).json
    }

    /// Removes this process from the registry (on the caller's thread, with a connection of its own,
    /// after the heartbeat thread has stopped). An entry left behind expires by itself.
    func deregister() {
        do {
            let connection = try RedisConnection(endpoint: endpoint)
            flushClassMetrics(connection)
            _ = try connection.pipeline([
                ["SREM", Keys.processes, identity],
                ["UNLINK", Keys.workers(identity), Keys.work(identity)],
                ["DEL", Keys.fetcherHeartbeat(identity: identity)],
            ])
        } catch {
            logger.warning("could not deregister; the entry expires by itself", metadata: ["error": "\(error)"])
        }
    }
}

/// Figures about this OS process, read from /proc.
enum ProcessFigures {
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
}
