import Foundation
import WorkersQueue
import WorkersStorage

/// Transactional enqueue (docs/outbox.md): a job enqueued through PostgreSQL, in the caller's own
/// transaction, reaches Redis only if that transaction commits.
///
/// `enqueue` inserts a `job_outbox` row through the SQL function `workers_enqueue` (migration 0014) — the
/// same way in that services written in other languages use — and returns the jid chosen now, which the
/// job keeps in Redis. The relay (`OutboxRelay`) pushes committed rows in Sidekiq's format.
///
/// Stateless: every call uses only the connection it is given, which belongs to the calling thread.
public enum Outbox {
    /// The NOTIFY channel `workers_enqueue` signals on at commit.
    public static let channel = "workers_outbox"

    /// Enqueues `job` on `connection`. Inside an open transaction (`connection.transaction { … }`) the job
    /// exists only if that transaction commits; outside one it commits at once. `at` in the
    /// future puts it in `schedule`; nil or past runs it now. Returns the jid.
    ///
    /// Throws `EnqueueError` for input Sidekiq would refuse (nothing is written), else the `PostgresError`
    /// of the insert (which, as any failed statement, aborts the caller's transaction).
    @discardableResult
    public static func enqueue(_ job: NewJob, at: Date? = nil, on connection: PostgresConnection) throws -> String {
        try enqueueMany([job], at: at.map { [$0] }, on: connection)[0]
    }

    /// Enqueues several jobs in one round trip (one pipeline of `workers_enqueue` calls); jids in order. Each job is
    /// checked by `OutboxEnqueueCall` (the preparation WorkersPostgresNIO shares) before anything is sent.
    @discardableResult
    public static func enqueueMany(_ jobs: [NewJob], at times: [Date]? = nil,
                                   on connection: PostgresConnection) throws -> [String] {
        if jobs.isEmpty { return [] }
        let statements = try OutboxEnqueueCall.prepare(jobs, at: times).map { call in
            PostgresConnection.Statement(OutboxEnqueueCall.sql, [call.className, call.args, call.queue, call.runAt,
                                                                 call.retry, call.extra, call.jid])
        }
        return try connection.pipeline(statements).map { rows in
            guard let row = rows.first else {
                throw PostgresError(category: .decoding, message: "workers_enqueue returned no row")
            }
            return try row.string("jid")
        }
    }
}

/// One `job_outbox` row as the relay and the lost-job finder read it.
struct OutboxRow: Sendable {
    let id: Int
    let jid: String
    /// The job's fields, as stored, or as `prepared(by:)` left them.
    var className: String
    var args: String
    var queue: String
    var retry: String
    var extra: String
    /// Epoch seconds; nil = now.
    let runAt: Double?
    let createdAt: Double

    /// The columns to select for `init(row:)`.
    static let columns = """
        id, jid, class, args::text AS args, queue, retry::text AS retry, extra::text AS extra,
        extract(epoch FROM run_at)::float8 AS run_at, extract(epoch FROM created_at)::float8 AS created_at
        """

    init(row: PostgresRow) throws {
        id = try row.int("id")
        jid = try row.string("jid")
        className = try row.string("class")
        args = try row.string("args")
        queue = try row.string("queue")
        retry = try row.string("retry")
        extra = try row.string("extra")
        // From outside (a row may be inserted without workers_enqueue): ±infinity, NaN or far future clamped.
        runAt = try row.decode("run_at", as: Double?.self).map { Bounded.seconds($0, max: Bounded.maxEpochSeconds) }
        createdAt = try row.double("created_at")
    }

    /// The job this row holds, as a producer handed it to `workers_enqueue`.
    func job() throws -> NewJob {
        let argsValue = try JSONValue.parse(args)
        guard case .array(let argsArray) = argsValue else { throw OutboxRowError.notArray(jid) }
        let extraFields = try JSONValue.parse(extra).objectValue ?? [:]
        var job = NewJob(className, args: argsArray, queue: queue, retry: try JSONValue.parse(retry), extra: extraFields)
        job.jid = jid  // a middleware binding the job to its jid (the sealer) binds it to the row's
        return job
    }

    /// This row with its job passed through `middleware` (in order), as `JobClient` passes a job before it builds
    /// the payload: e.g. `SubjectArgumentsSealer` encrypts the personal arguments here, so what reaches Redis is
    /// what a Swift producer would have pushed (docs/jobs-privacy.md). The row in PostgreSQL is not changed.
    /// Unchanged (no parsing) when `middleware` is empty.
    ///
    /// Throws `OutboxPrepareError.refused` when the row cannot become a job or a middleware refuses it with an
    /// `EnqueueError` (the row's own fault: it is marked `error`), `.failed` for any other failure of a
    /// middleware (its store unreachable: the batch is retried; the row is never pushed without it).
    func prepared(by middleware: [any EnqueueMiddleware]) throws(OutboxPrepareError) -> OutboxRow {
        if middleware.isEmpty { return self }
        var job: NewJob
        do { job = try self.job() } catch { throw .refused(String(describing: error)) }
        for step in middleware {
            do { try step.prepare(&job) } catch let error as EnqueueError {
                throw .refused(error.description)
            } catch {
                throw .failed(className: className, underlying: String(describing: error))
            }
        }
        var row = self
        row.className = job.className
        row.args = JSONValue.array(job.args).serialized()
        row.queue = job.queue
        row.retry = job.retry.serialized()
        row.extra = JSONValue.object(job.extra).serialized()
        return row
    }

    /// The Sidekiq payload Ruby's client would write for this job (`JobClient.payload`), with the row's jid
    /// and created_at; `enqueued_at` for a job pushed onto its queue, none for one put in `schedule`.
    func payload(now: Double) throws -> (json: String, scheduledAt: Double?) {
        let job = try self.job()
        let scheduled = runAt.flatMap { $0 > now ? $0 : nil }
        let payload = try JobClient.payload(for: job, jid: jid, createdAt: createdAt,
                                            enqueuedAt: scheduled == nil ? now : nil)
        return (payload.serialized(), scheduled)
    }

    /// Redis commands that push `rows` (in order: within a queue they run in row order), each with the rows it
    /// carries (`SADD queues` carries none). A row whose payload cannot be built, or whose payload is over
    /// `maxPayloadBytes`, is returned in `refused` with the reason (which names sizes, never content), and not
    /// pushed.
    static func pushCommands(_ rows: [OutboxRow], now: Double, maxPayloadBytes: Int)
        -> (commands: [(command: [any RedisArgument], rows: [OutboxRow])], refused: [(OutboxRow, String)]) {
        var byQueue: [(queue: String, payloads: [String], rows: [OutboxRow])] = []
        var zadd: [any RedisArgument] = ["ZADD", Keys.schedule]
        var scheduledRows: [OutboxRow] = []
        var refused: [(OutboxRow, String)] = []
        for row in rows {
            do {
                let (json, scheduledAt) = try row.payload(now: now)
                let bytes = json.utf8.count
                if bytes > maxPayloadBytes {
                    throw BoundaryError(field: "payload", problem: .tooLarge(bytes: bytes, limit: maxPayloadBytes))
                }
                if let scheduledAt {
                    zadd.append(scheduledAt)
                    zadd.append(json)
                    scheduledRows.append(row)
                } else if let index = byQueue.firstIndex(where: { $0.queue == row.queue }) {
                    byQueue[index].payloads.append(json)
                    byQueue[index].rows.append(row)
                } else {
                    byQueue.append((row.queue, [json], [row]))
                }
            } catch {
                refused.append((row, "\(error)"))
            }
        }
        var commands: [(command: [any RedisArgument], rows: [OutboxRow])] = []
        for (queue, payloads, queueRows) in byQueue {
            commands.append((["SADD", Keys.queues, queue], []))
            commands.append((["LPUSH", Keys.queue(queue)] + payloads, queueRows))
        }
        if !scheduledRows.isEmpty { commands.append((zadd, scheduledRows)) }
        return (commands, refused)
    }
}

/// Why `OutboxRow.prepared(by:)` did not give a row to push. Never holds argument values.
enum OutboxPrepareError: Error, CustomStringConvertible {
    /// The row's own fault (its args are not a job, or a middleware refused it): marked `error`, never pushed.
    case refused(String)
    /// A middleware failed for another reason (its key store unreachable): nothing of the batch is pushed.
    case failed(className: String, underlying: String)

    var description: String {
        switch self {
        case .refused(let reason): return reason
        case .failed(let className, let underlying): return "enqueue middleware failed for a \(className) row: \(underlying)"
        }
    }
}

enum OutboxRowError: Error, CustomStringConvertible {
    case notArray(String)
    var description: String {
        switch self {
        case .notArray(let jid): return "job_outbox row \(jid): args is not a JSON array"
        }
    }
}
