import Foundation
import Logging
import Storage
import Workers

/// `AdRevenueAggregationJob` `[{"date": "YYYY-MM-DD", "app_id": "<uuid>"}]` — both keys optional;
/// `[]` or no `date` = yesterday (UTC). Aggregates the day into `ad_revenue_daily`
/// (see `RevenueAggregator`), then purges `ad_views`/`ad_requests` past the retention in batches.
/// Safe to re-run and to deliver twice: the result depends only on the day's data.
public struct AdRevenueAggregationJob: Job {
    public static let className = "AdRevenueAggregationJob"
    public static let options = JobOptions(maxRetries: 10, backoff: .sidekiq, timeout: 1800, usesLedger: false)

    public struct Arguments: Decodable, Sendable, ValidatedArguments {
        public let date: String?
        public let app_id: String?

        public init(date: String? = nil, app_id: String? = nil) {
            self.date = date
            self.app_id = app_id
        }

        struct Object: Decodable {
            let date: String?
            let app_id: String?
        }

        public init(from decoder: any Decoder) throws {
            var container = try decoder.unkeyedContainer()
            if container.isAtEnd {
                date = nil
                app_id = nil
                return
            }
            let object = try container.decode(Object.self)
            if !container.isAtEnd {
                throw DecodingError.dataCorruptedError(in: container, debugDescription: "expected at most one argument")
            }
            date = object.date
            app_id = object.app_id
        }

        public func validate() throws(JobError) {
            if let date {
                guard let day = Self.parseDay(date) else { throw .badInput("date must be a calendar day YYYY-MM-DD, got '\(date)'") }
                let tomorrow = PostgresDay(utc: Date().addingTimeInterval(86_400))
                guard day.year >= 2000, day <= tomorrow else { throw .badInput("date \(date) is outside 2000-01-01...tomorrow") }
            }
            if let app_id, GeoAdsIdentifier.uuid(app_id) == nil { throw .badInput("app_id must be a UUID") }
        }

        /// The day to aggregate: the given one, else yesterday (UTC) at `now`.
        public func day(now: Date = Date()) -> PostgresDay {
            date.flatMap(Self.parseDay) ?? PostgresDay(utc: now.addingTimeInterval(-86_400))
        }

        /// Strict `YYYY-MM-DD` of a day that exists.
        public static func parseDay(_ text: String) -> PostgresDay? {
            let parts = text.split(separator: "-", omittingEmptySubsequences: false)
            guard parts.count == 3, parts[0].count == 4, parts[1].count == 2, parts[2].count == 2,
                  parts.allSatisfy({ $0.allSatisfy(\.isASCII) && $0.allSatisfy(\.isNumber) }),
                  let year = Int(parts[0]), let month = Int(parts[1]), let day = Int(parts[2]),
                  (1...12).contains(month), (1...31).contains(day) else { return nil }
            let value = PostgresDay(year: year, month: month, day: day)
            return PostgresDay(utc: value.startDate) == value ? value : nil
        }
    }

    let configuration: AdsConfiguration
    let aggregator = RevenueAggregator()

    public init(configuration: AdsConfiguration) { self.configuration = configuration }

    public func perform(_ arguments: Arguments, context: JobContext) throws {
        guard let database = context.database else { throw JobError.permanent("this job needs PostgreSQL but the worker runs without a database") }
        let day = arguments.day()
        let appID = arguments.app_id.flatMap(GeoAdsIdentifier.uuid)
        let summary = try database.pool.withConnection { try aggregator.aggregate(day: day, appID: appID, connection: $0) }
        context.logger.info("ad revenue aggregated", metadata: [
            "day": "\(day)", "rows": "\(summary.rows)", "written": "\(summary.written)", "deleted": "\(summary.deleted)",
        ])
        let purged = try aggregator.purge(olderThanYears: configuration.retentionYears, batchSize: configuration.purgeBatchSize,
                                          pool: database.pool, isCancelled: { context.isCancelled })
        if purged > 0 { context.logger.info("old ad data purged", metadata: ["rows": "\(purged)"]) }
    }
}
