import Foundation

/// Where per-class execution metrics live in Redis: Sidekiq 8's layout (sidekiq/lib/sidekiq/metrics/tracking.rb and
/// shared.rb, `ExecutionTracker#flush`, `Histogram#persist`), so Sidekiq Web's Metrics tab reads what our workers
/// write, plus two histograms of our own with 32-bit counters.
///
/// - `j|YYMMDD|H:MM` — HASH per UTC minute (hour without padding, minute with: `j|261127|8:05`), fields
///   `Class|p` (runs), `Class|f` (failed runs), `Class|ms` (milliseconds of successful runs); TTL 8 h.
/// - `j|YYMMDD|H:M` — the same per ten minutes (the minute's last digit dropped: `j|261127|8:0`); TTL 3 days.
/// - `h|Class-D-H:M` — Sidekiq's histogram of successful runs' durations for one minute (day of month, hour, minute,
///   unpadded): BITFIELD of 26 `u16` counters (saturating), buckets `bucketUpperBoundsMs`; TTL 8 h.
/// - `hx|Class|YYMMDD|H:MM` and `hx|Class|YYMMDD|H:M` — ours: the same histogram per minute (TTL 8 h) and per ten
///   minutes (TTL 3 days) with `u32` counters, which the last-hour and last-day percentiles are read from (a `u16`
///   bucket saturates past 65,535 runs of one class in a minute, ~1,100 jobs/s).
///
/// Class names come from producers and are unbounded: a process records its registered classes under their names
/// and every other class under `otherClass`.
///
/// Pure; any thread.
package enum ClassMetricsLayout {
    /// The entry every class a process has not registered is counted under.
    package static let otherClass = "_other"
    /// Upper bounds (exclusive) in milliseconds of the histogram's 26 buckets (Sidekiq's `BUCKET_INTERVALS`); the
    /// last bucket holds every slower run.
    package static let bucketUpperBoundsMs: [Double] = [
        20, 30, 45, 65, 100, 150, 225, 335, 500, 750, 1_100, 1_700, 2_500, 3_800, 5_750, 8_500, 13_000, 20_000,
        30_000, 45_000, 65_000, 100_000, 150_000, 225_000, 335_000, .infinity,
    ]
    package static let minuteTTLSeconds = 8 * 3_600
    package static let tenMinuteTTLSeconds = 3 * 86_400

    /// The bucket (0…25) of a run that took `milliseconds` (NaN or negative: 0).
    package static func bucket(milliseconds: Double) -> Int {
        guard milliseconds > 0 else { return 0 }
        return bucketUpperBoundsMs.firstIndex { milliseconds < $0 } ?? bucketUpperBoundsMs.count - 1
    }

    /// The UTC minute of `epochSeconds` as Sidekiq names it: `YYMMDD|H:MM`, and its ten-minute bucket `YYMMDD|H:M`,
    /// and Sidekiq's histogram window `D-H:M`.
    package struct Minute: Sendable, Equatable {
        package let minute: String
        package let tenMinutes: String
        package let histogramWindow: String

        package init(epochSeconds: Double) {
            var t = time_t(Int((epochSeconds / 60).rounded(.down)) * 60)
            var parts = tm()
            gmtime_r(&t, &parts)
            let date = String(format: "%02d%02d%02d", Int(parts.tm_year) % 100, Int(parts.tm_mon) + 1, Int(parts.tm_mday))
            let hour = Int(parts.tm_hour), minuteOfHour = Int(parts.tm_min)
            minute = "\(date)|\(hour):" + String(format: "%02d", minuteOfHour)
            tenMinutes = "\(date)|\(hour):\(minuteOfHour / 10)"
            histogramWindow = "\(Int(parts.tm_mday))-\(hour):\(minuteOfHour)"
        }
    }

    package static func counters(_ bucket: String) -> String { "j|" + bucket }
    package static func sidekiqHistogram(className: String, window: String) -> String { "h|\(className)-\(window)" }
    package static func histogram(className: String, bucket: String) -> String { "hx|\(className)|\(bucket)" }
    package static func runsField(_ className: String) -> String { className + "|p" }
    package static func failedField(_ className: String) -> String { className + "|f" }
    package static func millisecondsField(_ className: String) -> String { className + "|ms" }
}
