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
        subcommands: [Rotate.self, NewKEK.self, ScrubErrors.self, Recover.self]
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

    struct Recover: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "recover",
            abstract: "After restoring PostgreSQL from a backup: erase again the keys of everyone erased since it, before workers serve.",
            discussion: """
                Reads the erasure journal every Redis shard keeps (subject-keys:erasures), deletes again the data keys                 the restore brought back for each person erased at or after --since (the backup's time), records them                 so no key is made for them again, tells every worker to drop cached keys, and enqueues each erasure's                 AccountDeletionJob again (the restore rolled its anonymisation back). Needs no KEK. Run it before                 starting the workers (docs/jobs-privacy.md, "Restoring a backup").
                """)

        @OptionGroup var connection: ConnectionOptions
        @OptionGroup var database: DatabaseOptions
        @Option(name: .long, help: "When the restored backup was taken: ISO 8601 (2026-12-01T03:00:00Z) or Unix seconds.")
        var since: String

        func run() throws {
            let time: Date
            if let seconds = Double(since), seconds.isFinite, (0...Bounded.maxEpochSeconds).contains(seconds) {
                time = Date(timeIntervalSince1970: seconds)
            } else if let parsed = ISO8601DateFormatter().date(from: since) {
                time = parsed
            } else {
                throw CLIError.usage("--since: expected ISO 8601 (2026-12-01T03:00:00Z) or Unix seconds")
            }
            let map = try connection.shardMap()
            let pools = map.shards.map { RedisPool(endpoint: $0.endpoint, maxConnections: 1) }
            let postgres = PostgresPool(url: database.resolvedURL(), maxConnections: 1)
            defer { postgres.shutdown() }
            let recovery: SubjectKeyErasureJournal.Recovery
            do { recovery = try SubjectKeyErasureJournal(pools: pools).recover(since: time, on: postgres) } catch {
                throw CLIError.runtime("recover failed, run it again: \(error)")
            }
            let client = JobClient(shards: ShardPools(map: map, maxConnections: 1))
            for entry in recovery.entries {
                do { try client.enqueue(PrivacyJobs.deletionJob(userID: entry.personID, requestID: entry.requestID)) } catch {
                    throw CLIError.runtime("keys erased again; enqueueing the deletions failed, run it again: \(error)")
                }
            }
            print("\(recovery.entries.count) erasures since \(ISO8601DateFormatter().string(from: time)): "
                  + "\(recovery.keysErased) data keys erased again, \(recovery.entries.count) deletion jobs enqueued")
        }
    }
}
