import ArgumentParser
import Foundation
import WorkersAppJobs
import WorkersQueue
import WorkersStorage
import WorkersSubjectKeys
import Workers

/// `workerctl keys …`: the key-encryption key of personal job arguments (docs/jobs-privacy.md, "Rotation").
struct KeysCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "keys",
        abstract: "Key-encryption key (KEK) of encrypted personal job arguments.",
        subcommands: [Rotate.self, NewKEK.self, ScrubErrors.self, Journal.self, Recover.self]
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

    /// `--since` of `journal` and `recover`: ISO 8601 or Unix seconds.
    static func time(_ text: String, option: String) throws -> Date {
        if let seconds = Double(text), seconds.isFinite, (0...Bounded.maxEpochSeconds).contains(seconds) {
            return Date(timeIntervalSince1970: seconds)
        }
        if let parsed = ISO8601DateFormatter().date(from: text) { return parsed }
        throw CLIError.usage("\(option): expected ISO 8601 (2026-12-01T03:00:00Z) or Unix seconds")
    }

    struct Journal: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "journal",
            abstract: "Print the erasure journal (person digests, no one named) to ship next to the PostgreSQL backups.",
            discussion: """
                Every erasure of a person's data keys is journaled in every Redis shard (subject-keys:erasures) as a \
                digest only the KEK matches to a person. A Redis restored to the same old time as PostgreSQL loses \
                it: ship this output elsewhere (daily) and give it to `keys recover --journal-file` \
                (docs/jobs-privacy.md, "Restoring a backup").
                """)

        @OptionGroup var connection: ConnectionOptions
        @Option(name: .long, help: "Only erasures at or after this time: ISO 8601 or Unix seconds (default: all).")
        var since: String?

        func run() throws {
            let time = try since.map { try KeysCommand.time($0, option: "--since") } ?? Date(timeIntervalSince1970: 0)
            let pools = try connection.shardMap().shards.map { RedisPool(endpoint: $0.endpoint, maxConnections: 1) }
            print(try SubjectKeyErasureJournal(pools: pools).export(since: time), terminator: "")
        }
    }

    struct Recover: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "recover",
            abstract: "After restoring PostgreSQL from a backup: replay every erasure since it, before workers serve.",
            discussion: """
                Reads the erasure journal (every Redis shard, plus --journal-file lines from `keys journal`), deletes \
                again the data keys the restore brought back for each person erased at or after --since (the \
                backup's time), deletes every key that no longer unwraps under the configured KEKs, records the \
                persons so no key is made for them again, marks their accounts for deletion with a request due now, \
                tells every worker to drop cached keys, and enqueues each AccountDeletionJob again (the restore \
                rolled the anonymisation back). Needs WORKERS_KEK (the journal holds digests only the KEK matches). \
                Run it before starting the workers; safe to run again (docs/jobs-privacy.md, "Restoring a backup").
                """)

        @OptionGroup var connection: ConnectionOptions
        @OptionGroup var database: DatabaseOptions
        @Option(name: .long, help: "When the restored backup was taken: ISO 8601 (2026-12-01T03:00:00Z) or Unix seconds.")
        var since: String
        @Option(name: .long, help: "A file of `workerctl keys journal` lines shipped outside Redis, merged with Redis's journal.")
        var journalFile: String?

        func run() throws {
            let time = try KeysCommand.time(since, option: "--since")
            guard let configuration = try SubjectKeysSetup.configuration() else {
                throw CLIError.usage("set WORKERS_KEK (or WORKERS_KEK_FILE): the journal's digests are matched to persons with it")
            }
            var lines: [SubjectKeyErasureJournal.Entry] = []
            if let journalFile {
                guard let text = try? String(contentsOfFile: journalFile, encoding: .utf8) else {
                    throw CLIError.usage("--journal-file: cannot read \(journalFile) as UTF-8 text")
                }
                for (number, line) in text.split(separator: "\n", omittingEmptySubsequences: true).enumerated() {
                    guard let entry = SubjectKeyErasureJournal.Entry.parse(line: String(line)) else {
                        throw CLIError.usage("--journal-file: line \(number + 1) is not `<unix seconds> <digest>`")
                    }
                    lines.append(entry)
                }
            }
            let map = try connection.shardMap()
            let pools = map.shards.map { RedisPool(endpoint: $0.endpoint, maxConnections: 1) }
            let postgres = PostgresPool(url: database.resolvedURL(), maxConnections: 1)
            defer { postgres.shutdown() }
            let store = try SubjectKeysSetup.store(pool: postgres, configuration: configuration)
            let report: ErasureRecovery.Report
            do {
                report = try ErasureRecovery(store: store, database: postgres, journal: SubjectKeyErasureJournal(pools: pools))
                    .run(since: time, lines: lines)
            } catch {
                throw CLIError.runtime("recover stopped, run it again: \(error)")
            }
            let client = JobClient(shards: ShardPools(map: map, maxConnections: 1))
            for deletion in report.deletions {
                do { try client.enqueue(PrivacyJobs.deletionJob(userID: deletion.userID, requestID: deletion.requestID)) } catch {
                    throw CLIError.runtime("keys erased again; enqueueing the deletions failed, run it again: \(error)")
                }
            }
            print("\(report.journaled) erasures since \(ISO8601DateFormatter().string(from: time)): "
                  + "\(report.keysErasedAgain) data keys erased again, \(report.unopenableKeysErased) keys that no longer unwrap erased, "
                  + "\(report.deletions.count) deletion jobs enqueued, \(report.unmatched) digests matching no account")
        }
    }
}
