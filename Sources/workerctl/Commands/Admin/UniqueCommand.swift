import ArgumentParser
import Foundation
import WorkersQueue

/// `workerctl unique ls|show|release`: the unique locks (docs/unique-jobs.md). Logic in
/// `Queue/Admin/UniqueAdmin.swift`; this only parses and prints.
struct UniqueCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "unique",
        abstract: "List, show and release unique-job locks.",
        subcommands: [List.self, Show.self, Release.self]
    )

    static func json(_ info: UniqueLockInfo) -> JSONValue {
        .object([
            "lock": .string(info.lock.redisKey),
            "digest": .string(info.lock.digest),
            "jid": .string(info.jid),
            "ttl": AdminJSON.number(info.ttl),
            "class": AdminJSON.string(info.className),
            "queue": AdminJSON.string(info.queue),
            "until": AdminJSON.string(info.until),
            "unique_for": AdminJSON.number(info.uniqueFor),
            "owner_record": .bool(info.ownerRecordMatches),
        ])
    }

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "ls", abstract: "List held unique locks.")
        @OptionGroup var connection: ConnectionOptions
        @OptionGroup var output: OutputOptions

        func run() throws {
            try adminCall {
                let shards = try connection.onEveryShard { redis in
                    let admin = UniqueAdmin(connection: redis)
                    let budget = ScanBudget(maxEntries: UniqueAdmin.scannedKeys)
                    let locks = try admin.list(budget: budget)
                    if budget.exhausted {
                        printPartial("looked at \(budget.scanned) keys and at most \(UniqueAdmin.maxLocks) locks; locks may be missing")
                    }
                    return (locks: locks, dropped: try admin.droppedCount())
                }
                let sharded = shards.count > 1
                let locks = shards.flatMap { entry in entry.value.locks.map { OnShard(shard: entry.shard, value: $0) } }
                let dropped = shards.reduce(0) { $0 + $1.value.dropped }
                if output.json {
                    return printJSON(.object(["locks": .array(locks.map { AdminJSON.sharded(UniqueCommand.json($0.value), shard: sharded ? $0.shard : nil) }),
                                              "duplicates_dropped": .int(Int64(dropped))]))
                }
                if locks.isEmpty {
                    print("no unique locks held (\(dropped) duplicates dropped at fetch so far)")
                    return
                }
                var table = TextTable((sharded ? ["SHARD"] : []) + ["LOCK", "JID", "CLASS", "QUEUE", "UNTIL", "TTL"])
                for entry in locks {
                    let lock = entry.value
                    table.add((sharded ? [entry.shard] : []) + [String(lock.lock.redisKey.prefix(23)) + "…", lock.jid, lock.className ?? "?",
                               lock.queue ?? "?", lock.until ?? "?", lock.ttl.map { Format.duration($0) } ?? "none"])
                }
                table.print()
                print("\(locks.count) locks; \(dropped) duplicates dropped at fetch so far")
            }
        }
    }

    struct Show: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "show", abstract: "Show one lock (by unique:<digest>, digest, or owning jid) and where its job is.")
        @OptionGroup var connection: ConnectionOptions
        @OptionGroup var output: OutputOptions
        @Argument(help: "\(Keys.uniqueLock("<digest>")), the digest, or a jid.") var lock: String

        func run() throws {
            try adminCall {
                // The lock and its job are on the queue's shard.
                let (info, records) = try connection.onShardHolding { redis in
                    let info = try UniqueAdmin(connection: redis).held(lock)
                    let budget = ScanBudget(maxEntries: ScanBudget.cliEntries)
                    defer { JobsCommand.notePartial(budget) }
                    return (info, try JobAdmin(connection: redis).find(jid: info.jid, budget: budget))
                }
                if output.json {
                    guard case .object(var object) = UniqueCommand.json(info) else { return }
                    object["job"] = .array(records.map(AdminJSON.summary))
                    return printJSON(.object(object))
                }
                print("lock      \(info.lock.redisKey)")
                print("owner     \(info.jid)\(info.ownerRecordMatches ? "" : " (no owner record: only the TTL frees it)")")
                print("class     \(info.className ?? "?")  queue \(info.queue ?? "?")")
                print("until     \(info.until ?? "?")  unique_for \(info.uniqueFor.map { Format.duration($0) } ?? "?")")
                print("ttl       \(info.ttl.map { Format.duration($0) } ?? "none")")
                print("job       \(records.isEmpty ? "not found in any queue or set (gone: the lock can be released)" : records.map(\.location).joined(separator: ", "))")
            }
        }
    }

    struct Release: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "release",
            abstract: "Delete a lock whoever holds it (repair: for a lock whose job is gone).",
            discussion: "A live job whose lock is released keeps running; a duplicate may then be pushed and run too.")
        @OptionGroup var connection: ConnectionOptions
        @OptionGroup var output: OutputOptions
        @Argument(help: "\(Keys.uniqueLock("<digest>")), the digest, or a jid.") var lock: String

        func run() throws {
            try adminCall {
                let released: (key: UniqueLockKey, holder: String?)
                do {
                    released = try connection.onShardHolding { redis in
                        let admin = UniqueAdmin(connection: redis)
                        let held = try admin.held(lock).lock
                        return (held, try admin.release(held))
                    }
                } catch AdminError.uniqueLockNotHeld(let missing) {
                    // No shard holds it: `--json` says so (released false), the table form fails.
                    guard output.json, let parsed = UniqueAdmin.parseLock(missing) else { throw AdminError.uniqueLockNotHeld(lock: missing) }
                    released = (parsed, nil)
                }
                let (key, holder) = released
                if output.json {
                    return printJSON(.object(["lock": .string(key.redisKey), "released": .bool(holder != nil),
                                              "jid": AdminJSON.string(holder)]))
                }
                guard let holder else { throw CLIError.runtime("\(key.redisKey) is not held") }
                print("released \(key.redisKey) (held by \(holder))")
            }
        }
    }
}
