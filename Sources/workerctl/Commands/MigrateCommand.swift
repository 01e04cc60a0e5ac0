import ArgumentParser
import WorkersBenchJobs
import Foundation
import Logging
import WorkersStorage

struct MigrateCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "migrate",
        abstract: "Apply pending PostgreSQL migrations (once, in order, under an advisory lock).",
        discussion: "With --status: list applied and pending migrations; exit 1 if any is pending or modified."
    )

    @OptionGroup var database: DatabaseOptions

    @Flag(name: .long, help: "Only show what is applied and what is pending.")
    var status = false

    @Flag(name: .long, help: "Print JSON.")
    var json = false

    @Flag(name: .customLong("bench-tables"), help: ArgumentHelp(
        "After the migrations, also create the bench/test table probe_rows (for `worker --bench-jobs`). Never in production.",
        visibility: .hidden))
    var benchTables = false

    func run() throws {
        let url = database.resolvedURL()
        let connection: PostgresConnection
        do { connection = try PostgresConnection(url: url) } catch {
            throw CLIError.runtime("cannot connect to PostgreSQL at \(PostgresURL.redacted(url)): \(error)")
        }
        do {
            // The runtime's line (workers_migrations) first, then the app's (schema_migrations).
            let migrators = try BundledSchema.migrators(logger: Logger(label: "workerctl.migrate"))
            if status {
                let states = try migrators.map { ($0, try $0.status(on: connection)) }
                let upToDate = states.allSatisfy { $0.1.isUpToDate }
                if json {
                    func entries(_ items: [(Int, String)]) -> String {
                        items.map { "{\"version\":\($0.0),\"name\":\"\($0.1)\"}" }.joined(separator: ",")
                    }
                    let lines = states.map { migrator, state in
                        "{\"table\":\"\(migrator.table.name)\",\"line\":\(migrator.table.line.map { "\"\($0)\"" } ?? "null"),"
                            + "\"applied\":[\(entries(state.applied.map { ($0.version, $0.name) }))],"
                            + "\"pending\":[\(entries(state.pending.map { ($0.version, $0.name) }))],"
                            + "\"modified\":\(state.modified),\"unknown\":\(state.unknown),\"retired\":\(state.retired),"
                            + "\"up_to_date\":\(state.isUpToDate)}"
                    }
                    print("{\"lines\":[\(lines.joined(separator: ","))],\"up_to_date\":\(upToDate)}")
                } else {
                    for (migrator, state) in states {
                        print("\(migrator.table):")
                        for item in state.applied { print(String(format: "applied  %04d %@", item.version, item.name)) }
                        for item in state.pending { print(String(format: "pending  %04d %@", item.version, item.name)) }
                        for version in state.modified { print(String(format: "MODIFIED %04d (file changed after it was applied)", version)) }
                        for version in state.retired {
                            print(String(format: "retired  %04d %@", version, migrator.retired[version] ?? ""))
                        }
                        for version in state.unknown { print(String(format: "unknown  %04d (in the database, not in this build)", version)) }
                    }
                    print(upToDate ? "schema is up to date" : "schema is behind: run `workerctl migrate`")
                }
                if !upToDate { throw ExitCode(1) }
                return
            }
            var applied: [(MigrationTable, Migration)] = []
            for migrator in migrators {
                applied += try migrator.migrate(on: connection).map { (migrator.table, $0) }
            }
            if applied.isEmpty { print("schema is up to date") }
            for (table, item) in applied { print(String(format: "applied %04d %@ (%@)", item.version, item.name, table.name)) }
            if benchTables {
                try BenchSchema.create(on: connection)
                print("bench tables present (probe_rows)")
            }
        } catch let error as PostgresError {
            throw CLIError.runtime("migration failed: \(error)")
        }
    }
}
