import ArgumentParser
import Foundation
import Storage
import SubjectKeys

/// `workerctl keys …`: the key-encryption key of personal job arguments (docs/jobs-privacy.md, "Rotation").
struct KeysCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "keys",
        abstract: "Key-encryption key (KEK) of encrypted personal job arguments.",
        subcommands: [Rotate.self, NewKEK.self]
    )

    struct Rotate: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "rotate",
            abstract: "Re-wrap every subject key under WORKERS_KEK (the old KEK in WORKERS_KEK_PREVIOUS); then destroy the old KEK.")

        @OptionGroup var database: DatabaseOptions

        func run() throws {
            guard let configuration = try SubjectKeysSetup.configuration() else {
                throw CLIError.usage("set WORKERS_KEK (the new KEK) and WORKERS_KEK_PREVIOUS (the one to retire)")
            }
            let pool = PostgresPool(url: database.resolvedURL(), maxConnections: 1)
            defer { pool.shutdown() }
            let store = try SubjectKeysSetup.store(pool: pool, configuration: configuration)
            let rotation: SubjectKeyStore.Rotation
            do { rotation = try store.rotate() } catch { throw CLIError.runtime("rotation failed, nothing changed: \(error)") }
            print("re-wrapped \(rotation.rewrapped) subject keys under KEK \(configuration.current.id)")
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
}
