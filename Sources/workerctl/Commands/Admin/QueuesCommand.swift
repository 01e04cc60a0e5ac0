import ArgumentParser
import Foundation
import WorkersQueue

struct QueuesCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "queues",
        abstract: "List, inspect, pause, resume and clear queues.",
        subcommands: [List.self, Inspect.self, Pause.self, Resume.self, Clear.self]
    )

    static func table(_ queues: [QueueSummary]) -> TextTable {
        var table = TextTable(["QUEUE", "SIZE", "LATENCY", "PAUSED"])
        for queue in queues {
            table.add([queue.name, "\(queue.size)", Format.duration(queue.latency), queue.paused ? "paused" : ""])
        }
        return table
    }

    /// With several shards: the same table with a SHARD column first (docs/sharding.md).
    static func table(sharded: [(shard: String, queue: QueueSummary)]) -> TextTable {
        var table = TextTable(["SHARD", "QUEUE", "SIZE", "LATENCY", "PAUSED"])
        for (shard, queue) in sharded {
            table.add([shard, queue.name, "\(queue.size)", Format.duration(queue.latency), queue.paused ? "paused" : ""])
        }
        return table
    }

    /// Every shard's largest queues, shard by shard (in the map's order), each shard's sorted by name.
    static func listSharded(_ map: ShardMap, connection: ConnectionOptions) throws -> [(shard: String, queue: QueueSummary)] {
        var all: [(shard: String, queue: QueueSummary)] = []
        for shard in map.shards {
            let sample = try QueueAdmin.largest(try connection.connect(shard: shard), limit: listLimit)
            notePartial(sample, shard: shard.name)
            all += sample.queues.map { (shard.name, $0) }
        }
        return all
    }

    /// How many queues `queues ls` lists per shard: the largest among the first `QueueAdmin.largestNames` names
    /// read (issue 51, review M5: `queues` may hold any number of names a producer added).
    static let listLimit = 1000

    /// Says on stderr that the listing is not every queue.
    static func notePartial(_ sample: QueueAdmin.Sample, shard: String? = nil) {
        guard sample.partial || sample.total > sample.queues.count else { return }
        printPartial("\(shard.map { "shard \($0): " } ?? "")showing \(sample.queues.count) of \(sample.partial ? "≥ " : "")\(sample.total) queues"
                     + (sample.partial ? " (the largest of the first \(QueueAdmin.largestNames) names read)" : " (the largest)"))
    }

    static func validName(_ name: String) throws -> String {
        do { try JobClient.validateQueue(name) } catch { throw CLIError.usage(error.description) }
        return name
    }

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "ls", abstract: "List queues with size, latency and paused state.")
        @OptionGroup var connection: ConnectionOptions
        @OptionGroup var output: OutputOptions

        func run() throws {
            try adminCall {
                let map = try connection.shardMap()
                if !map.isSingle {
                    let queues = try QueuesCommand.listSharded(map, connection: connection)
                    if output.json {
                        return printJSON(.object(["queues": .array(queues.map { AdminJSON.queue($0.queue, shard: $0.shard) })]))
                    }
                    if queues.isEmpty { return print("no queues") }
                    return QueuesCommand.table(sharded: queues).print()
                }
                let sample = try QueueAdmin.largest(try connection.connect(), limit: QueuesCommand.listLimit)
                QueuesCommand.notePartial(sample)
                let queues = sample.queues
                if output.json { return printJSON(.object(["queues": .array(queues.map(AdminJSON.queue))])) }
                if queues.isEmpty { return print("no queues") }
                QueuesCommand.table(queues).print()
            }
        }
    }

    struct Inspect: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "inspect",
                                                        abstract: "Show a queue and a page of its jobs (newest first).")
        @OptionGroup var connection: ConnectionOptions
        @OptionGroup var output: OutputOptions
        @Argument(help: "Queue name.") var queue: String
        @Option(help: "Page number, from 1.") var page = 1
        @Option(help: "Jobs per page (1...1000).") var size = 25

        func run() throws {
            try adminCall {
                let name = try QueuesCommand.validName(queue)
                let request = try pageRequest(page: page, size: size)
                let redis = try connection.connect(queue: name)
                let summary = try QueueAdmin.summary(redis, name: name)
                let jobs = try JobQueue(name).page(redis, page: request)
                if output.json { return printJSON(AdminJSON.page(jobs, extra: ["queue": AdminJSON.queue(summary)])) }
                print("Queue \(name): \(summary.size) jobs, latency \(Format.duration(summary.latency))\(summary.paused ? ", PAUSED" : "")")
                JobsCommand.printTable(jobs, now: Clock.now())
            }
        }
    }

    struct Pause: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "pause", abstract: "Pause a queue: our workers stop fetching from it.",
            discussion: """
                Adds the name to the Redis SET `paused`. Workers of this system skip paused queues; \
                Ruby Sidekiq OSS processes IGNORE it and keep fetching (pausing is a Sidekiq Pro feature).
                """)
        @OptionGroup var connection: ConnectionOptions
        @Argument(help: "Queue name.") var queue: String

        func run() throws {
            try adminCall {
                let name = try QueuesCommand.validName(queue)
                let redis = try connection.connect(queue: name)
                let known = try QueueAdmin.exists(redis, name: name)
                let changed = try QueueAdmin.pause(redis, name: name)
                print(changed ? "paused \(name)" : "\(name) was already paused")
                if !known { printError("note: no queue \(name) exists yet; the pause applies when it does") }
            }
        }
    }

    struct Resume: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "resume", abstract: "Resume a paused queue.")
        @OptionGroup var connection: ConnectionOptions
        @Argument(help: "Queue name.") var queue: String

        func run() throws {
            try adminCall {
                let name = try QueuesCommand.validName(queue)
                let changed = try QueueAdmin.resume(try connection.connect(queue: name), name: name)
                print(changed ? "resumed \(name)" : "\(name) was not paused")
            }
        }
    }

    struct Clear: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "clear", abstract: "Delete every job of a queue and forget the queue name.",
            discussion: "Like Ruby's Queue#clear: MULTI UNLINK queue:NAME, SREM queues NAME. Asks on a terminal; needs --yes otherwise.")
        @OptionGroup var connection: ConnectionOptions
        @Argument(help: "Queue name.") var queue: String
        @Flag(help: "Do not ask for confirmation.") var yes = false

        func run() throws {
            try adminCall {
                let name = try QueuesCommand.validName(queue)
                let redis = try connection.connect(queue: name)
                let size = try JobQueue(name).size(redis)
                try Confirmation.require("clear queue \(name) (\(size) jobs)", yes: yes)
                let removed = try QueueAdmin.clear(redis, name: name)
                print("cleared \(name): \(removed) jobs deleted")
            }
        }
    }
}
