import Foundation
import WorkersAppJobs
import Logging
import WorkersMail
import WorkersQueue
import WorkersStorage
import WorkersTestServices
import Workers
import XCTest

/// Shared set-up for the privacy tests: a `JobsFixture` (a fresh database, one Redis test database (30-34), a
/// fake SMTP server of its own), a temporary export directory, and the privacy jobs registered in a registry,
/// run through `JobRunnerDriver` (in process) or a `TestWorker`.
final class PrivacyFixture {
    let base: JobsFixture
    var database: PostgresTestDatabase { base.database }
    var pool: PostgresPool { base.pool }
    var redis: TestRedis { base.redis }
    var fakes: FakeServers { base.fakes }
    let directory: URL
    let configuration: PrivacyConfiguration
    let registry: JobRegistry
    let signer: ExportURLSigner
    /// The privacy jobs as a worker runs them (JobRunner: ledger check on redelivery, retries, dead).
    let driver: JobRunnerDriver
    static let secret = Data("test-signing-secret-0123456789-abcdefghijklmnop".utf8)
    static let urlBase = "https://downloads.example.test/privacy/exports"

    init(prefix: String, redisDatabase: Int, security: SMTPSecurity = .none, claimedBy file: String = #fileID) throws {
        base = try JobsFixture(prefix: prefix, redis: redisDatabase, fakes: .own([.smtp]), claimedBy: file)
        let fakes = base.fakes
        directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("privacy-test-\(UUID().uuidString.lowercased())").appendingPathComponent("exports")
        let smtp = SMTPConfiguration(host: "127.0.0.1", port: fakes.smtpPort, security: security,
                                     connectTimeout: .seconds(5), timeout: .seconds(10))
        configuration = try PrivacyConfiguration(storageDirectory: directory, urlBase: Self.urlBase,
                                                 signingSecret: Self.secret, smtp: smtp,
                                                 mailFrom: EmailAddress("privacy@example.test", name: "Privacy Team"))
        var registry = JobRegistry()
        PrivacyJobs.register(into: &registry, configuration: configuration, redis: base.redis.pool)
        self.registry = registry
        driver = base.driver(registry)
        signer = ExportURLSigner(configuration: configuration)
    }

    func tearDown() {
        base.tearDown()
        try? redis.flush()
        try? FileManager.default.removeItem(at: directory.deletingLastPathComponent())
    }

    // MARK: - Running jobs

    func payload(_ className: String, args: [JSONValue], jid: String = Identifiers.jid()) throws -> JobPayload {
        try JobClient.payload(for: NewJob(className, args: args), jid: jid, createdAt: Clock.now(), enqueuedAt: Clock.now())
    }

    /// One delivery of `payload` through `JobRunnerDriver`, on this thread: returns when it succeeded (or the
    /// ledger already held it), throws the `Delivery` otherwise (assert on it with `Failure`).
    func run(_ payload: JobPayload) throws {
        try driver.run(payload)
    }

    func runExport(user: UUID, export: UUID, jid: String = Identifiers.jid()) throws {
        try run(payload(PrivacyExportJob.className, args: PrivacyJobs.exportJob(userID: user, exportID: export).args, jid: jid))
    }

    func runDeletion(user: UUID, request: UUID, jid: String = Identifiers.jid()) throws {
        try run(payload(AccountDeletionJob.className,
                        args: PrivacyJobs.deletionJob(userID: user, requestID: request).args, jid: jid))
    }

    /// Starts a worker process with the privacy jobs against the fixture's Redis and database; the caller shuts
    /// it down.
    func startWorker(concurrency: Int = 2) throws -> WorkerProcess {
        try TestWorker.start(redis: redis, registry: registry, database: base.jobDatabase, concurrency: concurrency)
    }

    // MARK: - Database helpers

    @discardableResult
    func sql(_ text: String, _ parameters: [(any PostgresBindable)?] = []) throws -> PostgresRows {
        try pool.withConnection { try $0.query(text, parameters) }
    }

    func count(_ text: String, _ parameters: [(any PostgresBindable)?] = []) throws -> Int {
        Int(try sql(text, parameters).first?.int64("n") ?? -1)
    }

    /// Every public table (job_ledger excepted) as sorted JSON text: equal snapshots = nothing changed.
    func snapshot() throws -> [String: String] {
        try pool.withConnection { conn in
            let tables = try conn.query("""
                SELECT table_name::text AS t FROM information_schema.tables
                WHERE table_schema = 'public' AND table_type = 'BASE TABLE' AND table_name <> 'job_ledger'
                ORDER BY 1
                """).map { try $0.string("t") }
            var result: [String: String] = [:]
            for table in tables {
                // Identifiers from the catalogue, quoted by PostgreSQL's own quote_ident.
                let quoted = try conn.queryFirst("SELECT quote_ident($1) AS q", [table])!.string("q")
                result[table] = try conn.queryFirst(
                    "SELECT coalesce(json_agg(t ORDER BY t::text), '[]')::text AS j FROM \(quoted) t")!.string("j")
            }
            return result
        }
    }

    // MARK: - Mail

    /// Messages from the fake SMTP server with the links it found in each body.
    func mails() throws -> [(message: FakeSMTPMessage, links: [String])] {
        let raw = try fakes.admin(.smtp, "GET", "messages")["messages"] as? [[String: Any]] ?? []
        let typed = try fakes.smtpMessages()
        return zip(typed, raw).map { ($0, $1["links"] as? [String] ?? []) }
    }
}

/// Base of the privacy test classes: a fresh `PrivacyFixture` before each test (`makeFixture()`, which each class
/// overrides with its database prefix and Redis database), torn down after it. One thread, as XCTest calls it.
class PrivacyTestCase: XCTestCase {
    private(set) var fixture: PrivacyFixture!

    func makeFixture() throws -> PrivacyFixture {
        throw XCTSkip("\(type(of: self)) does not say which fixture it needs (override makeFixture)")
    }

    override func setUpWithError() throws {
        try super.setUpWithError()
        fixture = try makeFixture()
    }

    override func tearDown() {
        fixture?.tearDown()
        fixture = nil
        super.tearDown()
    }
}

/// A user with a distinctive value in every table that references users, so tests can search for it.
struct SeededUser {
    let id: UUID
    let appID: UUID
    let label: String
    var email: String { "\(label).pii@example.org" }
    var firstName: String { "First\(label)" }
    var lastName: String { "Last\(label)" }
    var passwordHash: String { "pwhash-\(label)-secret" }
    var googleID: String { "google-\(label)-id" }
    var appleID: String { "apple-\(label)-id" }
    var accessToken: String { "oauth-access-\(label)-secret" }
    var oauthRefreshToken: String { "oauth-refresh-\(label)-secret" }
    var refreshTokenHash: String { "rt-hash-\(label)-secret" }
    var playerID: String { "G:\(label)-player" }
    var alias: String { "alias-\(label)" }
    var ipAddress: String { "203.0.113.9/\(label)" }
    var userAgent: String { "UA-\(label)-browser" }
    var device: String { "iPhone-\(label)" }
    var city: String { "City\(label)" }
    var storeReceipt: String { "receipt-\(label)-blob" }
    var receiptData: String { "receiptdata-\(label)-blob" }
    var reason: String { "reason-\(label)-private text" }
    var transactionID: String { "txn-\(label)-1" }
    var cancellationToken: UUID

    /// Strings that identify the person: none may survive the deletion anywhere in the database.
    var personalStrings: [String] {
        [email, firstName, lastName, "Disp\(label)", passwordHash, googleID, appleID, accessToken, oauthRefreshToken,
         refreshTokenHash, playerID, alias, ipAddress, userAgent, device, city, storeReceipt, receiptData, reason,
         cancellationToken.uuidString.lowercased(), "Hi First\(label)"]
    }
    /// Secrets that must never appear in an export.
    var secrets: [String] {
        [passwordHash, accessToken, oauthRefreshToken, refreshTokenHash, storeReceipt, receiptData,
         cancellationToken.uuidString.lowercased(), "idem-\(label)-key"]
    }
}

enum PrivacySeed {
    /// Inserts a user and one or more rows in every table that references users.
    static func user(_ fixture: PrivacyFixture, label: String, appID: UUID = UUID(), quizRows: Int = 3) throws -> SeededUser {
        let user = SeededUser(id: UUID(), appID: appID, label: label, cancellationToken: UUID())
        try fixture.pool.withConnection { c in
            try c.execute("""
                INSERT INTO users (id, app_id, email, email_verified, password_hash, first_name, last_name, display_name,
                                   auth_provider, google_id, apple_id, last_login, delete_cancellation_token)
                VALUES ($1, $2, $3, true, $4, $5, $6, $7, 'google', $8, $9, now(), $10)
                """, [user.id, appID, user.email, user.passwordHash, user.firstName, user.lastName, "Disp\(label)",
                      user.googleID, user.appleID, user.cancellationToken])
            try c.execute("INSERT INTO privacy_settings (user_id, consent_geolocation) VALUES ($1, true)", [user.id])
            try c.execute("""
                INSERT INTO oauth_connections (user_id, provider, provider_user_id, access_token, refresh_token, profile_data)
                VALUES ($1, 'google', $2, $3, $4, jsonb_build_object('name', $5::text))
                """, [user.id, user.googleID, user.accessToken, user.oauthRefreshToken, "\(user.firstName) \(user.lastName)"])
            try c.execute("INSERT INTO game_center_connections (user_id, player_id, alias) VALUES ($1, $2, $3)",
                          [user.id, user.playerID, user.alias])
            try c.execute("""
                INSERT INTO refresh_tokens (user_id, token_hash, device_info, expires_at)
                VALUES ($1, $2, jsonb_build_object('model', $3::text), now() + interval '30 days')
                """, [user.id, user.refreshTokenHash, user.device])
            try c.execute("""
                INSERT INTO audit_logs (user_id, app_id, action, ip_address, user_agent, details)
                VALUES ($1, $2, 'login', $3, $4, jsonb_build_object('email', $5::text))
                """, [user.id, appID, user.ipAddress, user.userAgent, user.email])
            let plan = try c.queryFirst("""
                INSERT INTO subscription_plans (app_id, name, plan_type, apple_product_id, price)
                VALUES ($1, 'Monthly', 'monthly', 'com.example.monthly', 4.99)
                ON CONFLICT (app_id, plan_type) DO UPDATE SET name = EXCLUDED.name RETURNING id
                """, [appID])!.uuid("id")
            let subscription = try c.queryFirst("""
                INSERT INTO subscriptions (app_id, user_id, plan_id, plan_type, status, start_date, store, store_product_id,
                                           store_transaction_id, store_original_transaction_id, store_receipt, price, currency)
                VALUES ($1, $2, $3, 'monthly', 'active', now(), 'apple', 'com.example.monthly', $4, $4, $5, 4.99, 'EUR')
                RETURNING id
                """, [appID, user.id, plan, user.transactionID, user.storeReceipt])!.uuid("id")
            try c.execute("UPDATE users SET subscription_id = $2, status = 'premium' WHERE id = $1", [user.id, subscription])
            try c.execute("""
                INSERT INTO subscription_events (subscription_id, event_type, event_data)
                VALUES ($1, 'subscription_started', jsonb_build_object('transaction_id', $2::text))
                """, [subscription, user.transactionID])
            try c.execute("""
                INSERT INTO iap_receipts (app_id, user_id, subscription_id, store, receipt_data, transaction_id, product_id,
                                          validated, validation_status)
                VALUES ($1, $2, $3, 'apple', $4, $5, 'com.example.monthly', true, 0)
                """, [appID, user.id, subscription, user.receiptData, user.transactionID])
            try c.execute("""
                INSERT INTO credit_transactions (user_id, amount, balance_after, source, reference, idempotency_key)
                VALUES ($1, 5, 5, 'ad_reward', $2, $3)
                """, [user.id, "ref-\(label)", "idem-\(label)-key"])
            try c.execute("""
                INSERT INTO user_locations (user_id, latitude, longitude, accuracy, source, country_code, country, city)
                VALUES ($1, 48.8566, 2.3522, 25, 'gps', 'FR', 'France', $2)
                """, [user.id, user.city])
            try c.execute("""
                INSERT INTO quiz_history (user_id, app_id, category_id, score, total_questions, played_at)
                SELECT $1, $2, 'cat-' || $3::text || '-' || g, g, 10, now() - g * interval '1 minute'
                FROM generate_series(1, $4::int) g
                """, [user.id, appID, label, quizRows])
            try c.execute("INSERT INTO user_achievements (user_id, achievement_id) VALUES ($1, $2)", [user.id, "ach-\(label)"])
            let request = try c.queryFirst("""
                INSERT INTO ad_requests (app_id, user_id, ad_type, placement, provider) VALUES ($1, $2, 'rewarded', $3, 'admob')
                RETURNING id
                """, [appID, user.id, "place-\(label)"])!.uuid("id")
            try c.execute("""
                INSERT INTO ad_views (ad_request_id, app_id, user_id, ad_type, provider, placement, ad_completed, revenue_usd)
                VALUES ($1, $2, $3, 'rewarded', 'admob', $4, true, 0.01)
                """, [request, appID, user.id, "place-\(label)"])
            let campaign = try c.queryFirst("""
                INSERT INTO freemium_campaigns (app_id, name, campaign_type, reward_amount, starts_at, ends_at)
                VALUES ($1, $2, 'watch_ads', 10, now() - interval '1 day', now() + interval '1 day') RETURNING id
                """, [appID, "campaign-\(label)"])!.uuid("id")
            try c.execute("INSERT INTO campaign_participations (campaign_id, user_id, progress) VALUES ($1, $2, 3)",
                          [campaign, user.id])
            try c.execute("""
                INSERT INTO pending_rewards (user_id, amount, source, reference, campaign_id) VALUES ($1, 10, 'campaign', $2, $3)
                """, [user.id, "pr-\(label)", campaign])
            try c.execute("""
                INSERT INTO notifications (user_id, type, title, body) VALUES ($1, 'credits', $2, 'You got 10 credits')
                """, [user.id, "Hi First\(label)"])
        }
        return user
    }

    static func export(_ fixture: PrivacyFixture, user: SeededUser) throws -> UUID {
        try fixture.sql("INSERT INTO privacy_exports (user_id) VALUES ($1) RETURNING id", [user.id]).first!.uuid("id")
    }

    /// A deletion request as the Auth Service records it: `scheduledIn` seconds from now (negative = due).
    static func deletionRequest(_ fixture: PrivacyFixture, user: SeededUser, scheduledIn: TimeInterval) throws -> UUID {
        let scheduled = Date().addingTimeInterval(scheduledIn)
        try fixture.sql("UPDATE users SET delete_requested = true, delete_scheduled_at = $2 WHERE id = $1",
                        [user.id, scheduled])
        return try fixture.sql("""
            INSERT INTO deletion_requests (user_id, reason, requested_at, scheduled_at)
            VALUES ($1, $2, $3, $4) RETURNING id
            """, [user.id, user.reason, scheduled.addingTimeInterval(-28 * 86_400), scheduled]).first!.uuid("id")
    }
}

/// Reads `VmHWM` / `VmRSS` (kB) from /proc/self/status.
enum ProcessMemory {
    static func kilobytes(_ field: String) -> Int? {
        guard let text = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return nil }
        for line in text.split(separator: "\n") where line.hasPrefix(field + ":") {
            return Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "")
        }
        return nil
    }

    /// Resets the peak-RSS mark to the current RSS (Linux: write 5 to clear_refs). False when not permitted.
    static func resetPeak() -> Bool {
        guard let handle = FileHandle(forWritingAtPath: "/proc/self/clear_refs") else { return false }
        defer { try? handle.close() }
        do { try handle.write(contentsOf: Data("5".utf8)); return true } catch { return false }
    }
}
