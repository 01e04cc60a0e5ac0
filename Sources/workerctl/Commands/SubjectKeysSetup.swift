import Foundation
import Logging
import Synchronization
import WorkersAppJobs
import WorkersQueue
import WorkersStorage
import WorkersSubjectKeys
import Workers

/// The key store of encrypted personal arguments (docs/jobs-privacy.md) as `workerctl` configures it from the
/// environment (`SubjectKeysConfiguration`: `WORKERS_KEK` / `WORKERS_KEK_FILE`, …).
enum SubjectKeysSetup {
    /// The configuration, or nil when no KEK is set. A malformed value, or a KEK file others may read, is a usage
    /// error; its warnings (an inline KEK) are logged once per process.
    static func configuration() throws -> SubjectKeysConfiguration? {
        let configuration: SubjectKeysConfiguration?
        do { configuration = try SubjectKeysConfiguration.fromEnvironment(ProcessInfo.processInfo.environment) } catch {
            throw CLIError.usage(error.description)
        }
        if let warnings = configuration?.warnings, !warnings.isEmpty, !warned.exchange(true, ordering: .relaxed) {
            let logger = Logger(label: "workerctl.subject-keys")
            for warning in warnings { logger.warning("\(warning)") }
        }
        return configuration
    }

    /// Set once the configuration's warnings were logged.
    private static let warned = Atomic<Bool>(false)

    /// Opens the key store (a wrong KEK fails here) over `pool`.
    static func store(pool: PostgresPool, configuration: SubjectKeysConfiguration) throws -> SubjectKeyStore {
        do { return try SubjectKeyStore(pool: pool, configuration: configuration) } catch let error as SubjectKeyStoreError {
            throw CLIError.runtime("subject keys: \(error)")
        } catch {
            throw CLIError.runtime("subject keys: cannot read them from PostgreSQL: \(error)")
        }
    }

    /// A worker's key store as its start found it.
    enum WorkerKeyStore {
        /// No PostgreSQL, or no KEK configured.
        case none
        case open(SubjectKeyStore)
        /// Configured, but it did not open (a wrong or unknown KEK, its tables unreadable): the worker serves the
        /// other classes (`UnusableKeyStore`).
        case unusable(UnusableKeyStore)

        var store: SubjectKeyStore? { if case .open(let store) = self { return store } else { return nil } }
        var unusable: UnusableKeyStore? { if case .unusable(let unusable) = self { return unusable } else { return nil } }
    }

    /// A worker's key store. A malformed KEK setting (or a KEK file others may read) refuses the start; a store that
    /// does not open does not: the worker logs it (`alert=key_store_unusable`) and serves every class without
    /// personal arguments, while those wait without spending retries (`UnusableKeyStore`, docs/metrics-and-health.md).
    static func openWorkerStore(database: JobDatabase?) throws -> WorkerKeyStore {
        guard let database, let configuration = try configuration() else { return .none }
        do {
            return .open(try store(pool: database.pool, configuration: configuration))
        } catch let error as CLIError where error.exitCode == 1 {
            let reason = error.message
            Logger(label: "workerctl.worker").error(
                "key store unusable: jobs with personal arguments (and erasures) wait without spending retries; every other class runs",
                metadata: ["alert": "key_store_unusable", "reason": "\(reason)"])
            return .unusable(UnusableKeyStore(reason: reason, classes: DomainJobs.personalArgumentTypes))
        }
    }

    /// A worker's opener over `store`; then refuses to start when a registered class declares personal
    /// arguments and there is no key store. A worker without PostgreSQL (`--no-database`) has no key store and no
    /// ledger, so it cannot run those classes whatever the KEK: they are registered as an unconfigured area's stand-ins
    /// (their jobs retry until a worker with PostgreSQL and the key store takes them) and a warning says so.
    static func install(into registry: inout JobRegistry, keyStore: WorkerKeyStore, database: JobDatabase?, redisURL: String) throws {
        guard let database else {
            let classNames = registry.classNamesWithPersonalArguments
            guard !classNames.isEmpty else { return }
            let problem = "no PostgreSQL (--no-database): the subject keys of their encrypted arguments are there"
            DomainJobs.registerStandIns(for: classNames, area: "personal arguments", problem: problem, into: &registry)
            Logger(label: "workerctl.worker").warning(
                "jobs not configured on this worker; they will retry until a configured worker runs them",
                metadata: ["area": "personal arguments", "classes": "\(classNames.joined(separator: ","))", "problem": "\(problem)"])
            return
        }
        if let store = keyStore.store, let configuration = try configuration() {
            registry.personalArgumentsOpener = SubjectArgumentsOpener(
                store: store, redis: try RedisPool(url: redisURL, maxConnections: 2), configuration: configuration)
        } else if let unusable = keyStore.unusable {
            registry.personalArgumentsOpener = unusable
        }
        do { try registry.checkPersonalArguments() } catch { throw CLIError.runtime(error.description) }
    }

    /// What an outbox relay applies to each row (`OutboxRelaySettings.middleware`): the sealer of the domain's
    /// classes with personal arguments (`DomainJobs.personalArgumentTypes`), so rows written in clear (SQL
    /// `workers_enqueue`, `Outbox.enqueue`) reach Redis encrypted. Without a key store the rows go as written, and a
    /// warning says so once.
    /// `redisURL`: where the sealer's cache hears of erasures (the relay's default shard).
    static func relayMiddleware(store: SubjectKeyStore?, redisURL: String) throws -> [any EnqueueMiddleware] {
        guard let store else {
            let classes = DomainJobs.personalArgumentTypes.map { $0.className }.joined(separator: ",")
            Logger(label: "workerctl.outbox").warning(
                "no KEK (WORKERS_KEK): the outbox relay pushes personal arguments as the rows hold them (docs/jobs-privacy.md)",
                metadata: ["classes": "\(classes)"])
            return []
        }
        let sealer = SubjectArgumentsSealer(store: store, classes: DomainJobs.personalArgumentTypes,
                                            redis: try RedisPool(url: redisURL, maxConnections: 1),
                                            envelopeVersion: try configuration()?.envelopeVersion ?? PersonalEnvelope.version)
        // workers_enqueue checks rows at their sealed size from now on (migration 0021).
        do { try sealer.publishPersonalFields() } catch {
            Logger(label: "workerctl.outbox").warning(
                "the declared personal fields could not be written to workers_personal_fields: rows are checked at their clear size",
                metadata: ["error": "\(error)"])
        }
        return [sealer]
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
        return SubjectArgumentsSealer(store: try store(pool: pool, configuration: configuration), classes: [type],
                                      envelopeVersion: configuration.envelopeVersion)
    }
}
