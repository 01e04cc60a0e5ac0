import ArgumentParser
import Foundation
import WorkersOutbox
import WorkersQueue
import WorkersStorage

/// `workerctl outbox status`: the transactional outbox at a glance (docs/outbox.md). The reading is
/// `OutboxAdmin` (Outbox); this only parses and prints. The relay itself is `workerctl relay`.
struct OutboxCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "outbox",
        abstract: "Show the transactional outbox (job_outbox): rows waiting for the relay, refused, pushed again.",
        subcommands: [Status.self]
    )

    struct Status: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "status",
            abstract: "Counts of job_outbox rows, and with --list the rows of one kind.")
        @OptionGroup var database: DatabaseOptions
        @OptionGroup var output: OutputOptions
        @Option(help: "Also list rows: pending (oldest first), errored (newest first) or recovered.") var list: String?
        @Option(help: "Most rows to list (1...1000).") var limit = 20

        func run() throws {
            let kind = try list.map { name -> OutboxEntryKind in
                guard let kind = OutboxEntryKind(rawValue: name) else {
                    throw CLIError.usage("--list must be one of \(OutboxEntryKind.allCases.map(\.rawValue).joined(separator: ", "))")
                }
                return kind
            }
            guard (1...1000).contains(limit) else { throw CLIError.usage("--limit must be within 1...1000") }
            let url = database.resolvedURL()
            let connection: PostgresConnection
            do { connection = try PostgresConnection(url: url) } catch {
                throw CLIError.runtime("cannot connect to PostgreSQL at \(PostgresURL.redacted(url)): \(error)")
            }
            defer { connection.close() }
            let summary: OutboxSummary
            let entries: [OutboxEntry]
            do {
                summary = try OutboxAdmin.summary(connection)
                entries = try kind.map { try OutboxAdmin.entries(connection, $0, limit: limit) } ?? []
            } catch { throw CLIError.runtime("cannot read job_outbox: \(error)") }
            if output.json { return printJSON(Self.json(summary, kind: kind, entries: entries)) }
            if let warning = summary.noRelayWarning { print("WARNING: \(warning)") }
            let about = summary.estimated ? "~" : ""
            print("relays live \(summary.liveRelays)  pending \(summary.pending)  oldest \(summary.oldestPendingAge.map { Format.duration($0.inSeconds) } ?? "-")  "
                  + "refused \(summary.errored)  pushed (kept) \(about)\(summary.pushedKept)  last hour \(about)\(summary.pushedLastHour)  "
                  + "pushed again \(summary.recovered)  last push \(Format.time(summary.lastPushedAt?.timeIntervalSince1970))")
            guard let kind else { return }
            if entries.isEmpty { return print("no \(kind.rawValue) rows") }
            var table = TextTable(["ID", "JID", "CLASS", "QUEUE", "COMMITTED", kind == .errored ? "ERROR" : kind == .recovered ? "TIMES" : "RUN AT"])
            for entry in entries {
                let last = kind == .errored ? entry.error ?? "" : kind == .recovered ? "\(entry.recoveredCount)" : Format.time(entry.runAt?.timeIntervalSince1970)
                table.add(["\(entry.id)", entry.jid, entry.className, entry.queue, Format.time(entry.createdAt.timeIntervalSince1970), last])
            }
            table.print()
        }

        static func json(_ summary: OutboxSummary, kind: OutboxEntryKind?, entries: [OutboxEntry]) -> JSONValue {
            var object: JSONObject = [
                "pending": .int(Int64(summary.pending)), "oldest_pending_age": AdminJSON.number(summary.oldestPendingAge?.inSeconds),
                "errored": .int(Int64(summary.errored)), "pushed_kept": .int(Int64(summary.pushedKept)),
                "pushed_last_hour": .int(Int64(summary.pushedLastHour)), "recovered": .int(Int64(summary.recovered)),
                "last_pushed_at": Format.iso(summary.lastPushedAt?.timeIntervalSince1970), "live_relays": .int(Int64(summary.liveRelays)),
                "waiting_without_relay": .bool(summary.waitingWithoutRelay), "estimated": .bool(summary.estimated),
            ]
            if let kind {
                object["list"] = .string(kind.rawValue)
                object["rows"] = .array(entries.map { entry in
                    .object(["id": .int(Int64(entry.id)), "jid": .string(entry.jid), "class": .string(entry.className),
                             "queue": .string(entry.queue), "args": (try? JSONValue.parse(entry.args)).map(ArgsRedactor.redactingSensitiveKeys) ?? .string("(not JSON)"),
                             "created_at": Format.iso(entry.createdAt.timeIntervalSince1970), "run_at": Format.iso(entry.runAt?.timeIntervalSince1970),
                             "pushed_at": Format.iso(entry.pushedAt?.timeIntervalSince1970), "error": AdminJSON.string(entry.error),
                             "recovered_count": .int(Int64(entry.recoveredCount)), "recovered_at": Format.iso(entry.recoveredAt?.timeIntervalSince1970)])
                })
            }
            return .object(object)
        }
    }
}
