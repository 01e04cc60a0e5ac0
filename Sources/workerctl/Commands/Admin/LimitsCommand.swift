import ArgumentParser
import Foundation
import WorkersQueue

/// `workerctl limits ls [--json]`: the declared limits and their live state (logic in Queue/Admin/LimitAdmin.swift).
struct LimitsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "limits",
        abstract: "Show the fleet-wide limiters (docs/limiters.md).",
        subcommands: [List.self]
    )

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "ls",
            abstract: "List declared limits and each live limiter: kind, size, period, use and time to reset.",
            discussion: "A limit appears once a worker has admitted a job of a class that declares it.")
        @OptionGroup var connection: ConnectionOptions
        @OptionGroup var output: OutputOptions

        func run() throws {
            try adminCall {
                let budget = ScanBudget(maxEntries: LimitAdmin.scannedKeys)
                let limits = try LimitAdmin.list(try connection.connect(), budget: budget)
                if budget.exhausted {
                    printPartial("looked at \(budget.scanned) keys and at most \(LimitAdmin.maxInstances) instances; instances may be missing")
                }
                if output.json { return printJSON(.object(["limits": .array(limits.map(Self.json))])) }
                if limits.isEmpty { return print("no limits declared") }
                var table = TextTable(["LIMIT", "KEY", "KIND", "MAX", "PERIOD", "USED", "RESETS IN"])
                for limit in limits {
                    table.add([limit.name, limit.key, limit.kind.rawValue, "\(limit.max)", Format.duration(limit.periodSeconds),
                               Self.used(limit),
                               Format.duration(limit.resetsInSeconds)])
                }
                table.print()
                for limit in limits where limit.invalid != nil {
                    printError("warning: \(limit.name)\(limit.key.isEmpty ? "" : ":" + limit.key): \(limit.invalid ?? "") (shown as invalid)")
                }
            }
        }

        /// `used` as the table shows it: a count, tokens with two decimals, `invalid` when Redis held no number in range.
        static func used(_ limit: LimitSummary) -> String {
            if limit.invalid != nil { return "invalid" }
            return limit.kind == .bucket ? String(format: "%.2f", limit.used)
                : "\(Bounded.int(limit.used, in: 0...Bounded.maxCounter))"
        }

        static func json(_ limit: LimitSummary) -> JSONValue {
            .object(["name": .string(limit.name), "key": .string(limit.key), "kind": .string(limit.kind.rawValue),
                     "max": .int(Int64(limit.max)), "period_s": .double(limit.periodSeconds), "used": .double(limit.used),
                     "resets_in_s": .double(limit.resetsInSeconds),
                     "invalid": AdminJSON.string(limit.invalid)])
        }
    }
}
