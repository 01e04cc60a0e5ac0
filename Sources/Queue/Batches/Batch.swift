import WorkersBoundary
import Foundation

/// A callback job of a batch: `className` runs with `args = [status, options]`, where `status` is
/// `{"bid", "event", "total", "pending", "failures", "dead"}` as counted when the event fired (Sidekiq
/// Pro's `on_success(status, options)` / `on_complete(status, options)`). Its jid is chosen when
/// the batch is created, so a callback job carries the same jid however it is delivered.
public struct BatchCallback: Sendable, Equatable {
    public var className: String
    public var options: JSONValue
    public var queue: String

    public init(_ className: String, options: JSONValue = .object([:]), queue: String = "default") {
        self.className = className
        self.options = options
        self.queue = queue
    }
}

/// A batch to create: its jobs and callbacks, written in one atomic step (`Batches.create`).
public struct NewBatch: Sendable {
    public var description: String
    public var jobs: [NewJob]
    /// Pushed once when every job has finished: succeeded, or failed for good (dead or dropped).
    public var onComplete: BatchCallback?
    /// Pushed once when every job has succeeded.
    public var onSuccess: BatchCallback?

    public init(description: String = "", jobs: [NewJob], onComplete: BatchCallback? = nil, onSuccess: BatchCallback? = nil) {
        self.description = description
        self.jobs = jobs
        self.onComplete = onComplete
        self.onSuccess = onSuccess
    }
}

/// What `Batches.create` wrote.
public struct CreatedBatch: Sendable, Equatable {
    public let bid: String
    /// The jobs' jids, in the order given.
    public let jids: [String]
    /// The callbacks' jids (fixed at creation).
    public let completeJid: String?
    public let successJid: String?
}

/// A batch that could not be created; nothing was written.
public enum BatchError: Error, Sendable, Equatable, CustomStringConvertible {
    case invalidBid(String)
    case alreadyExists(bid: String)
    case invalidJob(index: Int, EnqueueError)
    case invalidCallback(event: String, EnqueueError)
    /// The jobs and callbacks live on more than one shard (docs/sharding.md): a batch is one script
    /// on one Redis, so all its queues must map to the same shard.
    case spansShards([String])
    /// More jobs, or more payload bytes, than one batch may hold (`Batches.maxJobs`, `Batches.maxPayloadBytes`).
    case tooLarge(jobs: Int, payloadBytes: Int)

    public var description: String {
        switch self {
        case .spansShards(let shards): return "a batch's queues must all live on one shard; these span \(shards.joined(separator: ", "))"
        case .invalidBid(let bid): return "invalid batch id '\(bid)': expected 1...64 characters of [A-Za-z0-9_-]"
        case .tooLarge(let jobs, let bytes):
            return "a batch of \(jobs) jobs and \(bytes) payload bytes is over the limit (\(Batches.maxJobs) jobs and "
                + "\(Batches.maxPayloadBytes) bytes: one script call creates it); split the work into several batches"
        case .alreadyExists(let bid): return "batch \(bid) already exists"
        case .invalidJob(let index, let error): return "job \(index) of the batch: \(error)"
        case .invalidCallback(let event, let error): return "\(event) callback: \(error)"
        }
    }
}

/// Creates batches (docs/batches.md). Reading them is `BatchAdmin`.
public enum Batches {
    /// How long a batch's keys live after creation (Sidekiq Pro's default batch expiry: 30 days).
    public static let defaultLifetime: Duration = .seconds(30 * 86_400)

    /// The most jobs one batch may hold. A batch keeps only jids in Redis (`b-BID-jids`, `-done`, and `-failed` /
    /// `-died` for failures: about 75 bytes a jid in each set, so at most ~23 MB for the largest batch) for its
    /// lifetime; this, the lifetime and `maxPayloadBytes` are what bound a batch's memory (docs/redis-full.md).
    public static let maxJobs = 100_000
    /// The most payload bytes (jobs' JSON, callbacks' templates) one batch may carry: they travel in one script call,
    /// which holds Redis for as long as it runs.
    public static let maxPayloadBytes = 64 << 20

    /// A new batch id: 16 lowercase hex characters.
    public static func newBid() -> String { Identifiers.hex(byteCount: 8) }

    public static func isValidBid(_ bid: String) -> Bool {
        (1...64).contains(bid.utf8.count)
            && bid.utf8.allSatisfy { ($0 >= 48 && $0 <= 57) || ($0 >= 65 && $0 <= 90) || ($0 >= 97 && $0 <= 122) || $0 == 45 || $0 == 95 }
    }

    /// Creates the batch and pushes its jobs (each with `bid`) in one script call: the jobs are in
    /// their queues if and only if the batch's `total` counts them. A batch of no jobs fires its
    /// callbacks at once. Throws `BatchError` (nothing written) or a `RedisError`.
    @discardableResult
    public static func create(_ connection: RedisConnection, _ batch: NewBatch, bid: String = newBid(),
                              lifetime: Duration = defaultLifetime, now: Double = Clock.now()) throws -> CreatedBatch {
        guard isValidBid(bid) else { throw BatchError.invalidBid(bid) }
        guard batch.jobs.count <= maxJobs else { throw BatchError.tooLarge(jobs: batch.jobs.count, payloadBytes: 0) }
        var arguments: [any RedisArgument] = [bid, now, Int64((now + min(lifetime.inSeconds, Bounded.maxEpochSeconds)).rounded(.up)), batch.description]
        var callbackJids: [String?] = []
        for (event, callback) in [("complete", batch.onComplete), ("success", batch.onSuccess)] {
            guard let callback else {
                arguments += ["", "", ""]
                callbackJids.append(nil)
                continue
            }
            let jid = Identifiers.jid()
            let template: String
            do {
                template = try JobClient.payload(for: NewJob(callback.className, args: [.string(Self.statusMarker), callback.options],
                                                             queue: callback.queue),
                                                 jid: jid, createdAt: now, enqueuedAt: nil).serialized()
            } catch { throw BatchError.invalidCallback(event: event, error) }
            let marker = "\"\(Self.statusMarker)\""
            guard let range = template.range(of: marker), template.hasSuffix("}") else {
                throw BatchError.invalidCallback(event: event, .invalidClassName("cannot build the callback payload"))
            }
            arguments += [callback.queue, String(template[..<range.lowerBound]),
                          String(template[range.upperBound...].dropLast())]
            callbackJids.append(jid)
        }
        var jids: [String] = []
        jids.reserveCapacity(batch.jobs.count)
        var payloadBytes = 0
        for (index, job) in batch.jobs.enumerated() {
            var job = job
            job.runtimeFields["bid"] = .string(bid)
            let jid = job.jid ?? Identifiers.jid()
            let payload: JobPayload
            do { payload = try JobClient.payload(for: job, jid: jid, createdAt: now, enqueuedAt: now) } catch {
                throw BatchError.invalidJob(index: index, error)
            }
            let text: String
            do { text = try JobClient.serializedWithinLimit(payload) } catch { throw BatchError.invalidJob(index: index, error) }
            payloadBytes += text.utf8.count
            guard payloadBytes <= maxPayloadBytes else {
                throw BatchError.tooLarge(jobs: batch.jobs.count, payloadBytes: payloadBytes)
            }
            arguments += [job.queue, jid, text]
            jids.append(jid)
        }
        let reply = try connection.evaluate(BatchScripts.create, arguments: arguments)
        guard reply.integer == 1 else { throw BatchError.alreadyExists(bid: bid) }
        return CreatedBatch(bid: bid, jids: jids, completeJid: callbackJids[0], successJid: callbackJids[1])
    }

    /// Stands for the status object in a callback's payload template; replaced by the settle script.
    static let statusMarker = "__batch_status__"
}

extension JobClient {
    /// Creates a batch with its jobs (`Batches.create`) on a pooled connection.
    @discardableResult
    public func createBatch(_ batch: NewBatch, bid: String = Batches.newBid()) throws -> CreatedBatch {
        var batch = batch
        if !middleware.isEmpty { batch.jobs = try batch.jobs.map(prepared) }  // `EnqueueMiddleware`, before validation
        var queues = batch.jobs.map(\.queue)
        queues += [batch.onComplete?.queue, batch.onSuccess?.queue].compactMap { $0 }
        guard let shards else { return try pool.withConnection { try Batches.create($0, batch, bid: bid) } }
        let groups = shards.map.group(queues: queues)
        guard groups.count <= 1 else { throw BatchError.spansShards(groups.map { shards.map.shards[$0.shard].name }) }
        return try shards.pools[groups.first?.shard ?? 0].withConnection { try Batches.create($0, batch, bid: bid) }
    }
}
