import ArgumentParser
import Foundation
import WorkersQueue
import WorkersScheduler

struct CronCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "cron",
        abstract: "List, inspect, enable, disable, run and delete cron entries (sidekiq-cron's keys in Redis).",
        subcommands: [List.self, History.self, Enable.self, Disable.self, Run.self, Delete.self]
    )

    /// Runs a cron command body: a missing entry or a Redis failure ⇒ exit 1.
    static func call<T>(_ body: () throws -> T) throws -> T {
        do { return try body() } catch let error as CLIError {
            throw error
        } catch let error as CronStoreError {
            throw CLIError.runtime(error.description)
        } catch let error as RedisError {
            throw CLIError.runtime(error.description)
        } catch {
            throw CLIError.runtime("\(error)")
        }
    }

    static func validName(_ name: String) throws -> String {
        guard CronKeys.isValidName(name) else { throw CLIError.usage("'\(name)' is not a cron entry name") }
        return name
    }

    static func entryJSON(_ record: CronRecord, now: Date) -> JSONValue {
        func text(_ value: String?) -> JSONValue { value.map { .string($0) } ?? .null }
        return .object([
            "name": .string(record.name),
            "status": .string(record.status.rawValue),
            "cron": .string(record.cron),
            "timezone": .string(record.timezone),
            "class": text(record.className),
            "queue": .string(record.queue),
            "args": .array(record.args),
            "description": text(record.description),
            "catch_up": text(record.catchUp),
            "pass_tick": text(record.passTick),
            "last_tick": text(record.lastTick),
            "last_enqueue_time": text(record.lastEnqueueTime),
            "next_tick": text(record.nextTick(after: now).map(TickFormat.iso8601UTC)),
            "managed": .bool(record.isOurs),
        ])
    }

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "ls", abstract: "List cron entries with status, last and next tick.")
        @OptionGroup var connection: ConnectionOptions
        @OptionGroup var output: OutputOptions

        func run() throws {
            try CronCommand.call {
                let shards = try connection.onEveryShard { try CronStore(connection: $0).list() }
                let sharded = shards.count > 1
                let records = shards.flatMap { entry in entry.value.map { OnShard(shard: entry.shard, value: $0) } }
                let now = Date()
                if output.json {
                    return printJSON(.object(["entries": .array(records.map {
                        AdminJSON.sharded(CronCommand.entryJSON($0.value, now: now), shard: sharded ? $0.shard : nil)
                    })]))
                }
                if records.isEmpty { return print("no cron entries") }
                var table = TextTable((sharded ? ["SHARD"] : [])
                                      + ["NAME", "STATUS", "CRON", "TZ", "CLASS", "QUEUE", "CATCH-UP", "LAST TICK", "NEXT TICK"])
                for entry in records {
                    let record = entry.value
                    table.add((sharded ? [entry.shard] : []) + [record.name, record.status.rawValue, record.cron, record.timezone,
                               record.className ?? "-", record.queue, record.catchUp ?? "-", record.lastTick ?? "-",
                               record.nextTick(after: now).map(TickFormat.iso8601UTC) ?? "-"])
                }
                table.print()
            }
        }
    }

    struct History: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "history", abstract: "Show an entry's recent fires, newest first.")
        @OptionGroup var connection: ConnectionOptions
        @OptionGroup var output: OutputOptions
        @Argument(help: "Entry name.") var name: String

        func run() throws {
            try CronCommand.call {
                let entryName = try CronCommand.validName(name)
                let items = try connection.onShardHolding { try CronStore(connection: $0).history(name: entryName) }
                if output.json {
                    return printJSON(.object([
                        "name": .string(entryName),
                        "history": .array(items.map { item in
                            .object(["jid": .string(item.jid), "enqueued": .string(item.enqueued),
                                     "tick": item.tick.map { .string($0) } ?? .null, "manual": .bool(item.manual),
                                     "backfill": .bool(item.backfill)])
                        }),
                    ]))
                }
                if items.isEmpty { return print("\(entryName): no fires recorded") }
                var table = TextTable(["ENQUEUED", "TICK", "JID"])
                for item in items {
                    let tick = item.tick.map { item.backfill ? "\($0) (backfill)" : $0 } ?? (item.manual ? "(cron run)" : "-")
                    table.add([item.enqueued, tick, item.jid])
                }
                table.print()
            }
        }
    }

    struct Enable: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "enable", abstract: "Enable an entry (status=enabled).",
            discussion: "Ticks that passed while the entry was disabled are not caught up.")
        @OptionGroup var connection: ConnectionOptions
        @Argument(help: "Entry name.") var name: String

        func run() throws { try CronCommand.setStatus(name, .enabled, connection) }
    }

    struct Disable: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "disable", abstract: "Disable an entry (status=disabled): schedulers stop firing it.",
            discussion: "Kept across scheduler restarts and schedule-file syncs until `cron enable`.")
        @OptionGroup var connection: ConnectionOptions
        @Argument(help: "Entry name.") var name: String

        func run() throws { try CronCommand.setStatus(name, .disabled, connection) }
    }

    static func setStatus(_ name: String, _ status: CronStatus, _ connection: ConnectionOptions) throws {
        try call {
            let entryName = try validName(name)
            let previous = try connection.onShardHolding { try CronStore(connection: $0).setStatus(name: entryName, status, now: Date()) }
            print(previous == status ? "\(entryName) was already \(status.rawValue)" : "\(status.rawValue) \(entryName)")
        }
    }

    struct Delete: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "delete", abstract: "Delete an entry and its history from Redis.",
            discussion: """
                Running schedulers stop firing it at their next round. A scheduler started with the entry still in \
                its schedule file creates it again: remove it from the file too.
                """)
        @OptionGroup var connection: ConnectionOptions
        @Argument(help: "Entry name.") var name: String

        func run() throws {
            try CronCommand.call {
                let entryName = try CronCommand.validName(name)
                try connection.onShardHolding { try CronStore(connection: $0).delete(name: entryName) }
                print("deleted \(entryName)")
            }
        }
    }

    struct Run: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "run", abstract: "Enqueue an entry's job now, or fire one past tick (--tick) exactly once.",
            discussion: """
                Without --tick: uses the class, queue and args stored in Redis, without the tick argument (pass_tick): \
                the job uses its own default; not counted as a tick. Prints the jid.
                With --tick T (ISO-8601, e.g. 2026-11-20T00:15:00Z): fires that past tick of the entry's cron (in \
                its time zone) as the scheduler would — same jid, same claim, args with the tick argument — unless \
                it was already fired (by a scheduler or an earlier --tick): then prints so and exits 0. A T that \
                is not a past tick, or older than the 24 h claim record and not after the entry's last tick, \
                exits 2. Works on disabled entries too.
                """)
        @OptionGroup var connection: ConnectionOptions
        @Argument(help: "Entry name.") var name: String
        @Option(name: .long, help: "A past tick to fire, ISO-8601 (2026-11-20T00:15:00Z or with an offset).") var tick: String?

        func run() throws {
            try CronCommand.call {
                let entryName = try CronCommand.validName(name)
                // The entry lives on its queue's shard (one cron runner per shard), where its job is pushed.
                guard let tick else {
                    let jid = try connection.onShardHolding { try CronStore(connection: $0).runNow(name: entryName, now: Date()) }
                    return print("enqueued \(entryName) as \(jid)")
                }
                guard let instant = TickFormat.parse(tick) else {
                    throw CLIError.usage("--tick '\(tick)' is not an ISO-8601 time such as 2026-11-20T00:15:00Z")
                }
                let tickText = TickFormat.iso8601UTC(instant)
                do {
                    switch try connection.onShardHolding({ try CronStore(connection: $0).backfill(name: entryName, tick: instant, now: Date()) }) {
                    case .fired(let jid): print("enqueued \(entryName) tick \(tickText) as \(jid)")
                    case .alreadyFired(let jid): print("\(entryName) tick \(tickText) was already fired (\(jid)); nothing enqueued")
                    }
                } catch let error as CronBackfillError {
                    throw CLIError.usage(error.description)
                }
            }
        }
    }
}
