import ArgumentParser
import Foundation
import Synchronization
import WorkersHTTP
import Logging
import WorkersQueue
import Workers
import WorkersTelemetry

struct WorkerCtl: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "workerctl",
        abstract: "Run and operate the Sidekiq-compatible job system.",
        subcommands: [
            WorkerCommand.self, EnqueueCommand.self, MigrateCommand.self,
            StatsCommand.self, QueuesCommand.self, JobsCommand.self, WorkersCommand.self, TopCommand.self,
            SchedulerCommand.self, RunCommand.self, CronCommand.self, RevenueCommand.self, ExportCommand.self,
            UniqueCommand.self, BatchesCommand.self, RelayCommand.self, OutboxCommand.self, LimitsCommand.self, WebCommand.self, KeysCommand.self,
        ]
    )

    /// Parses, runs, and maps errors to exit codes: usage errors 2, runtime errors 1, never a
    /// stack trace.
    static func mainWithExitCodes() {
        StructuredLogHandler.bootstrap()
        // Tracing from the OTEL_* variables (docs/tracing.md); off, and free, when they do not ask for it.
        let tracingLogger = Logger(label: "workerctl.tracing")
        let tracing = OTLPExport.bootstrapFromEnvironment(logger: tracingLogger)
        do {
            // The last spans are sent before any exit below (Foundation.exit skips defers).
            defer {
                tracing?.shutdown()
                if let dropped = tracing?.dropped, dropped > 0 {
                    tracingLogger.warning("spans dropped: the export queue was full", metadata: ["spans": "\(dropped)"])
                }
            }
            var command = try parseAsRoot()
            try command.run()
        } catch let error as CLIError {
            printError("workerctl: \(error.message)")
            Foundation.exit(error.exitCode)
        } catch let error as CleanExit {
            _ = error
            exit(withError: error)
        } catch let error as ExitCode {
            Foundation.exit(error.rawValue)
        } catch {
            let message = fullMessage(for: error)
            let code = exitCode(for: error)
            if code == .success {
                print(message)
                Foundation.exit(0)
            }
            printError(message)
            // ArgumentParser's usage errors (64) become 2, as operators' scripts expect.
            Foundation.exit(code == .validationFailure ? 2 : (code.rawValue == 0 ? 0 : 2))
        }
    }
}

/// An error with a message for the operator and its exit code.
struct CLIError: Error {
    let message: String
    let exitCode: Int32

    static func usage(_ message: String) -> CLIError { CLIError(message: message, exitCode: 2) }
    static func runtime(_ message: String) -> CLIError { CLIError(message: message, exitCode: 1) }
}

/// `--redis-url`, else `REDIS_URL`, else the local instance from `scripts/services`.
struct RedisOptions: ParsableArguments {
    @Option(name: .customLong("redis-url"), help: "Redis URL (redis://[user:password@]host:port/db, rediss:// for TLS: docs/deploy.md). Default: $REDIS_URL or \(RedisEndpoint.defaultURL).")
    var redisURL: String?

    func resolvedURL(configured: String? = nil) -> String {
        redisURL ?? ProcessInfo.processInfo.environment["REDIS_URL"] ?? configured ?? RedisEndpoint.defaultURL
    }

    func endpoint(configured: String? = nil) throws -> RedisEndpoint {
        do { return try RedisEndpoint(url: resolvedURL(configured: configured)).warned() } catch {
            throw CLIError.usage(error.description)
        }
    }

    /// Opens a connection, turning failure into "address: reason" with exit code 1.
    func connect(configured: String? = nil) throws -> RedisConnection {
        let endpoint = try endpoint(configured: configured)
        do { return try RedisConnection(endpoint: endpoint) } catch {
            throw CLIError.runtime(error.description)
        }
    }
}

extension RedisEndpoint {
    /// This endpoint, after its warnings (`?insecure`) went to standard error, once per process and endpoint.
    func warned() -> RedisEndpoint {
        let fresh = WarnedEndpoints.shared.withLock { $0.insert(description).inserted }
        if fresh { for warning in warnings { printError("workerctl: warning: \(warning)") } }
        return self
    }
}

/// The endpoints whose warnings were printed (`RedisEndpoint.warned`).
enum WarnedEndpoints {
    static let shared = Mutex<Set<String>>([])
}

/// Runs a Redis operation, mapping Redis failures to a runtime error (exit 1).
func redisCall<T>(_ body: () throws -> T) throws -> T {
    do { return try body() } catch let error as RedisError {
        throw CLIError.runtime(error.description)
    }
}

/// `--database-url`, else `DATABASE_URL`, else the config file's, else the local instance from
/// `scripts/services`.
struct DatabaseOptions: ParsableArguments {
    static let defaultURL = "postgres://postgres@127.0.0.1:5440/workers"

    @Option(name: .customLong("database-url"), help: "PostgreSQL URL. Default: $DATABASE_URL or \(DatabaseOptions.defaultURL).")
    var databaseURL: String?

    func resolvedURL(configured: String? = nil) -> String {
        databaseURL ?? ProcessInfo.processInfo.environment["DATABASE_URL"] ?? configured ?? Self.defaultURL
    }
}
