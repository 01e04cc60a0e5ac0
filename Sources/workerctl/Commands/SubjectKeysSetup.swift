import Foundation
import Jobs
import Queue
import Storage
import SubjectKeys
import Workers

/// The key store of encrypted personal arguments (docs/jobs-privacy.md) as `workerctl` configures it from the
/// environment (`SubjectKeysConfiguration`: `WORKERS_KEK` / `WORKERS_KEK_FILE`, …).
enum SubjectKeysSetup {
    /// The configuration, or nil when no KEK is set. A malformed value is a usage error.
    static func configuration() throws -> SubjectKeysConfiguration? {
        do { return try SubjectKeysConfiguration.fromEnvironment(ProcessInfo.processInfo.environment) } catch {
            throw CLIError.usage(error.description)
        }
    }

    /// Opens the key store (a wrong KEK fails here) over `pool`.
    static func store(pool: PostgresPool, configuration: SubjectKeysConfiguration) throws -> SubjectKeyStore {
        do { return try SubjectKeyStore(pool: pool, configuration: configuration) } catch let error as SubjectKeyStoreError {
            throw CLIError.runtime("subject keys: \(error)")
        } catch {
            throw CLIError.runtime("subject keys: cannot read them from PostgreSQL: \(error)")
        }
    }

    /// A worker's opener from the environment; then refuses to start when a registered class declares personal
    /// arguments and there is no key store.
    static func install(into registry: inout JobRegistry, database: JobDatabase?, redisURL: String) throws {
        if let configuration = try configuration() {
            guard let database else {
                throw CLIError.usage("WORKERS_KEK is set but the worker runs without PostgreSQL, where the subject keys are")
            }
            let store = try store(pool: database.pool, configuration: configuration)
            registry.personalArgumentsOpener = SubjectArgumentsOpener(
                store: store, redis: try RedisPool(url: redisURL, maxConnections: 2), configuration: configuration)
        }
        do { try registry.checkPersonalArguments() } catch { throw CLIError.runtime(error.description) }
    }

    /// The sealer `workerctl enqueue` uses for `className`, or nil when the class declares no personal arguments.
    /// Throws when it does and no KEK is configured: `workerctl enqueue` never sends them in clear.
    static func sealer(forClass className: String, databaseURL: String) throws -> SubjectArgumentsSealer? {
        guard let type = DomainJobs.personalArgumentTypes.first(where: { $0.className == className }) else { return nil }
        guard let configuration = try configuration() else {
            throw CLIError.usage("\(className) has personal arguments: set WORKERS_KEK or WORKERS_KEK_FILE so workerctl encrypts them "
                                 + "(docs/jobs-privacy.md)")
        }
        let pool = PostgresPool(url: databaseURL, maxConnections: 1)
        return SubjectArgumentsSealer(store: try store(pool: pool, configuration: configuration), classes: [type])
    }
}
