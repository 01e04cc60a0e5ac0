import Foundation
import WorkersScheduler

/// A cron expression from a schedule file or an operator (`workerctl cron`, the dashboard): parse, then the
/// next and previous fire times and a few ticks, in UTC and in two zones with daylight saving (Europe/Berlin,
/// Australia/Lord_Howe's 30-minute shift). The clock is fixed (2026-11-27T00:00:00Z).
///
/// Contract checked (`CronExpression`'s invariants): an expression that parses fires within 50 years, before and
/// after now; the next tick is later than now and, in UTC, matches the expression; ticks increase.
public enum CronHarness {
    static let now = Date(timeIntervalSince1970: 1_795_737_600)
    static let zones = ["UTC", "Europe/Berlin", "Australia/Lord_Howe"].compactMap(TimeZone.init(identifier:))

    public static func run(_ data: [UInt8]) {
        let text = String(decoding: data, as: UTF8.self)
        guard let cron = try? CronExpression(text) else { return }
        check(cron)
    }

    static func check(_ cron: CronExpression) {
        FuzzSink.keep(cron.description)
        FuzzSink.keep(cron.hasSeconds)
        for zone in zones {
            guard let next = cron.next(after: now, in: zone) else {
                FuzzHarness.violated("'\(cron)' parses but never fires after now in \(zone.identifier)")
            }
            guard next > now else { FuzzHarness.violated("'\(cron)': next(after:) is not after now") }
            if zone.identifier == "UTC", !cron.matches(next, in: zone) {
                FuzzHarness.violated("'\(cron)': next(after:) gives a time the expression does not match")
            }
            guard cron.previous(atOrBefore: now, in: zone) != nil else {
                FuzzHarness.violated("'\(cron)' parses but never fired before now in \(zone.identifier)")
            }
            let ticks = cron.ticks(from: now, to: now.addingTimeInterval(3 * 86_400), in: zone, limit: 4)
            for (a, b) in zip(ticks, ticks.dropFirst()) where !(a < b) {
                FuzzHarness.violated("'\(cron)': ticks do not increase")
            }
        }
    }
}
