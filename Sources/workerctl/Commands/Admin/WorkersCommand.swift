import ArgumentParser
import Foundation
import WorkersQueue

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
                let map = try connection.shardMap()
                if !map.isSingle { return try runSharded(map) }
                let budget = ScanBudget(maxEntries: Stats.sampleProcesses)
                let processes = try ProcessRegistry.list(try connection.connect(), budget: budget)
                if budget.exhausted { printPartial("showing the first \(processes.count) processes read of more (at most \(Stats.sampleProcesses))") }
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

        /// Several shards: a process is listed once per shard it serves (its registry entry lives on
        /// each), with a SHARD column; JSON entries gain `"shard"`.
        private func runSharded(_ map: ShardMap) throws {
            var all: [(shard: String, process: ProcessEntry)] = []
            for shard in map.shards {
                let budget = ScanBudget(maxEntries: Stats.sampleProcesses)
                all += try ProcessRegistry.list(try connection.connect(shard: shard), budget: budget).map { (shard.name, $0) }
                if budget.exhausted { printPartial("shard \(shard.name): showing the first \(Stats.sampleProcesses) processes read of more") }
            }
            if output.json {
                return printJSON(.object(["processes": .array(all.map { AdminJSON.sharded(AdminJSON.process($0.process), shard: $0.shard) })]))
            }
            if all.isEmpty { return print("no processes") }
            let now = Clock.now()
            var table = TextTable(["SHARD", "IDENTITY", "HOST", "PID", "CONCURRENCY", "BUSY", "STARTED", "LAST BEAT", "QUIET", "QUEUES"])
            for (shard, p) in all {
                table.add([shard, p.identity, p.hostname, "\(p.pid)", "\(p.concurrency)", "\(p.busy)",
                           Format.relative(p.startedAt, now: now), Format.relative(p.beat, now: now),
                           p.quiet ? "quiet" : "", p.queues.joined(separator: ",")])
            }
            table.print()
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
            let map = try connection.shardMap()
            if !map.isSingle, target.all {
                // A process serving several shards reads its signal list on each; one signal per shard
                // is harmless (quiet and stop are idempotent).
                if target.identity != nil { throw CLIError.usage("give an identity or --all, not both") }
                var count = 0
                for shard in map.shards { count += try ProcessRegistry.list(try connection.connect(shard: shard)).count }
                if count > 0 { try Confirmation.require("\(verb) \(count) process entries on \(map.shards.count) shards", yes: target.yes) }
                var asked = 0
                for shard in map.shards { asked += try ProcessAdmin.sendAll(signal, try connection.connect(shard: shard)).count }
                print("asked \(asked) process entries to \(verb)")
                return
            }
            if !map.isSingle {
                guard let identity = target.identity else { throw CLIError.usage("give a process identity, or --all") }
                let resolved = try connection.onShardHolding { try ProcessAdmin.send(signal, to: identity, $0) }
                print("asked \(resolved) to \(verb) (\(signal.rawValue); it acts at its next heartbeat)")
                return
            }
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
                let map = try connection.shardMap()
                var removed = 0
                for shard in map.shards {
                    removed += try ProcessRegistry.prune(map.isSingle ? try connection.connect() : try connection.connect(shard: shard))
                }
                if output.json { return printJSON(.object(["pruned": .int(Int64(removed))])) }
                print("pruned \(removed) dead processes")
            }
        }
    }
}
