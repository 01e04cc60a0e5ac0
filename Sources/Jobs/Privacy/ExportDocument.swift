import Foundation
import WorkersStorage

/// One kind of data in the export: a name in the document and the query that selects it.
///
/// Invariants: `query` selects rows of ONE user only, bound as `$1` (uuid); its select list names every
/// column explicitly (so a column added later is not exported by accident) and never a secret (password
/// hash, OAuth tokens, refresh-token hashes, cancellation tokens, raw store receipts, idempotency keys).
public struct ExportSection: Sendable {
    public enum Shape: Sendable { case object, list }
    public let name: String
    public let shape: Shape
    public let query: String
}

/// The export document: schema version 2 (2 added `processing_information`, GDPR Art. 15(1)).
///
/// ```
/// {"schema_version":2,"export_id":"…","user_id":"…","generated_at":"2025-01-01T10:00:00Z",
///  "processing_information":{"categories":{"profile":{purposes,legal_basis,recipients,retention,source},…},
///                            "rights":{…},"automated_decision_making":"…","third_country_transfers":"…"},
///  "sections":{"profile":{…},"privacy_settings":{…}|null,"oauth_connections":[…],…}}
/// ```
/// Timestamps are ISO 8601 in UTC (`+00:00`), rows are ordered oldest first.
public enum ExportSchema {
    public static let version = 2

    public static let sections: [ExportSection] = [
        .init(name: "profile", shape: .object, query: """
            SELECT id, app_id, email, email_verified, first_name, last_name, display_name, auth_provider,
                   google_id, apple_id, status, is_guest, guest_expires_at, last_login, delete_requested,
                   delete_scheduled_at, created_at, updated_at
            FROM users WHERE id = $1
            """),
        .init(name: "privacy_settings", shape: .object, query: """
            SELECT consent_analytics, consent_third_party, consent_geolocation, consent_personalized_ads,
                   consent_notifications, consent_game_center, updated_at
            FROM privacy_settings WHERE user_id = $1
            """),
        .init(name: "oauth_connections", shape: .list, query: """
            SELECT provider, provider_user_id, profile_data, connected_at
            FROM oauth_connections WHERE user_id = $1 ORDER BY connected_at, id
            """),
        .init(name: "game_center_connections", shape: .list, query: """
            SELECT player_id, alias, linked_at, last_sync
            FROM game_center_connections WHERE user_id = $1 ORDER BY linked_at, id
            """),
        .init(name: "sessions", shape: .list, query: """
            SELECT device_info, created_at, expires_at, revoked
            FROM refresh_tokens WHERE user_id = $1 ORDER BY created_at, id
            """),
        .init(name: "subscriptions", shape: .list, query: """
            SELECT id, app_id, plan_type, status, start_date, end_date, trial_end_date, grace_period_end, auto_renew,
                   store, store_product_id, store_transaction_id, store_original_transaction_id, price, currency,
                   cancelled_at, created_at, updated_at
            FROM subscriptions WHERE user_id = $1 ORDER BY created_at, id
            """),
        .init(name: "subscription_events", shape: .list, query: """
            SELECT e.subscription_id, e.event_type, e.event_data, e."timestamp"
            FROM subscription_events e JOIN subscriptions s ON s.id = e.subscription_id
            WHERE s.user_id = $1 ORDER BY e."timestamp", e.id
            """),
        .init(name: "receipts", shape: .list, query: """
            SELECT id, app_id, subscription_id, store, transaction_id, original_transaction_id, product_id,
                   purchase_date, expiration_date, is_trial, is_active, validated, validation_date,
                   validation_status, created_at
            FROM iap_receipts WHERE user_id = $1 ORDER BY created_at, id
            """),
        .init(name: "credit_transactions", shape: .list, query: """
            SELECT amount, balance_after, source, reference, created_at
            FROM credit_transactions WHERE user_id = $1 ORDER BY created_at, id
            """),
        .init(name: "pending_rewards", shape: .list, query: """
            SELECT amount, source, reference, status, created_at, credited_at
            FROM pending_rewards WHERE user_id = $1 ORDER BY created_at, id
            """),
        .init(name: "campaign_participations", shape: .list, query: """
            SELECT c.name AS campaign, p.progress, p.completed, p.completed_at, p.reward_claimed,
                   p.reward_claimed_at, p.created_at
            FROM campaign_participations p JOIN freemium_campaigns c ON c.id = p.campaign_id
            WHERE p.user_id = $1 ORDER BY p.created_at, p.id
            """),
        .init(name: "quiz_history", shape: .list, query: """
            SELECT app_id, category_id, score, total_questions, played_at
            FROM quiz_history WHERE user_id = $1 ORDER BY played_at, id
            """),
        .init(name: "achievements", shape: .list, query: """
            SELECT achievement_id, unlocked_at
            FROM user_achievements WHERE user_id = $1 ORDER BY unlocked_at, id
            """),
        .init(name: "locations", shape: .list, query: """
            SELECT latitude, longitude, accuracy, altitude, source, country_code, country, city, geocoded_at,
                   created_at
            FROM user_locations WHERE user_id = $1 ORDER BY created_at, id
            """),
        .init(name: "notifications", shape: .list, query: """
            SELECT type, title, body, data, status, created_at, sent_at
            FROM notifications WHERE user_id = $1 ORDER BY created_at, id
            """),
        .init(name: "ad_requests", shape: .list, query: """
            SELECT app_id, ad_type, placement, provider, filled, created_at
            FROM ad_requests WHERE user_id = $1 ORDER BY created_at, id
            """),
        .init(name: "ad_views", shape: .list, query: """
            SELECT app_id, ad_type, provider, placement, display_duration_ms, ad_clicked, ad_completed,
                   reward_granted, created_at
            FROM ad_views WHERE user_id = $1 ORDER BY created_at, id
            """),
        .init(name: "audit_log", shape: .list, query: """
            SELECT action, ip_address, user_agent, result, details, "timestamp"
            FROM audit_logs WHERE user_id = $1 ORDER BY "timestamp", id
            """),
        .init(name: "privacy_exports", shape: .list, query: """
            SELECT id, status, requested_at, completed_at, expires_at
            FROM privacy_exports WHERE user_id = $1 ORDER BY requested_at, id
            """),
        .init(name: "deletion_requests", shape: .list, query: """
            SELECT reason, requested_at, scheduled_at, cancelled_at, completed_at
            FROM deletion_requests WHERE user_id = $1 ORDER BY requested_at, id
            """),
    ]
}

/// The job was cancelled (timeout) while streaming: the partial temporary file is discarded.
struct ExportCancelled: Error, CustomStringConvertible {
    var description: String { "export cancelled (job timeout) while writing" }
}

/// Streams the export document of one user from PostgreSQL into a sink.
///
/// Memory: each section is read through a server-side cursor `batchSize` rows at a time and every row
/// arrives already rendered as JSON by PostgreSQL (`row_to_json`), so at most one batch of row texts plus
/// the sink's 64 KiB buffer are held, whatever the number of rows. Consistency: all sections are read in
/// one REPEATABLE READ READ ONLY transaction (one snapshot). Uses the connection it is given, on the
/// caller's thread.
public struct ExportDocumentWriter {
    public var batchSize = 500
    public var sections = ExportSchema.sections

    public init() {}

    public func write(userID: UUID, exportID: UUID, generatedAt: Date, connection: PostgresConnection,
                      into sink: BufferedFileSink, isCancelled: () -> Bool = { false }) throws {
        let formatter = ISO8601DateFormatter()
        formatter.timeZone = TimeZone(identifier: "UTC")
        try connection.transaction { conn in
            try conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            try conn.execute("SET LOCAL TimeZone TO 'UTC'")
            try sink.write("{\"schema_version\":\(ExportSchema.version),\"export_id\":\"\(exportID.uuidString.lowercased())\","
                + "\"user_id\":\"\(userID.uuidString.lowercased())\",\"generated_at\":\"\(formatter.string(from: generatedAt))\","
                + "\n\"processing_information\":" + (try ProcessingInformation.json()) + ",\n"
                + "\"sections\":{")
            for (index, section) in sections.enumerated() {
                if isCancelled() { throw ExportCancelled() }
                try sink.write((index == 0 ? "" : ",") + "\n\"\(section.name)\":")
                try stream(section, userID: userID, conn: conn, sink: sink, isCancelled: isCancelled)
            }
            try sink.write("\n}}\n")
        }
    }

    private func stream(_ section: ExportSection, userID: UUID, conn: PostgresConnection, sink: BufferedFileSink,
                        isCancelled: () -> Bool) throws {
        try conn.execute("DECLARE privacy_export_cursor NO SCROLL CURSOR FOR SELECT row_to_json(t)::text AS j FROM ("
                         + section.query + ") t", [userID])
        defer { _ = try? conn.execute("CLOSE privacy_export_cursor") }
        switch section.shape {
        case .object:
            let rows = try conn.query("FETCH 1 FROM privacy_export_cursor")
            if let row = rows.first { try sink.write(try row.string("j")) } else { try sink.write("null") }
        case .list:
            try sink.write("[")
            var first = true
            while true {
                if isCancelled() { throw ExportCancelled() }
                let rows = try conn.query("FETCH \(batchSize) FROM privacy_export_cursor")
                for row in rows {
                    try sink.write(first ? "\n" : ",\n")
                    try sink.write(try row.string("j"))
                    first = false
                }
                if rows.count < batchSize { break }
            }
            try sink.write("]")
        }
    }
}
