import ArgumentParser
import Foundation
import WorkersQueue

/// `workerctl batches ls|show`: parses and prints; the reading is `BatchAdmin` (Queue/Admin).
struct BatchesCommand: ParsableCommand {
    /// How many failed and dead jids `batches show` reads of each list (issue 51, review M5: a batch may hold any
    /// number of jobs); the counts stay exact.
    static let jidLimit = 1000

    static let configuration = CommandConfiguration(
        commandName: "batches",
        abstract: "List and show batches: counts, callbacks, and whether they completed or succeeded (docs/batches.md).",
        subcommands: [List.self, Show.self]
    )

    static func json(_ batch: BatchSummary) -> JSONValue {
        .object([
            "bid": .string(batch.bid), "description": .string(batch.description), "state": .string(batch.state),
            "created_at": Format.iso(batch.createdAt), "total": .int(Int64(batch.total)),
            "pending": .int(Int64(batch.pending)), "failures": .int(Int64(batch.failures)), "dead": .int(Int64(batch.dead)),
            "complete_at": Format.iso(batch.completeAt), "success_at": Format.iso(batch.successAt),
            "on_complete": batch.onComplete.map(JSONValue.string) ?? .null,
            "on_success": batch.onSuccess.map(JSONValue.string) ?? .null,
        ])
    }

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "ls", abstract: "List the newest batches, newest first (of every shard together).")
        @OptionGroup var connection: ConnectionOptions
        @OptionGroup var output: OutputOptions
        @Option(help: "Most batches to list (1...10000).") var limit = 100

        func run() throws {
            try adminCall {
                guard (1...10_000).contains(limit) else { throw CLIError.usage("--limit must be within 1...10000") }
                let shards = try connection.onEveryShard { try BatchAdmin.list($0, limit: limit) }
                let sharded = shards.count > 1
                let batches = BatchAdmin.newest(shards, limit: limit)
                if output.json {
                    return printJSON(.object(["batches": .array(batches.map {
                        AdminJSON.sharded(BatchesCommand.json($0.value), shard: sharded ? $0.shard : nil)
                    })]))
                }
                if batches.isEmpty { return print("no batches") }
                var table = TextTable((sharded ? ["SHARD"] : []) + ["BID", "STATE", "TOTAL", "PENDING", "FAILURES", "DEAD", "CREATED", "DESCRIPTION"])
                for entry in batches {
                    let batch = entry.value
                    table.add((sharded ? [entry.shard] : []) + [batch.bid, batch.state, "\(batch.total)", "\(batch.pending)",
                               "\(batch.failures)", "\(batch.dead)", Format.time(batch.createdAt), batch.description])
                }
                table.print()
            }
        }
    }

    struct Show: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "show", abstract: "Show one batch, with the jids that failed and died.")
        @OptionGroup var connection: ConnectionOptions
        @OptionGroup var output: OutputOptions
        @Argument(help: "Batch id.") var bid: String

        func run() throws {
            try adminCall {
                guard Batches.isValidBid(bid) else { throw CLIError.usage(BatchError.invalidBid(bid).description) }
                // A batch lives on its queues' shard.
                let detail = try connection.onShardHolding { try BatchAdmin.existing($0, bid: bid, limit: BatchesCommand.jidLimit) }
                if detail.isPartial {
                    printPartial("showing at most \(BatchesCommand.jidLimit) of the \(detail.failedCount) failed and \(detail.deadCount) dead jids")
                }
                let batch = detail.summary
                if output.json {
                    guard case .object(var object) = BatchesCommand.json(batch) else { return }
                    object["failed_jids"] = .array(detail.failedJids.map(JSONValue.string))
                    object["dead_jids"] = .array(detail.deadJids.map(JSONValue.string))
                    return printJSON(.object(object))
                }
                print("Batch \(batch.bid)\(batch.description.isEmpty ? "" : " (\(batch.description))"): \(batch.state)")
                print("  created    \(Format.time(batch.createdAt))")
                print("  total \(batch.total)  pending \(batch.pending)  failures \(batch.failures)  dead \(batch.dead)")
                print("  on_complete \(batch.onComplete ?? "-")  fired \(Format.time(batch.completeAt))")
                print("  on_success  \(batch.onSuccess ?? "-")  fired \(Format.time(batch.successAt))")
                if !detail.failedJids.isEmpty { print("  failed jids: \(detail.failedJids.joined(separator: " "))") }
                if !detail.deadJids.isEmpty { print("  dead jids: \(detail.deadJids.joined(separator: " "))") }
            }
        }
    }
}
