import CoreMetrics
import Foundation
import Logging
import WorkersQueue
import WorkersStorage
import Workers

/// The nightly ad revenue run as a batch (docs/batches.md, "Nightly ad revenue"):
///
/// 1. `AdRevenueNightlyJob` (scheduled) finds the apps with ad data in the window and creates batch
///    `ad-revenue-<day>`: one `AdRevenueAggregationJob` per app (`{date, app_id, days}`), on_success
///    `AdRevenueDayCompleteJob`. The bid is fixed by the day, so a second delivery of the nightly job finds the
///    batch there and creates nothing.
/// 2. When every app's job has succeeded, the settle script pushes `AdRevenueDayCompleteJob` once; it writes the
///    day's `ad_revenue_days` row (with its ledger row: a second delivery writes nothing twice).
/// 3. `AdRevenueDayCheckJob` (scheduled in the morning) raises an alert for a day without a row.
enum AdRevenueDay {
    /// The batch id of a day's run.
    static func bid(_ day: PostgresDay) -> String { "ad-revenue-\(day)" }
}

/// `AdRevenueNightlyJob` `[{"days": N}, {"date": "YYYY-MM-DD"}]` (the schedule's args and tick; same keys as
/// `AdRevenueAggregationJob`, without `app_id`): fans the window out as one aggregation job per app, as a batch.
public struct AdRevenueNightlyJob: Job {
    public static let className = "AdRevenueNightlyJob"
    public static let options = JobOptions(maxRetries: 10, backoff: .sidekiq, timeout: .seconds(300), usesLedger: false)

    let client: JobClient
    let queue: String

    /// `queue`: where the per-app jobs and the callback go.
    public init(client: JobClient, queue: String = "default") {
        self.client = client
        self.queue = queue
    }

    public func perform(_ arguments: AdRevenueAggregationJob.Arguments, context: JobContext) throws {
        guard arguments.app_id == nil else { throw JobError.badInput("the nightly run covers every app: app_id is not allowed") }
        guard let database = context.database else { throw JobError.permanent("this job needs PostgreSQL but the worker runs without a database") }
        let window = arguments.window()
        let day = arguments.day()
        let apps = try database.pool.withConnection { try Self.apps(in: window, connection: $0) }
        let days = window.count
        let jobs = try apps.map { app in
            try NewJob(AdRevenueAggregationJob.Arguments(date: "\(day)", app_id: app.uuidString.lowercased(), days: days),
                       queue: queue)
        }
        let callback = BatchCallback(AdRevenueDayCompleteJob.className,
                                     options: .object(["day": .string("\(day)"), "apps": .int(Int64(apps.count))]), queue: queue)
        do {
            let batch = try client.createBatch(NewBatch(description: "ad revenue \(day) (\(days) days, \(apps.count) apps)",
                                                        jobs: jobs, onSuccess: callback), bid: AdRevenueDay.bid(day))
            context.logger.info("ad revenue run fanned out", metadata: ["day": "\(day)", "apps": "\(apps.count)", "bid": "\(batch.bid)"])
        } catch BatchError.alreadyExists(let bid) {
            context.logger.info("ad revenue run already fanned out", metadata: ["day": "\(day)", "bid": "\(bid)"])
        }
    }

    /// Apps with views or requests in the window, or aggregate rows for it (so an app whose data went away
    /// still gets its stale rows removed), in id order.
    static func apps(in window: [PostgresDay], connection: PostgresConnection) throws -> [UUID] {
        guard let first = window.first, let last = window.last else { return [] }
        let rows = try connection.query("""
            WITH bounds AS (SELECT $1::date::timestamp AT TIME ZONE 'UTC' AS lo,
                                   ($2::date + 1)::timestamp AT TIME ZONE 'UTC' AS hi)
            SELECT app_id FROM ad_views, bounds WHERE created_at >= bounds.lo AND created_at < bounds.hi
            UNION SELECT app_id FROM ad_requests, bounds WHERE created_at >= bounds.lo AND created_at < bounds.hi
            UNION SELECT app_id FROM ad_revenue_daily WHERE day BETWEEN $1::date AND $2::date
            ORDER BY app_id
            """, [first, last])
        return try rows.map { try $0.uuid("app_id") }
    }
}

/// `AdRevenueDayCompleteJob` `[status, {"day": "YYYY-MM-DD", "apps": N}]`: the on_success callback of a day's
/// batch. Writes the day's `ad_revenue_days` row with the ledger (a redelivery writes nothing twice).
public struct AdRevenueDayCompleteJob: Job {
    public static let options = JobOptions(maxRetries: 25, backoff: .sidekiq, timeout: .seconds(60), usesLedger: true)
    public init() {}

    /// A value is valid by construction (`JobError.badInput` otherwise): `day` a `YYYY-MM-DD`, `apps` ≥ 0, no job
    /// pending (the callback of a success).
    public struct Arguments: JobArguments, Equatable {
        public static let className = "AdRevenueDayCompleteJob"
        public static let layout = JobArgumentsLayout.positional
        public struct Status: Codable, Sendable, Equatable {
            public let bid: String; public let total: Int; public let pending: Int
            public init(bid: String, total: Int, pending: Int) { (self.bid, self.total, self.pending) = (bid, total, pending) }
        }
        public struct Options: Codable, Sendable, Equatable {
            public let day: String; public let apps: Int
            public init(day: String, apps: Int) { (self.day, self.apps) = (day, apps) }
        }
        public let status: Status
        public let options: Options

        public init(status: Status, options: Options) throws(JobError) {
            guard AdRevenueAggregationJob.Arguments.parseDay(options.day) != nil else { throw .badInput("day must be YYYY-MM-DD") }
            guard options.apps >= 0 else { throw .badInput("apps must not be negative") }
            guard status.pending == 0 else { throw .badInput("called with \(status.pending) jobs pending: not a success") }
            self.status = status
            self.options = options
        }

        public init(from decoder: any Decoder) throws {
            var container = try decoder.unkeyedContainer()
            let status = try container.decode(Status.self)
            let options = try container.decode(Options.self)
            if !container.isAtEnd { throw DecodingError.dataCorruptedError(in: container, debugDescription: "expected two arguments") }
            try self.init(status: status, options: options)
        }

        public func encode(to encoder: any Encoder) throws {
            var container = encoder.unkeyedContainer()
            try container.encode(status)
            try container.encode(options)
        }
    }

    public func perform(_ arguments: Arguments, context: JobContext) throws {
        guard let day = AdRevenueAggregationJob.Arguments.parseDay(arguments.options.day) else { return }
        try context.transaction { connection in
            try connection.execute("""
                INSERT INTO ad_revenue_days (day, bid, apps) VALUES ($1, $2, $3)
                ON CONFLICT (day) DO UPDATE SET bid = EXCLUDED.bid, apps = EXCLUDED.apps, completed_at = now()
                """, [day, arguments.status.bid, arguments.options.apps])
        }
        context.logger.info("ad revenue day complete", metadata: ["day": "\(day)", "apps": "\(arguments.options.apps)"])
    }
}

/// `AdRevenueDayCheckJob` `[{"date": "YYYY-MM-DD"}]` (scheduled each morning, `pass_tick: date_minus_1`): if the
/// day has no `ad_revenue_days` row, logs an error with `alert=ad_revenue_day_incomplete` (and the batch's
/// counts when it still exists) and increments `workers_ad_revenue_days_incomplete_total`. Succeeds either way: the
/// alert is the result, and a retry would not make the day complete.
public struct AdRevenueDayCheckJob: Job {
    public static let className = "AdRevenueDayCheckJob"
    public static let options = JobOptions(maxRetries: 3, backoff: .sidekiq, timeout: .seconds(60), usesLedger: false)

    let redis: RedisPool

    public init(redis: RedisPool) { self.redis = redis }

    public func perform(_ arguments: AdRevenueAggregationJob.Arguments, context: JobContext) throws {
        guard let database = context.database else { throw JobError.permanent("this job needs PostgreSQL but the worker runs without a database") }
        let day = arguments.day()
        let complete = try database.pool.withConnection {
            try $0.queryFirst("SELECT 1 FROM ad_revenue_days WHERE day = $1", [day]) != nil
        }
        if complete {
            context.logger.info("ad revenue day is complete", metadata: ["day": "\(day)"])
            return
        }
        var metadata: Logger.Metadata = ["alert": "ad_revenue_day_incomplete", "day": "\(day)", "bid": "\(AdRevenueDay.bid(day))"]
        if let batch = try? redis.withConnection({ try BatchAdmin.summary($0, bid: AdRevenueDay.bid(day)) }) {
            metadata["total"] = "\(batch.total)"
            metadata["pending"] = "\(batch.pending)"
            metadata["failures"] = "\(batch.failures)"
            metadata["dead"] = "\(batch.dead)"
        } else {
            metadata["batch"] = "none"
        }
        Counter(label: "workers_ad_revenue_days_incomplete_total").increment()
        context.logger.error("ALERT ad revenue day not complete", metadata: metadata)
    }
}
