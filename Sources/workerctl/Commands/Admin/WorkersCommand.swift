import ArgumentParser
import Foundation
import Queue

struct WorkersCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "workers",
        abstract: "List worker processes (ours and Ruby Sidekiq's), quiet or stop them, prune dead entries.",
        subcommands: [List.self, Quiet.self, Stop.self, Prune.self]
    )

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "ls", abstract: "List live processes (entries whose heartbeat hash expired are skipped).")
        @OptionGroup var connection: ConnectionOptions
        @OptionGroup var output: OutputOptions

        func run() throws {
            try adminCall {
                let processes = try ProcessRegistry.list(try connection.connect())
                if output.json { return printJSON(.object(["processes": .array(processes.map(AdminJSON.process))])) }
                if processes.isEmpty { return print("no processes") }
                let now = Clock.now()
                var table = TextTable(["IDENTITY", "HOST", "PID", "CONCURRENCY", "BUSY", "STARTED", "LAST BEAT", "QUIET", "QUEUES"])
                for p in processes {
                    table.add([p.identity, p.hostname, "\(p.pid)", "\(p.concurrency)", "\(p.busy)",
                               Format.relative(p.startedAt, now: now), Format.relative(p.beat, now: now),
                               p.quiet ? "quiet" : "", p.queues.joined(separator: ",")])
                }
                table.print()
            }
        }
    }

    /// Identity (or unique prefix) or `--all`.
    struct Target: ParsableArguments {
        @Argument(help: "Process identity (HOST:PID:NONCE) or a unique prefix of it.") var identity: String?
        @Flag(help: "Every live process.") var all = false
        @Flag(help: "With --all: do not ask for confirmation (required when stdin is not a terminal).") var yes = false
    }

    static func send(_ signal: ProcessAdmin.Signal, verb: String, target: Target, connection: ConnectionOptions) throws {
        try adminCall {
            let redis = try connection.connect()
            if target.all {
                if target.identity != nil { throw CLIError.usage("give an identity or --all, not both") }
                let count = try ProcessRegistry.list(redis).count
                if count > 0 { try Confirmation.require("\(verb) \(count) processes", yes: target.yes) }
                let identities = try ProcessAdmin.sendAll(signal, redis)
                print("asked \(identities.count) processes to \(verb)")
            } else {
                guard let identity = target.identity else { throw CLIError.usage("give a process identity, or --all") }
                let resolved = try ProcessAdmin.send(signal, to: identity, redis)
                print("asked \(resolved) to \(verb) (\(signal.rawValue); it acts at its next heartbeat)")
            }
        }
    }

    struct Quiet: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "quiet", abstract: "Stop a process fetching new jobs (Sidekiq's quiet, signal TSTP).",
            discussion: "Sent through the IDENTITY-signals list, so it works for Ruby Sidekiq processes too.")
        @OptionGroup var connection: ConnectionOptions
        @OptionGroup var target: Target
        func run() throws { try WorkersCommand.send(.quiet, verb: "quiet", target: target, connection: connection) }
    }

    struct Stop: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "stop", abstract: "Shut a process down gracefully (Sidekiq's stop, signal TERM).",
            discussion: "Sent through the IDENTITY-signals list, so it works for Ruby Sidekiq processes too.")
        @OptionGroup var connection: ConnectionOptions
        @OptionGroup var target: Target
        func run() throws { try WorkersCommand.send(.stop, verb: "stop", target: target, connection: connection) }
    }

    struct Prune: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "prune", abstract: "Remove processes whose heartbeat expired from the process set (like Ruby's ProcessSet cleanup).")
        @OptionGroup var connection: ConnectionOptions
        @OptionGroup var output: OutputOptions

        func run() throws {
            try adminCall {
                let removed = try ProcessRegistry.prune(try connection.connect())
                if output.json { return printJSON(.object(["pruned": .int(Int64(removed))])) }
                print("pruned \(removed) dead processes")
            }
        }
    }
}
