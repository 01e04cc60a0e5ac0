import Foundation
import Logging
import WorkersQueue
import WorkersStorage
import Workers

/// `AdRevenueAggregationJob` `[{"date": "YYYY-MM-DD", "app_id": "<uuid>", "days": N}]` — every key
/// optional; `[]` or no `date` = yesterday (UTC). Aggregates the `days` (default 1) UTC days ending
/// at `date` into `ad_revenue_daily`, oldest first, one transaction per day (see
/// `RevenueAggregator`), then purges `ad_views`/`ad_requests` past the retention in batches.
///
/// The nightly schedule passes `days: 3`: networks report final revenue days later, so each night
/// re-aggregates the trailing window — late revenue replaces estimates (`estimated` turns false),
/// and a day whose own run died is aggregated again by the next nights. The arguments may come as
/// two objects (the schedule's `args` plus the scheduler's tick object `{"date": …}`); their keys
/// are merged, a key given twice is bad input. Safe to re-run and to deliver twice: a day's rows
/// depend only on the data, never on earlier runs.
public struct AdRevenueAggregationJob: Job {
    public static let options = JobOptions(maxRetries: 10, backoff: .sidekiq, timeout: .seconds(1800), usesLedger: false)

    /// Also the arguments of `AdRevenueNightlyJob` and `AdRevenueDayCheckJob` (which name their own class). A value
    /// is valid by construction (`init(date:app_id:days:)`, and so `init(from:)`, throw `JobError.badInput`).
    /// Typed encoding writes one object (`[{"date", "app_id", "days"}]`, absent keys left out).
    public struct Arguments: JobArguments, Equatable {
        public static let className = "AdRevenueAggregationJob"
        public static let layout = JobArgumentsLayout.positional
        public let date: String?
        public let app_id: String?
        /// Length of the trailing window ending at `date` (1 = that day only).
        public let days: Int?

        /// Longest window a run may cover.
        public static let maxDays = 31

        /// `date` must be a calendar day `YYYY-MM-DD` within 2000-01-01...tomorrow (UTC), `app_id` a UUID, `days`
        /// within 1...`maxDays`.
        public init(date: String? = nil, app_id: String? = nil, days: Int? = nil) throws(JobError) {
            if let date {
                guard let day = Self.parseDay(date) else { throw .badInput("date must be a calendar day YYYY-MM-DD, got '\(date)'") }
                let tomorrow = PostgresDay(utc: Date().addingTimeInterval(86_400))
                guard day.year >= 2000, day <= tomorrow else { throw .badInput("date \(date) is outside 2000-01-01...tomorrow") }
            }
            if let app_id, GeoAdsIdentifier.uuid(app_id) == nil { throw .badInput("app_id must be a UUID") }
            if let days, !(1...Self.maxDays).contains(days) { throw .badInput("days must be 1...\(Self.maxDays), got \(days)") }
            self.date = date
            self.app_id = app_id
            self.days = days
        }

        struct Object: Codable {
            let date: String?
            let app_id: String?
            let days: Int?
        }

        public init(from decoder: any Decoder) throws {
            var container = try decoder.unkeyedContainer()
            var objects: [Object] = []
            while !container.isAtEnd {
                guard objects.count < 2 else {
                    throw DecodingError.dataCorruptedError(in: container, debugDescription: "expected at most two arguments")
                }
                objects.append(try container.decode(Object.self))
            }
            func merged<T>(_ name: String, _ value: (Object) -> T?) throws -> T? {
                let given = objects.compactMap(value)
                guard given.count <= 1 else {
                    throw DecodingError.dataCorruptedError(in: container, debugDescription: "\(name) given twice")
                }
                return given.first
            }
            try self.init(date: try merged("date", \.date), app_id: try merged("app_id", \.app_id),
                          days: try merged("days", \.days))
        }

        public func encode(to encoder: any Encoder) throws {
            var container = encoder.unkeyedContainer()
            try container.encode(Object(date: date, app_id: app_id, days: days))
        }

        /// The days to aggregate, oldest first: `days` (default 1) days ending at `day(now:)`.
        public func window(now: Date = Date()) -> [PostgresDay] {
            let last = day(now: now)
            return (0..<(days ?? 1)).reversed().map { PostgresDay(utc: last.startDate.addingTimeInterval(-86_400 * Double($0))) }
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
    let aggregator: RevenueAggregator

    public init(configuration: AdsConfiguration) {
        self.configuration = configuration
        self.aggregator = RevenueAggregator(estimateDays: configuration.revenueEstimateDays)
    }

    public func perform(_ arguments: Arguments, context: JobContext) throws {
        guard let database = context.database else { throw JobError.permanent("this job needs PostgreSQL but the worker runs without a database") }
        let appID = arguments.app_id.flatMap(GeoAdsIdentifier.uuid)
        // Oldest first, one transaction per day: a run that dies part-way keeps the days it finished. A day's
        // estimate reads the reported revenue of the days before it, never their aggregates, so the order does not
        // change any row.
        for day in arguments.window() {
            if context.isCancelled { throw JobError.retryAfter(.seconds(60), reason: "cancelled before aggregating \(day)") }
            let summary = try database.pool.withConnection { try aggregator.aggregate(day: day, appID: appID, connection: $0) }
            context.logger.info("ad revenue aggregated", metadata: [
                "day": "\(day)", "rows": "\(summary.rows)", "written": "\(summary.written)", "deleted": "\(summary.deleted)",
            ])
        }
        let purged = try aggregator.purge(olderThanYears: configuration.retentionYears, batchSize: configuration.purgeBatchSize,
                                          pool: database.pool, isCancelled: { context.isCancelled })
        if purged > 0 { context.logger.info("old ad data purged", metadata: ["rows": "\(purged)"]) }
    }
}
