import Foundation
import WorkersScheduler

/// A schedule file (`config/schedule.yaml`): `ScheduleFile.parse(yaml:)`, then for every entry its next and
/// previous tick, its arguments for a tick (`pass_tick`) and its catch-up policy's description.
/// The clock is fixed (2026-11-27T00:00:00Z).
public enum ScheduleFileHarness {
    static let now = Date(timeIntervalSince1970: 1_795_737_600)

    public static func run(_ data: [UInt8]) {
        let text = String(decoding: data, as: UTF8.self)
        let file: ScheduleFile
        do { file = try ScheduleFile.parse(yaml: text) } catch {
            FuzzSink.keep(error.description)
            return
        }
        for entry in file.entries {
            FuzzSink.keep(entry.catchUp.description)
            FuzzSink.keep(entry.tickArgument.description)
            FuzzSink.keep(entry.withEnabled(!entry.enabled))
            guard let next = entry.nextTick(after: now) else {
                FuzzHarness.violated("entry '\(entry.name)' parses but never fires")
            }
            FuzzSink.keep(entry.previousTick(atOrBefore: now))
            FuzzSink.keep(entry.arguments(forTick: next))
            FuzzSink.keep(TickFormat.iso8601UTC(next))
        }
    }
}
