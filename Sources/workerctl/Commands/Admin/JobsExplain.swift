import ArgumentParser
import Foundation
import WorkersOutbox
import WorkersQueue

/// `--database-url` for explain: the ledger is read only when a URL is given (flag or `$DATABASE_URL`).
struct LedgerOptions: ParsableArguments {
    @Option(name: .customLong("database-url"),
            help: "PostgreSQL URL whose job_ledger tells a finished job (default: $DATABASE_URL; none: not read).")
    var databaseURL: String?

    func lookup() -> PostgresLedgerLookup? {
        guard let url = databaseURL ?? ProcessInfo.processInfo.environment["DATABASE_URL"], !url.isEmpty else { return nil }
        return PostgresLedgerLookup(url: url)
    }
}

extension JobsCommand {
    /// The explanation of `jid` from the first shard that knows it, then the ledger (`JobExplain`). An unreadable
    /// ledger leaves the answer "unknown" (with a warning on stderr when `warn`).
    static func status(jid: String, connection: ConnectionOptions, ledger: LedgerOptions, warn: Bool = true) throws -> JobStatus {
        let lookup = ledger.lookup()
        let perShard = try connection.onEveryShard { try JobExplain(connection: $0).status(jid: jid) }
        let statuses = perShard.map { entry -> JobStatus in
            var status = entry.value
            status.shard = entry.shard
            return status
        }
        if let known = statuses.first(where: { !$0.explanation.isUnknown }) { return known }
        // An unreadable completion record says more than a plain "unknown".
        var first = statuses.first(where: { if case .unreadableRecord = $0.explanation { true } else { false } }) ?? statuses[0]
        guard let lookup else { return first }
        do {
            if let row = try lookup.row(jid: jid) {
                first.explanation = .done(finishedAt: row.finishedAt, className: row.className, queue: row.queue)
            }
        } catch {
            // The ledger is a hint for jids Redis no longer has: an unreadable one leaves the answer "unknown".
            if warn { printError("warning: cannot read job_ledger: \(error)") }
        }
        return first
    }

    /// `jobs explain --json`: `{"jid","reason","explanation","state","attempts","progress","cancel_requested_at","shard","details"}`.
    static func json(jid: String, _ status: JobStatus) -> JSONValue {
        func iso(_ date: Date?) -> JSONValue { Format.iso(date?.timeIntervalSince1970) }
        var details: JSONObject = [:]
        switch status.explanation {
        case .scheduled(let at, let queue): details = ["at": iso(at), "queue": .string(queue)]
        case .retryWaiting(let at, let attempt, let maxAttempts, let errorClass):
            details = ["at": iso(at), "attempt": .int(Int64(attempt)), "max_attempts": AdminJSON.int(maxAttempts),
                       "error_class": AdminJSON.string(errorClass)]
        case .overLimit(let nextTry, let reschedules, let full, let holders):
            details = ["next_try": iso(nextTry), "reschedules": .int(Int64(reschedules)),
                       "full_limiters": .array(full.map { .object(["name": .string($0.name), "key": .string($0.key), "used": AdminJSON.int($0.used), "invalid": AdminJSON.string($0.invalid),
                                                                  "max": .int(Int64($0.max)), "next_free_in_s": .double($0.nextFreeIn.inSeconds)]) }),
                       "holders": .array(holders.map(running))]
        case .queuePaused(let queue): details = ["queue": .string(queue)]
        case .noLiveProcess(let queue, let processes):
            details = ["queue": .string(queue), "live_processes": .int(Int64(processes))]
        case .classNotRegistered(let queue, let className, let processes):
            details = ["queue": .string(queue), "class": .string(className), "serving_processes": .int(Int64(processes))]
        case .unknownClassGivenBack(let nextTry, let giveBacks, let className, let announcedBy, let unannounced):
            details = ["next_try": iso(nextTry), "give_backs": .int(Int64(giveBacks)),
                       "class": .string(className), "registered_by": .array(announcedBy.map { .string($0) }),
                       "listing_no_classes": .array(unannounced.map { .string($0) })]
        case .duplicateOfUnique(let lock, let owner): details = ["lock": .string(lock), "owner_jid": .string(owner)]
        case .batchCallbackWaiting(let bid, let event, let pending):
            details = ["bid": .string(bid), "event": .string(event), "pending": .int(Int64(pending))]
        case .behind(let queue, let ahead, let exact, let drain):
            details = ["queue": .string(queue), "ahead": .int(Int64(ahead)), "exact": .bool(exact), "drain_per_s": AdminJSON.number(drain)]
        case .running(let job): details = running(job).objectValue ?? [:]
        case .done(let finishedAt, let className, let queue):
            details = ["finished_at": iso(finishedAt), "class": .string(className), "queue": .string(queue)]
        case .dead(let at, let errorClass, let errorMessage):
            details = ["at": iso(at), "error_class": AdminJSON.string(errorClass), "error_message": AdminJSON.string(errorMessage)]
        case .completed(let record):
            details = ["state": .string(record.state.rawValue), "finished_at": iso(record.finishedAt), "class": .string(record.className),
                       "queue": .string(record.queue), "attempts": .int(Int64(record.attempts)), "source": "completion_record"]
        case .unreadableRecord(_, let problem): details = ["completion_record": .string(problem)]
        case .unknown(_, let incomplete): details = ["search_incomplete": .bool(incomplete)]
        }
        return .object([
            "jid": .string(jid), "reason": .string(status.explanation.reason), "explanation": .string(status.explanation.description),
            "state": AdminJSON.string(status.state?.rawValue), "attempts": .int(Int64(status.attempts)),
            "progress": status.progress.map { .object(["fraction": .double($0.fraction), "note": $0.note.map(JSONValue.string) ?? .null, "at": iso($0.at)]) } ?? .null,
            "cancel_requested_at": iso(status.cancelRequestedAt), "shard": .string(status.shard), "details": .object(details), "redis_full": AdminJSON.string(status.redisFull),
        ])
    }

    private static func running(_ job: RunningJob) -> JSONValue {
        .object(["jid": .string(job.jid), "process": .string(job.identity), "thread": .string(job.thread),
                 "since": Format.iso(job.since.timeIntervalSince1970)])
    }

    /// The lines `jobs show` adds after the record: progress, a cancel request, and the explanation.
    static func printStatus(_ status: JobStatus, now: Date) {
        func line(_ label: String, _ value: String) { print("\(label.padding(toLength: 13, withPad: " ", startingAt: 0))\(value)") }
        line("attempts", "\(status.attempts)")
        if let progress = status.progress {
            line("progress", String(format: "%.0f%%", progress.fraction * 100)
                 + (progress.note.map { " \($0)" } ?? "") + " (at \(Format.time(progress.at.timeIntervalSince1970)) UTC)")
        }
        if let cancel = status.cancelRequestedAt {
            line("cancel", "requested at \(Format.time(cancel.timeIntervalSince1970)) UTC")
        }
        line("explain", status.explanation.description(now: now))
    }

    // MARK: explain

    struct Explain: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "explain",
            abstract: "Why a job is not running (or what became of it): the first reason, from Redis and the ledger.",
            discussion: "Reasons and what to do about each: docs/workerctl.md, \"Why isn't my job running?\".")
        @OptionGroup var connection: ConnectionOptions
        @OptionGroup var ledger: LedgerOptions
        @OptionGroup var output: OutputOptions
        @Argument(help: "The job's jid.") var jid: String

        func run() throws {
            // An unknown jid exits with 1, as `jobs show` does for a jid it cannot find.
            let unknown = try adminCall { () throws -> Bool in
                let status = try JobsCommand.status(jid: jid, connection: connection, ledger: ledger)
                if output.json {
                    printJSON(JobsCommand.json(jid: jid, status))
                    return status.explanation.isUnknown
                }
                print(status.explanation.description(now: Date()))
                if let full = status.redisFull { print(full) }
                if let progress = status.progress {
                    print(String(format: "progress %.0f%%", progress.fraction * 100) + (progress.note.map { " \($0)" } ?? ""))
                }
                if let cancel = status.cancelRequestedAt {
                    print("cancel requested at \(Format.time(cancel.timeIntervalSince1970)) UTC")
                }
                return status.explanation.isUnknown
            }
            if unknown { throw ExitCode(1) }
        }
    }
}
