import ArgumentParser
import Foundation
import WorkersAppJobs
import Logging
import Synchronization
import WorkersWebDashboard

/// `workerctl web`: serves the operator dashboard (docs/web.md). Parsing and the credential's source only; the
/// server and its pages are in WebDashboard.
struct WebCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "web",
        abstract: "Serve the operator dashboard (queues, jobs, processes, cron, batches, limits, unique locks; every shard) over HTTP.",
        discussion: """
            Binds 127.0.0.1 by default. Any other host needs a credential: WORKERCTL_WEB_TOKEN or --password-file \
            (every request must then carry it: Bearer token, or the password of HTTP Basic with any user name). \
            Every change is a POST with the page's CSRF token.
            """)

    @OptionGroup var connection: ConnectionOptions
    @Option(help: "Address to bind.") var host = "127.0.0.1"
    @Option(help: "Port to listen on (0: any free port, printed as web_url).") var port = 9292
    @Option(name: .customLong("password-file"), help: "File whose first line is the credential.") var passwordFile: String?
    @Option(name: .customLong("database-url"), help: "PostgreSQL holding job_outbox, for the outbox page (default: $DATABASE_URL; none: the page says so).")
    var databaseURL: String?

    func run() throws {
        let credential = try resolvedCredential()
        // Several shards (REDIS_SHARDS / QUEUE_SHARDS or the config file): every page shows each of them.
        let database = databaseURL ?? ProcessInfo.processInfo.environment["DATABASE_URL"].flatMap { $0.isEmpty ? nil : $0 }
        var configuration = WebConfiguration(host: host, port: port, shards: try connection.shardMap(), credential: credential,
                                             databaseURL: database)
        configuration.redactor = DomainJobs.argsRedactor
        do { try configuration.validate() } catch { throw CLIError.usage(error.description) }
        let logger = Logger(label: "workerctl.web")
        let finished = DispatchSemaphore(value: 0)
        let failure = FailureBox()
        Task {
            do { try await WebServer.run(configuration, logger: logger) } catch { failure.set(error) }
            finished.signal()
        }
        finished.wait()
        if let error = failure.get() { throw CLIError.runtime("web dashboard stopped: \(error)") }
    }

    private func resolvedCredential() throws -> String? {
        if let passwordFile {
            guard let text = try? String(contentsOfFile: passwordFile, encoding: .utf8) else {
                throw CLIError.usage("cannot read --password-file \(passwordFile)")
            }
            // The first line, without its line end (a file written on Windows ends it with CR LF) or surrounding
            // blanks: a `\r` kept in the credential would make every correct password fail.
            let first = text.split(omittingEmptySubsequences: false, whereSeparator: { $0 == "\n" || $0 == "\r\n" }).first ?? ""
            return first.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        return ProcessInfo.processInfo.environment["WORKERCTL_WEB_TOKEN"]
    }
}

/// The server task's error, handed to the command's thread (written once, read after the semaphore).
private final class FailureBox: Sendable {
    private let error = Mutex<(any Error)?>(nil)
    func set(_ error: any Error) { self.error.withLock { $0 = error } }
    func get() -> (any Error)? { error.withLock { $0 } }
}
