import ArgumentParser
import Foundation
import Jobs
import Queue
import Storage
import SubjectKeys
import Workers

/// `workerctl keys …`: the key-encryption key of personal job arguments (docs/jobs-privacy.md, "Rotation").
struct KeysCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "keys",
        abstract: "Key-encryption key (KEK) of encrypted personal job arguments.",
        subcommands: [Rotate.self, NewKEK.self, ScrubErrors.self]
    )

    struct Rotate: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "rotate",
            abstract: "Re-wrap every subject key under WORKERS_KEK (the old KEK in WORKERS_KEK_PREVIOUS); then destroy the old KEK.")

        @OptionGroup var database: DatabaseOptions
        @Option(name: .long, help: "Keys re-wrapped per committed transaction (an erasure waits at most one).")
        var batchSize = SubjectKeyStore.rotationBatchSize

        func run() throws {
            guard let configuration = try SubjectKeysSetup.configuration() else {
                throw CLIError.usage("set WORKERS_KEK (the new KEK) and WORKERS_KEK_PREVIOUS (the one to retire)")
            }
            guard (1...100_000).contains(batchSize) else { throw CLIError.usage("--batch-size must be 1...100000") }
            let pool = PostgresPool(url: database.resolvedURL(), maxConnections: 1)
            defer { pool.shutdown() }
            let store = try SubjectKeysSetup.store(pool: pool, configuration: configuration)
            let rotation: SubjectKeyStore.Rotation
            do { rotation = try store.rotate(batchSize: batchSize) } catch {
                throw CLIError.runtime("rotation stopped: the batches committed so far are under \(configuration.current.id), "
                                       + "the rest still under the previous KEK; run it again to go on: \(error)")
            }
            print("re-wrapped \(rotation.rewrapped) subject keys under KEK \(configuration.current.id) in \(rotation.transactions) transactions")
            if !rotation.retiredKEKs.isEmpty {
                print("no longer used: KEK \(rotation.retiredKEKs.joined(separator: ", ")) — destroy it "
                      + "(and drop WORKERS_KEK_PREVIOUS) once every worker runs with \(configuration.current.id)")
            }
        }
    }

    struct NewKEK: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "new-kek", abstract: "Print a new random KEK, <id>:<base64>, for WORKERS_KEK_FILE.")

        @Argument(help: "The KEK id (letters, digits, '-', '_', '.'), e.g. 2026-12.")
        var id: String

        func run() throws {
            guard (try? KeyEncryptionKey(parsing: id + ":" + Data(count: 32).base64EncodedString())) != nil else {
                throw CLIError.usage("a KEK id is 1 to 64 letters, digits, '-', '_' or '.'")
            }
            print(KeyEncryptionKey.random(id: id).configurationText)
        }
    }

    struct ScrubErrors: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "scrub-errors",
            abstract: "Once after upgrading: replace opened personal values in the error texts of retry and dead jobs.",
            discussion: """
                Jobs that failed before this release could quote the values of their encrypted arguments in                 error_message and error_backtrace. For each such job of a class with personal arguments, the values                 are replaced by [field] (its key opens them); when its key is erased, both texts are replaced by a                 fixed note. Arguments stay encrypted. Needs WORKERS_KEK and PostgreSQL (the key store); safe to run                 again (docs/jobs-privacy.md, "Opened values").
                """)

        @OptionGroup var connection: ConnectionOptions
        @OptionGroup var database: DatabaseOptions
        @Flag(name: .long, help: "Count what would change; write nothing.")
        var dryRun = false

        func run() throws {
            guard let configuration = try SubjectKeysSetup.configuration() else {
                throw CLIError.usage("set WORKERS_KEK (or WORKERS_KEK_FILE): the scrub opens the jobs' arguments to find their values")
            }
            let pool = PostgresPool(url: database.resolvedURL(), maxConnections: 1)
            defer { pool.shutdown() }
            let store = try SubjectKeysSetup.store(pool: pool, configuration: configuration)
            // Every shard's retry and dead sets (docs/sharding.md); the erasure epoch is read on the default shard.
            // The opener reads the epoch on a pool of its own: the rewrite holds its shard's connection while it opens.
            let shards = try connection.shardMap().shards
            let pools = shards.map { RedisPool(endpoint: $0.endpoint, maxConnections: 1) }
            let epochPool = RedisPool(endpoint: shards[0].endpoint, maxConnections: 1)
            let scrub = OpenedErrorScrub(types: DomainJobs.personalArgumentTypes,
                                         opener: SubjectArgumentsOpener(store: store, redis: epochPool, configuration: configuration),
                                         pools: pools)
            let report: OpenedErrorScrub.Report
            do { report = try scrub.run(dryRun: dryRun) } catch {
                throw CLIError.runtime("scrub stopped (run it again once fixed; what was rewritten stays): \(error)")
            }
            print("\(dryRun ? "would scrub" : "scrubbed") \(report.scrubbed), \(dryRun ? "would blank" : "blanked") \(report.blanked) "
                  + "of \(report.scanned) retry and dead entries\(report.moved > 0 ? "; \(report.moved) moved meanwhile: run again" : "")")
        }
    }
}
