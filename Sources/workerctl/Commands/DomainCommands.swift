import ArgumentParser
import Foundation
import WorkersAppJobs
import WorkersStorage

/// `workerctl revenue --from D --to D [--app UUID] [--csv | --json]`: the ad revenue report from
/// `ad_revenue_daily` (what AdRevenueAggregationJob wrote).
struct RevenueCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "revenue", abstract: "Print the daily ad revenue report (per app, ad type, provider, placement).")

    @OptionGroup var database: DatabaseOptions

    @Option(name: .long, help: "First day, YYYY-MM-DD (UTC).")
    var from: String

    @Option(name: .long, help: "Last day, YYYY-MM-DD (UTC), inclusive.")
    var to: String

    @Option(name: .long, help: "Only this app (UUID).")
    var app: String?

    @Flag(name: .long, help: "CSV output.")
    var csv = false

    @Flag(name: .long, help: "JSON output.")
    var json = false

    func run() throws {
        guard let first = AdRevenueAggregationJob.Arguments.parseDay(from) else {
            throw CLIError.usage("--from must be a day YYYY-MM-DD, got '\(from)'")
        }
        guard let last = AdRevenueAggregationJob.Arguments.parseDay(to) else {
            throw CLIError.usage("--to must be a day YYYY-MM-DD, got '\(to)'")
        }
        if csv && json { throw CLIError.usage("give --csv or --json, not both") }
        var appID: UUID?
        if let app {
            guard let parsed = UUID(uuidString: app) else { throw CLIError.usage("--app must be a UUID, got '\(app)'") }
            appID = parsed
        }
        let url = database.resolvedURL()
        let pool = PostgresPool(url: url, maxConnections: 1)
        defer { pool.shutdown() }
        let report: RevenueReport
        do { report = try RevenueReport.load(pool: pool, from: first, to: last, appID: appID) } catch {
            throw CLIError.runtime("cannot read the revenue report from \(PostgresURL.redacted(url)): \(error)")
        }
        print(json ? report.json() : report.csv(), terminator: "")
    }
}

/// `workerctl export verify-url URL`: checks a GDPR export link's signature and expiry.
struct ExportCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "export", abstract: "GDPR export links.", subcommands: [VerifyURL.self])

    struct VerifyURL: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "verify-url",
            abstract: "Say whether an export link is valid, expired or forged (exit 0 only when valid).",
            discussion: "Reads PRIVACY_EXPORT_URL_BASE and PRIVACY_EXPORT_SIGNING_SECRET (or _FILE) like the workers.")

        @Argument(help: "The signed download URL.")
        var url: String

        func run() throws {
            let signer: ExportURLSigner
            do { signer = try PrivacyConfiguration.urlSigner(fromEnvironment: ProcessInfo.processInfo.environment) } catch {
                throw CLIError.usage("\(error)")
            }
            let verdict = signer.verify(url: url)
            print(verdict.rawValue)
            if verdict != .valid { throw ExitCode(1) }
        }
    }
}
