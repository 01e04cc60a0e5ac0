import ArgumentParser
import Foundation
import WorkersAppJobs
import WorkersQueue

struct JobsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "jobs",
        abstract: "List, show, explain, retry, run, kill, delete and cancel jobs.",
        discussion: """
            States: enqueued (queue:NAME lists), scheduled, retry, dead (sorted sets), busy (running \
            on a live process). A JID that is not found exits with code 1; bad arguments exit with 2.
            """,
        subcommands: [List.self, Show.self, Explain.self, Action<Retry>.self, Action<Run>.self, Action<Kill>.self, Action<Delete>.self, Cancel.self]
    )

    static func printTable(_ page: Page<JobRecord>, now: Double) {
        if page.items.isEmpty {
            print(page.total == 0 ? "no jobs" : "no jobs on page \(page.request.number) (\(page.total) in all)")
            return
        }
        var table = TextTable(["JID", "STATE", "QUEUE", "CLASS", "ARGS", "WHEN", "INFO"])
        table.maxCellWidth = 48
        for record in page.items {
            table.add([record.jid ?? "-", record.state.rawValue, record.queue, record.displayClass ?? "?",
                       DomainJobs.argsRedactor.args(of: record).map { JSONValue.array($0).serialized() } ?? "(invalid)",
                       when(record, now: now), info(record)])
        }
        table.print()
        print("page \(page.request.number)/\(max(page.pageCount, 1)), \(page.total) jobs")
    }

    static func when(_ record: JobRecord, now: Double) -> String {
        switch record.state {
        case .enqueued: return Format.relative(record.enqueuedAt, now: now)
        case .busy: return Format.relative(record.work?.runAt, now: now)
        case .scheduled, .retry, .dead: return Format.relative(record.score, now: now)
        }
    }

    static func info(_ record: JobRecord) -> String {
        if let reason = record.invalidReason { return "INVALID: \(reason)" }
        if record.state == .busy, let work = record.work { return "\(work.identity) \(work.thread)" }
        guard let errorClass = record.errorClass else { return "" }
        let count = record.retryCount.map { "#\($0) " } ?? ""
        return "\(count)\(errorClass): \(record.errorMessage ?? "")"
    }

    // MARK: ls

    /// Says on stderr that a read stopped at its budget (`ScanBudget.cliEntries` entries, 1,000 queue names, 1,000
    /// processes per shard): the listing or search may miss jobs.
    static func notePartial(_ budget: ScanBudget, shard: String? = nil) {
        guard budget.exhausted else { return }
        printPartial("\(shard.map { "shard \($0): " } ?? "")read \(budget.scanned) entries (at most \(ScanBudget.cliEntries), \(QueueAdmin.sampleNames) queue names and \(Stats.sampleProcesses) processes per shard); jobs past them are not shown")
    }

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "ls", abstract: "List jobs in a state (sorted sets: latest score first).")
        @OptionGroup var connection: ConnectionOptions
        @OptionGroup var output: OutputOptions
        @Option(help: "enqueued, scheduled, retry, dead or busy.") var state: String?
        @Option(help: "Only jobs of this queue.") var queue: String?
        @Option(name: .customLong("class"), help: "Only jobs of this class (or ActiveJob wrapped class).") var className: String?
        @Option(help: "Only jobs whose JSON contains this text (case-sensitive).") var grep: String?
        @Option(help: "Page number, from 1.") var page = 1
        @Option(help: "Jobs per page (1...1000).") var size = 25

        func run() throws {
            try adminCall {
                let state = try parseState(state)!
                let request = try pageRequest(page: page, size: size)
                let filter = JobFilter(queue: queue, className: className, grep: grep)
                let map = try connection.shardMap()
                if !map.isSingle { return try runSharded(map, state: state, filter: filter, request: request) }
                let budget = ScanBudget(maxEntries: ScanBudget.cliEntries)
                let jobs = try JobAdmin(connection: try connection.connect()).list(state, filter: filter, page: request, budget: budget)
                JobsCommand.notePartial(budget)
                if output.json {
                    return printJSON(AdminJSON.page(jobs, extra: ["state": .string(state.rawValue), "filter": AdminJSON.filter(filter)]))
                }
                JobsCommand.printTable(jobs, now: Clock.now())
            }
        }

        /// Several shards: the same page taken from each shard (with `--queue`, only its shard),
        /// shown together with a SHARD column; the total is the sum. JSON: `{"shards": [page + "shard"]}`.
        private func runSharded(_ map: ShardMap, state: JobState, filter: JobFilter, request: PageRequest) throws {
            let shards = queue.map { [map.shard(forQueue: $0)] } ?? map.shards
            var pages: [(shard: String, page: Page<JobRecord>)] = []
            for shard in shards {
                let budget = ScanBudget(maxEntries: ScanBudget.cliEntries)
                pages.append((shard.name, try JobAdmin(connection: try connection.connect(shard: shard)).list(state, filter: filter, page: request, budget: budget)))
                JobsCommand.notePartial(budget, shard: shard.name)
            }
            if output.json {
                return printJSON(.object(["state": .string(state.rawValue), "filter": AdminJSON.filter(filter),
                                          "shards": .array(pages.map { entry in
                                              AdminJSON.page(entry.page, extra: ["shard": .string(entry.shard)])
                                          })]))
            }
            let total = pages.reduce(0) { $0 + $1.page.total }
            if pages.allSatisfy({ $0.page.items.isEmpty }) {
                return print(total == 0 ? "no jobs" : "no jobs on page \(request.number) (\(total) in all)")
            }
            let now = Clock.now()
            var table = TextTable(["SHARD", "JID", "STATE", "QUEUE", "CLASS", "ARGS", "WHEN", "INFO"])
            table.maxCellWidth = 48
            for (shard, page) in pages {
                for record in page.items {
                    table.add([shard, record.jid ?? "-", record.state.rawValue, record.queue, record.displayClass ?? "?",
                               DomainJobs.argsRedactor.args(of: record).map { JSONValue.array($0).serialized() } ?? "(invalid)",
                               JobsCommand.when(record, now: now), JobsCommand.info(record)])
                }
            }
            table.print()
            let pageCount = pages.map(\.page.pageCount).max() ?? 1
            print("page \(request.number)/\(max(pageCount, 1)) of each shard, \(total) jobs")
        }
    }

    // MARK: show

    struct Show: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "show",
            abstract: "Show one job: the whole record, its error and decoded backtrace, attempts, progress and why it is not running.")
        @OptionGroup var connection: ConnectionOptions
        @OptionGroup var ledger: LedgerOptions
        @OptionGroup var output: OutputOptions
        @Argument(help: "The job's jid.") var jid: String
        @Option(help: "Only look in this state.") var state: String?

        func run() throws {
            try adminCall {
                let states = try parseState(state, required: false).map { [$0] } ?? JobAdmin.searchOrder
                let record: JobRecord
                do {
                    record = try connection.onShardHolding {
                        let budget = ScanBudget(maxEntries: ScanBudget.cliEntries)
                        defer { JobsCommand.notePartial(budget) }
                        return try JobAdmin(connection: $0).findOne(jid: jid, in: states, budget: budget)
                    }
                } catch let error as AdminError where error.isNotFound && state == nil {
                    // Not in Redis: a finished job is in the ledger or its completion record (`jobs explain`);
                    // otherwise the error as before.
                    let status = try JobsCommand.status(jid: jid, connection: connection, ledger: ledger, warn: false)
                    switch status.explanation {
                    case .done, .completed: break
                    default: throw error
                    }
                    if output.json { return printJSON(JobsCommand.json(jid: jid, status)) }
                    return JobsCommand.printStatus(status, now: Date())
                }
                let status = try JobsCommand.status(jid: jid, connection: connection, ledger: ledger)
                if output.json {
                    guard case .object(var object) = AdminJSON.detail(record) else { return }
                    object["status"] = JobsCommand.json(jid: jid, status)
                    return printJSON(.object(object))
                }
                Show.printDetail(record, now: Clock.now())
                JobsCommand.printStatus(status, now: Date())
            }
        }

        static func printDetail(_ record: JobRecord, now: Double) {
            func line(_ label: String, _ value: String) { print("\(label.padding(toLength: 13, withPad: " ", startingAt: 0))\(value)") }
            line("jid", record.jid ?? "-")
            var state = record.state.rawValue
            switch record.state {
            case .scheduled: state += " (runs at \(Format.time(record.score)) UTC, \(Format.relative(record.score, now: now)))"
            case .retry: state += " (next attempt \(Format.time(record.score)) UTC, \(Format.relative(record.score, now: now)))"
            case .dead: state += " (died \(Format.time(record.score)) UTC, \(Format.relative(record.score, now: now)))"
            case .busy: state += " on \(record.work?.identity ?? "?") thread \(record.work?.thread ?? "?") since \(Format.time(record.work?.runAt)) UTC"
            case .enqueued: break
            }
            line("state", state)
            line("queue", record.queue)
            if let reason = record.invalidReason { line("INVALID", reason) }
            line("class", record.displayClass.map { $0 == record.className ? $0 : "\($0) (\(record.className ?? "?"))" } ?? "-")
            line("args", DomainJobs.argsRedactor.args(of: record).map { JSONValue.array($0).serialized() } ?? "-")
            line("created", Format.time(record.createdAt))
            line("enqueued", Format.time(record.enqueuedAt))
            if let retry = record.item?["retry"] { line("retry", retry.serialized() + (record.retryCount.map { ", retry_count \($0)" } ?? "")) }
            if let errorClass = record.errorClass {
                line("error", "\(errorClass): \(record.errorMessage ?? "")")
                line("failed at", Format.time(record.failedAt))
                if let retried = record.retriedAt { line("retried at", Format.time(retried)) }
            }
            let backtrace = AdminJSON.decodedBacktrace(record)
            if let lines = backtrace.lines {
                print("backtrace")
                for entry in lines { print("  \(entry)") }
            } else if let error = backtrace.error {
                line("backtrace", "cannot decode: \(error)")
            }
            print("payload (secrets and personal data redacted)")
            print("  \(DomainJobs.argsRedactor.text(of: record))")
        }
    }

    // MARK: actions

    /// Which jobs an action applies to: one JID, or `--all --state S` with optional filters.
    struct Target: ParsableArguments {
        @Argument(help: "The job's jid.") var jid: String?
        @Flag(help: "Act on every job in --state (matching --queue/--class/--grep).") var all = false
        @Option(help: "The state to act on (required with --all; with a JID, where to look).") var state: String?
        @Option(help: "With --all: only jobs of this queue.") var queue: String?
        @Option(name: .customLong("class"), help: "With --all: only jobs of this class.") var className: String?
        @Option(help: "With --all: only jobs whose JSON contains this text.") var grep: String?
        @Flag(help: "With --all: do not ask for confirmation (required when stdin is not a terminal).") var yes = false

        var filter: JobFilter { JobFilter(queue: queue, className: className, grep: grep) }
    }

    static func perform(_ action: JobAction, verb: String, target: Target, connection: ConnectionOptions,
                        output: OutputOptions) throws {
        try adminCall {
            if target.all {
                if target.jid != nil { throw CLIError.usage("give a JID or --all, not both") }
                let state = try parseState(target.state, allowed: action.allowedStates)!
                // Several shards: every shard (with --queue, its shard), one after the other; a job
                // moved to a queue stays on its shard (its queue's).
                let map = try connection.shardMap()
                let admins = map.isSingle ? [JobAdmin(connection: try connection.connect())]
                    : try (target.queue.map { [map.shard(forQueue: $0)] } ?? map.shards).map {
                        JobAdmin(connection: try connection.connect(shard: $0))
                    }
                var counts: [Int] = []
                for admin in admins { counts.append(try admin.list(state, filter: target.filter, page: PageRequest(number: 1, size: 1)).total) }
                let matched = counts.reduce(0, +)
                if matched > 0 {
                    let scope = target.filter.isEmpty ? "" : " matching the filter"
                    try Confirmation.require("\(action.rawValue) \(matched) \(state.rawValue) jobs\(scope)", yes: target.yes)
                }
                let progress = BulkProgressLine(verb: verb, expected: matched, state: state)
                var result = BulkResult()
                for (admin, count) in zip(admins, counts) where count > 0 {
                    let part = try admin.performAll(action, state: state, filter: target.filter, progress: progress.show)
                    result.matched += part.matched
                    result.done += part.done
                    result.gone += part.gone
                    result.invalid += part.invalid
                }
                progress.finish()
                if output.json { return printJSON(AdminJSON.bulk(action: action, state: state, filter: target.filter, result: result)) }
                var message = "\(verb) \(result.done) of \(result.matched) \(state.rawValue) jobs"
                if result.gone > 0 { message += "; \(result.gone) were already gone" }
                if result.invalid > 0 { message += "; \(result.invalid) are not valid jobs and were left in place" }
                print(message)
            } else {
                guard let jid = target.jid else { throw CLIError.usage("give the job's JID, or --all --state STATE") }
                if !target.filter.isEmpty { throw CLIError.usage("--queue, --class and --grep only apply with --all") }
                let states = try parseState(target.state, required: false).map { [$0] }
                let record = try connection.onShardHolding { try JobAdmin(connection: $0).perform(action, jid: jid, in: states) }
                let destination: String
                switch action {
                case .retry, .run: destination = "queue \(record.payload?.queue ?? "default")"
                case .kill: destination = "dead"
                case .delete: destination = ""
                }
                if output.json {
                    return printJSON(.object(["action": .string(action.rawValue), "jid": .string(jid),
                                              "from": .string(record.state.rawValue), "queue": .string(record.queue),
                                              "to": destination.isEmpty ? .null : .string(action == .kill ? "dead" : "enqueued")]))
                }
                let what = "\(jid) (\(record.displayClass ?? "?"))"
                print(destination.isEmpty ? "\(verb) \(what) from \(record.location)"
                                          : "\(verb) \(what): \(record.location) → \(destination)")
            }
        }
    }

    /// What distinguishes one action command (`jobs retry|run|kill|delete`) from the others: its name and help,
    /// the admin action, and the past-tense verb of its report.
    protocol ActionKind {
        static var configuration: CommandConfiguration { get }
        static var action: JobAction { get }
        static var verb: String { get }
    }

    /// One action command: the same options (connection, output, `Target`) and `perform`, named by `Kind`.
    struct Action<Kind: ActionKind>: ParsableCommand {
        static var configuration: CommandConfiguration { Kind.configuration }
        @OptionGroup var connection: ConnectionOptions
        @OptionGroup var output: OutputOptions
        @OptionGroup var target: Target
        func run() throws { try JobsCommand.perform(Kind.action, verb: Kind.verb, target: target, connection: connection, output: output) }
    }

    enum Retry: ActionKind {
        static let configuration = CommandConfiguration(
            commandName: "retry", abstract: "Put retry, dead or scheduled jobs back in their queue now.",
            discussion: "Like Ruby's SortedEntry#retry: retry_count is decreased by one, so the manual retry does not use up an attempt.")
        static let action = JobAction.retry, verb = "retried"
    }

    enum Run: ActionKind {
        static let configuration = CommandConfiguration(
            commandName: "run", abstract: "Enqueue scheduled or retry jobs now, unchanged (Ruby's add_to_queue).")
        static let action = JobAction.run, verb = "enqueued"
    }

    enum Kill: ActionKind {
        static let configuration = CommandConfiguration(
            commandName: "kill", abstract: "Move enqueued, scheduled or retry jobs to the dead set.",
            discussion: "Like Ruby's DeadSet#kill: ZADD dead now, then the set is trimmed to 180 days and 10,000 entries.")
        static let action = JobAction.kill, verb = "killed"
    }

    enum Delete: ActionKind {
        static let configuration = CommandConfiguration(
            commandName: "delete", abstract: "Delete enqueued, scheduled, retry or dead jobs.")
        static let action = JobAction.delete, verb = "deleted"
    }
}

/// The progress of a bulk action on one terminal line of stderr, rewritten in place; silent when
/// stderr is not a terminal (scripts and pipes get only the final summary on stdout).
struct BulkProgressLine {
    let verb: String
    let expected: Int
    let state: JobState
    private let enabled = isatty(2) == 1

    init(verb: String, expected: Int, state: JobState) {
        self.verb = verb
        self.expected = expected
        self.state = state
    }

    func show(_ sofar: BulkResult) {
        guard enabled else { return }
        TerminalControl.write("\r\(verb) \(sofar.done) of ~\(expected) \(state.rawValue) jobs…\u{1B}[K", to: 2)
    }

    /// Clears the line before the summary is printed.
    func finish() {
        guard enabled else { return }
        TerminalControl.write("\r\u{1B}[K", to: 2)
    }
}
