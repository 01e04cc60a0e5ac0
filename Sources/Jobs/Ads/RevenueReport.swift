import Foundation
import WorkersQueue
import WorkersStorage

/// The ad revenue report behind `workerctl revenue --from D --to D [--csv | --json]`: the rows of
/// `ad_revenue_daily` for a range of UTC days (inclusive), ordered by day, app, ad type, provider
/// and placement. Rows with `ad_type = ''` are the app's totals for the day.
public struct RevenueReport: Sendable, Equatable {
    public struct Row: Sendable, Equatable {
        public let day: PostgresDay
        public let appID: UUID
        public let adType: String
        public let provider: String
        public let placement: String
        public let requests: Int64
        public let impressions: Int64
        public let clicks: Int64
        public let completions: Int64
        /// Exact decimal text with 6 decimals, as PostgreSQL stores it (money: no binary floats).
        public let revenueUSD: String
        public let averageDisplayDurationMs: Double?
        public let ecpm: Double?
        public let fillRate: Double?
        public let ctr: Double?
        public let completionRate: Double?
        public let estimated: Bool

        /// Whether this row is an app's total for the day.
        public var isTotal: Bool { adType.isEmpty }
    }

    public let from: PostgresDay
    public let to: PostgresDay
    public let rows: [Row]

    public init(from: PostgresDay, to: PostgresDay, rows: [Row]) {
        self.from = from
        self.to = to
        self.rows = rows
    }

    public static func load(pool: PostgresPool, from: PostgresDay, to: PostgresDay, appID: UUID? = nil) throws -> RevenueReport {
        let rows = try pool.withConnection { connection in
            try connection.query("""
                SELECT day, app_id, ad_type, provider, placement, requests, impressions, clicks, completions,
                       revenue_usd::text AS revenue_usd, avg_display_duration_ms, ecpm, fill_rate, ctr, completion_rate,
                       estimated
                FROM ad_revenue_daily
                WHERE day BETWEEN $1::date AND $2::date AND ($3::uuid IS NULL OR app_id = $3::uuid)
                ORDER BY day, app_id, ad_type, provider, placement
                """, [from, to, appID]).map { row in
                Row(day: try row.day("day"), appID: try row.uuid("app_id"), adType: try row.string("ad_type"),
                    provider: try row.string("provider"), placement: try row.string("placement"),
                    requests: try row.int64("requests"), impressions: try row.int64("impressions"),
                    clicks: try row.int64("clicks"), completions: try row.int64("completions"),
                    revenueUSD: try row.string("revenue_usd"),
                    averageDisplayDurationMs: try row.optionalDouble("avg_display_duration_ms"),
                    ecpm: try row.optionalDouble("ecpm"), fillRate: try row.optionalDouble("fill_rate"),
                    ctr: try row.optionalDouble("ctr"), completionRate: try row.optionalDouble("completion_rate"),
                    estimated: try row.bool("estimated"))
            }
        }
        return RevenueReport(from: from, to: to, rows: rows)
    }

    public static let csvHeader = "day,app_id,ad_type,provider,placement,requests,impressions,clicks,completions,"
        + "revenue_usd,avg_display_duration_ms,ecpm,fill_rate,ctr,completion_rate,estimated"

    /// RFC 4180 CSV with a header line; CRLF-free (`\n` line ends); NULL metrics are empty fields;
    /// ratios with 6 decimals.
    public func csv() -> String {
        var out = Self.csvHeader + "\n"
        for row in rows {
            let fields: [String] = [
                row.day.description, row.appID.uuidString.lowercased(), Self.csvField(row.adType),
                Self.csvField(row.provider), Self.csvField(row.placement), String(row.requests),
                String(row.impressions), String(row.clicks), String(row.completions), row.revenueUSD,
                Self.number(row.averageDisplayDurationMs, 1), Self.number(row.ecpm, 6), Self.number(row.fillRate, 6),
                Self.number(row.ctr, 6), Self.number(row.completionRate, 6), row.estimated ? "true" : "false",
            ]
            out += fields.joined(separator: ",") + "\n"
        }
        return out
    }

    /// `{"from": D, "to": D, "rows": [{...}]}`, compact, keys in the CSV's order; `revenue_usd`
    /// is a decimal string, NULL metrics are null.
    public func json() -> String {
        func number(_ value: Double?) -> JSONValue { value.map { .double($0) } ?? .null }
        let items: [JSONValue] = rows.map { row in
            .object([
                "day": .string(row.day.description), "app_id": .string(row.appID.uuidString.lowercased()),
                "ad_type": .string(row.adType), "provider": .string(row.provider), "placement": .string(row.placement),
                "requests": .int(row.requests), "impressions": .int(row.impressions), "clicks": .int(row.clicks),
                "completions": .int(row.completions), "revenue_usd": .string(row.revenueUSD),
                "avg_display_duration_ms": number(row.averageDisplayDurationMs), "ecpm": number(row.ecpm),
                "fill_rate": number(row.fillRate), "ctr": number(row.ctr), "completion_rate": number(row.completionRate),
                "estimated": .bool(row.estimated),
            ])
        }
        return JSONValue.object(["from": .string(from.description), "to": .string(to.description), "rows": .array(items)])
            .serialized()
    }

    static func number(_ value: Double?, _ decimals: Int) -> String {
        guard let value else { return "" }
        return String(format: "%.\(decimals)f", value)
    }

    /// A CSV field, quoted when it holds a comma, quote or line break.
    public static func csvField(_ text: String) -> String {
        guard text.contains(where: { $0 == "," || $0 == "\"" || $0 == "\n" || $0 == "\r" }) else { return text }
        return "\"" + text.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }
}
