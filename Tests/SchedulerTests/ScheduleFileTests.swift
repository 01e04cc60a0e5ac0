import Foundation
import WorkersQueue
import XCTest
@testable import WorkersScheduler

final class ScheduleFileTests: XCTestCase {
    func assertProblems(_ yaml: String, _ expected: [String], file: StaticString = #filePath, line: UInt = #line) {
        do {
            let parsed = try ScheduleFile.parse(yaml: yaml, path: "test.yaml")
            XCTFail("accepted: \(parsed.entries.map(\.name))", file: file, line: line)
        } catch {
            XCTAssertEqual(error.path, "test.yaml", file: file, line: line)
            XCTAssertEqual(error.problems.map(\.description), expected, file: file, line: line)
        }
    }

    func testFullEntryAndDefaults() throws {
        let file = try ScheduleFile.parse(yaml: """
            - name: full.entry-1
              cron: "*/5 9-17 * * MON-FRI"
              class: Billing::SweepJob
              queue: critical
              args: [1, 2.5, "3", true, null, {b: 1, a: [x, 2026-01-01]}, 9223372036854775807]
              timezone: Europe/Berlin
              enabled: false
              catch_up: all
              catch_up_window: 1h30m
              pass_tick: date_minus_1
              description: everything set
            - name: minimal
              cron: "@daily"
              klass: MinimalJob
            """)
        XCTAssertEqual(file.entries.count, 2)
        let full = try XCTUnwrap(file.entry(named: "full.entry-1"))
        XCTAssertEqual(full.cron.source, "*/5 9-17 * * MON-FRI")
        XCTAssertEqual(full.className, "Billing::SweepJob")
        XCTAssertEqual(full.queue, "critical")
        XCTAssertEqual(full.args, [1, 2.5, "3", true, .null,
                                   .object(["b": 1, "a": ["x", "2026-01-01"]]), .int(Int64.max)])
        XCTAssertEqual(JSONValue.array(full.args).serialized(), #"[1,2.5,"3",true,null,{"b":1,"a":["x","2026-01-01"]},9223372036854775807]"#)
        XCTAssertEqual(full.timeZone.identifier, "Europe/Berlin")
        XCTAssertFalse(full.enabled)
        XCTAssertEqual(full.catchUp, .all(within: 5400))
        XCTAssertEqual(full.tickArgument, .date(daysBefore: 1))
        XCTAssertEqual(full.description, "everything set")

        let minimal = try XCTUnwrap(file.entry(named: "minimal"))
        XCTAssertEqual(minimal.className, "MinimalJob")
        XCTAssertEqual(minimal.queue, "default")
        XCTAssertEqual(minimal.args, [])
        XCTAssertEqual(minimal.timeZone.secondsFromGMT(), 0)
        XCTAssertTrue(minimal.enabled)
        XCTAssertEqual(minimal.catchUp, .skip)
        XCTAssertEqual(minimal.tickArgument, TickArgument.none)
        XCTAssertNil(minimal.description)
    }

    func testCatchUpDefaults() throws {
        let file = try ScheduleFile.parse(yaml: """
            - {name: a, cron: "@hourly", class: A, catch_up: all}
            - {name: b, cron: "@hourly", class: B, catch_up: latest}
            - {name: c, cron: "@hourly", class: C, catch_up: latest, catch_up_window: 6h}
            - {name: d, cron: "@hourly", class: D, catch_up: skip}
            """)
        XCTAssertEqual(file.entries.map(\.catchUp), [.all(within: 86_400), .latest, .latest(within: 6 * 3600), .skip])
        XCTAssertEqual(file.entries.map(\.catchUp.description), ["all within 1d", "latest", "latest within 6h", "skip"])
    }

    func testEmptyFileHasNoEntries() throws {
        XCTAssertEqual(try ScheduleFile.parse(yaml: "").entries.count, 0)
        XCTAssertEqual(try ScheduleFile.parse(yaml: "# nothing\n[]\n").entries.count, 0)
    }

    func testBadCronUnknownZoneBadCatchUpAreReportedPerEntry() {
        assertProblems("""
            - name: nightly
              cron: "61 0 * * *"
              class: NightlyJob
            - name: berlin
              cron: "@daily"
              class: BerlinJob
              timezone: Europe/Atlantis
            - name: catchy
              cron: "@daily"
              class: CatchyJob
              catch_up: sometimes
            - name: windowed
              cron: "@daily"
              class: WindowJob
              catch_up: all
              catch_up_window: a week
            - name: skipper
              cron: "@daily"
              class: SkipJob
              catch_up_window: 1d
            """, [
                "entry 'nightly': cron: '61 0 * * *': minute: 61 is out of range 0-59",
                "entry 'berlin': timezone: unknown time zone 'Europe/Atlantis' (use an IANA name such as Europe/Berlin)",
                "entry 'catchy': catch_up: 'sometimes' is not one of skip, latest, all",
                "entry 'windowed': catch_up_window: 'a week' is not a duration like 90m, 6h, 7d or 1h30m",
                "entry 'skipper': catch_up_window: catch_up_window has no effect with catch_up: skip",
            ])
    }

    func testDuplicateNames() {
        assertProblems("""
            - {name: sweep, cron: "@hourly", class: A}
            - {name: other, cron: "@hourly", class: B}
            - {name: sweep, cron: "@daily", class: C}
            """, ["entry 'sweep': name: duplicate name (entries #1 and #3)"])
    }

    func testNamesClassesAndShapes() {
        assertProblems("""
            - {name: "bad name!", cron: "@hourly", class: A}
            - {cron: "@hourly", class: A}
            - {name: lower, cron: "@hourly", class: notAClass}
            - {name: both, cron: "@hourly", class: A, klass: B}
            - {name: typo, cron: "@hourly", class: A, catchup: all}
            - just a string
            - {name: argsmap, cron: "@hourly", class: A, args: {a: 1}}
            - {name: inf, cron: "@hourly", class: A, args: [.inf]}
            - {name: flag, cron: "@hourly", class: A, enabled: "yes please"}
            - {name: tick, cron: "@hourly", class: A, pass_tick: tomorrow}
            - {name: nocron, class: A}
            - {name: blankq, cron: "@hourly", class: A, queue: "a b"}
            - {name: globq, cron: "@hourly", class: A, queue: "q*"}
            - {name: nulldesc, cron: "@hourly", class: A, description: }
            """, [
                "entry #1: name: 'bad name!' must be non-empty and use only letters, digits, '_', '.' and '-'",
                "entry #2: name: is required",
                "entry 'lower': class: 'notAClass' is not a class name (like AdRevenueAggregationJob or Billing::Sweep)",
                "entry 'both': class: give either class or klass, not both",
                "entry 'typo': catchup: unknown key (known: args, catch_up, catch_up_window, class, cron, description, enabled, klass, name, pass_tick, queue, timezone)",
                "entry #6: must be a mapping, not a scalar",
                "entry 'argsmap': args: must be a YAML list, not a mapping",
                "entry 'inf': args: '.inf' is not a finite number (JSON has no infinity or NaN)",
                "entry 'flag': enabled: must be true or false",
                "entry 'tick': pass_tick: 'tomorrow' is not one of none, date, date_minus_N, time",
                "entry 'nocron': cron: is required",
                "entry 'blankq': queue: 'a b' must be non-empty without spaces",
                "entry 'globq': queue: invalid queue name: 'q*' contains whitespace or a glob character",
                "entry 'nulldesc': description: must be a string, not null",
            ])
    }

    func testNotAListAndNotYAML() {
        assertProblems("name: x\ncron: '@daily'\n", ["file: must be a YAML list of entries, not a mapping"])
        do {
            _ = try ScheduleFile.parse(yaml: "- name: x\n  cron: */5 * * * *\n", path: "p.yaml")
            XCTFail("unquoted * accepted")
        } catch {
            XCTAssertEqual(error.problems.count, 1)
            XCTAssertTrue(error.problems[0].description.hasPrefix("file: not valid YAML"), error.description)
        }
    }

    func testLoadFromPathAndMissingFile() throws {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("schedule-\(UUID().uuidString).yaml")
        try "- {name: a, cron: '0 1 * * *', class: A}\n".write(to: url, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: url) }
        XCTAssertEqual(try ScheduleFile.load(path: url.path).entries.map(\.name), ["a"])
        do {
            _ = try ScheduleFile.load(path: "/nonexistent/schedule.yaml")
            XCTFail("missing file accepted")
        } catch {
            XCTAssertEqual(error.path, "/nonexistent/schedule.yaml")
            XCTAssertTrue(error.description.contains("file: cannot read"), error.description)
        }
    }

    func testErrorDescriptionListsEveryProblem() {
        let error = ScheduleFileError(path: "config/schedule.yaml", problems: [
            .init(entry: "a", field: "cron", reason: "x"), .init(entry: "#2", field: nil, reason: "y"),
        ])
        XCTAssertEqual(error.description, "config/schedule.yaml: invalid schedule (2 problems):\n  - entry 'a': cron: x\n  - entry #2: y")
    }

    func testDurations() {
        XCTAssertEqual(DurationText.parse("7d"), 7 * 86_400)
        XCTAssertEqual(DurationText.parse("6h"), 6 * 3600)
        XCTAssertEqual(DurationText.parse("90m"), 5400)
        XCTAssertEqual(DurationText.parse("45s"), 45)
        XCTAssertEqual(DurationText.parse("1w"), 7 * 86_400)
        XCTAssertEqual(DurationText.parse("1h30m"), 5400)
        for bad in ["", "7", "d", "7x", "1.5h", "-1h", "7d ", "h1"] { XCTAssertNil(DurationText.parse(bad), bad) }
        XCTAssertEqual(DurationText.format(5400), "1h30m")
        XCTAssertEqual(DurationText.format(7 * 86_400), "7d")
    }

    // MARK: Tick arguments

    func testTickArguments() throws {
        let tick = at("2026-03-29T00:15:00Z")
        func entry(_ pass: TickArgument, _ zone: TimeZone = utcZone, args: [JSONValue] = []) throws -> ScheduleEntry {
            try ScheduleEntry(name: "e", cron: CronExpression("15 0 * * *"), className: "E", args: args, timeZone: zone, tickArgument: pass)
        }
        XCTAssertEqual(try entry(.none).arguments(forTick: tick), [])
        XCTAssertEqual(try entry(.date(daysBefore: 0)).arguments(forTick: tick), [.object(["date": "2026-03-29"])])
        XCTAssertEqual(try entry(.date(daysBefore: 1)).arguments(forTick: tick), [.object(["date": "2026-03-28"])])
        XCTAssertEqual(try entry(.date(daysBefore: 1), args: ["x", 1]).arguments(forTick: tick), ["x", 1, .object(["date": "2026-03-28"])])
        XCTAssertEqual(try entry(.time).arguments(forTick: tick), [.object(["time": "2026-03-29T00:15:00Z"])])
        // The date is the tick's local date: 00:15Z is 20:15 the day before in New York.
        XCTAssertEqual(try entry(.date(daysBefore: 0), newYork).arguments(forTick: tick), [.object(["date": "2026-03-28"])])
        // Across a month and year boundary.
        XCTAssertEqual(try entry(.date(daysBefore: 1)).arguments(forTick: at("2027-01-01T00:15:00Z")), [.object(["date": "2026-12-31"])])
        XCTAssertEqual(TickArgument(yaml: "date_minus_7"), .date(daysBefore: 7))
        XCTAssertNil(TickArgument(yaml: "date_minus_"))
        XCTAssertNil(TickArgument(yaml: "date_minus_-1"))
    }

    // MARK: The project's schedule

    func testProjectScheduleLoads() throws {
        let path = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("config/schedule.yaml").path
        let file = try ScheduleFile.load(path: path)
        let byName = Dictionary(uniqueKeysWithValues: file.entries.map { ($0.name, $0) })
        XCTAssertEqual(Set(file.entries.map(\.className)), [
            "AdRevenueAggregationJob", "AdRevenueNightlyJob", "AdRevenueDayCheckJob", "SubscriptionExpirySweepJob", "DueDeletionSweepJob", "ExportCleanupJob",
            "LocationAnonymizationJob", "PendingRewardSweepJob", "GoogleAcknowledgementSweepJob", "StoreReconciliationJob",
        ])
        let nightly = try XCTUnwrap(byName["ad_revenue_aggregation.nightly"])
        XCTAssertEqual(nightly.catchUp, .all(within: 7 * 86_400))
        XCTAssertEqual(nightly.tickArgument, .date(daysBefore: 1))
        XCTAssertEqual(utc(nightly.nextTick(after: at("2026-11-22T07:00:00Z"))), "2026-11-23T00:15:00Z")
        let hourly = try XCTUnwrap(byName["ad_revenue_aggregation.hourly"])
        XCTAssertEqual(hourly.catchUp, .latest)
        XCTAssertEqual(hourly.tickArgument, .date(daysBefore: 0))
        XCTAssertEqual(byName["subscription_expiry_sweep"]?.cron.minutes.values, [0, 15, 30, 45])
        XCTAssertEqual(byName["pending_reward_sweep"]?.cron.minutes.values, [0, 10, 20, 30, 40, 50])
        XCTAssertEqual(byName["google_acknowledgement_sweep"]?.cron.minutes.values.count, 60)
        XCTAssertEqual(utc(try XCTUnwrap(byName["store_reconciliation"]).nextTick(after: at("2026-11-22T07:00:00Z"))),
                       "2026-11-23T04:20:00Z")
        for entry in file.entries where !entry.name.hasPrefix("ad_revenue_aggregation.nightly") {
            XCTAssertEqual(entry.catchUp.mode, .latest, entry.name)
        }
        XCTAssertTrue(file.entries.allSatisfy(\.enabled))
    }
}
