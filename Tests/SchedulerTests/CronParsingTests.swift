import Foundation
import XCTest
@testable import WorkersScheduler

final class CronParsingTests: XCTestCase {
    func testFieldsStepsRangesLists() throws {
        let cron = try CronExpression("10-40/5 5/10 */15 1,6-7 *")
        XCTAssertFalse(cron.hasSeconds)
        XCTAssertEqual(cron.seconds.values, [0])
        XCTAssertEqual(cron.minutes.values, [10, 15, 20, 25, 30, 35, 40])
        XCTAssertEqual(cron.hours.values, [5, 15])
        XCTAssertEqual(cron.days.monthDays.values, [1, 16, 31])
        XCTAssertEqual(cron.months.values, [1, 6, 7])
        XCTAssertTrue(cron.days.monthDaysRestricted)
        XCTAssertFalse(cron.days.weekdaysRestricted)
    }

    func testStarStep() throws {
        XCTAssertEqual(try CronExpression("*/15 * * * *").minutes.values, [0, 15, 30, 45])
        XCTAssertEqual(try CronExpression("0 */6 * * *").hours.values, [0, 6, 12, 18])
        XCTAssertEqual(try CronExpression("0 0 * * */2").days.weekdays.values, [0, 2, 4, 6])
    }

    func testNamesAreCaseInsensitiveAndSundayIsZeroOrSeven() throws {
        let cron = try CronExpression("0 9 * jan,JUL,Dec MON-FRI")
        XCTAssertEqual(cron.months.values, [1, 7, 12])
        XCTAssertEqual(cron.days.weekdays.values, [1, 2, 3, 4, 5])
        XCTAssertEqual(try CronExpression("0 0 * * 7").days.weekdays.values, [0])
        XCTAssertEqual(try CronExpression("0 0 * * sun").days.weekdays.values, [0])
        XCTAssertEqual(try CronExpression("0 0 * * 5-7").days.weekdays.values, [0, 5, 6])
        XCTAssertEqual(try CronExpression("0 0 * * *").days.weekdays.values, [0, 1, 2, 3, 4, 5, 6])
    }

    func testSixFieldsHaveLeadingSeconds() throws {
        let cron = try CronExpression("*/20 0 12 * * *")
        XCTAssertTrue(cron.hasSeconds)
        XCTAssertEqual(cron.seconds.values, [0, 20, 40])
        XCTAssertEqual(cron.minutes.values, [0])
        XCTAssertEqual(cron.hours.values, [12])
    }

    func testMacros() throws {
        XCTAssertEqual(try CronExpression("@yearly").minutes.values, [0])
        for (macro, expanded) in [("@yearly", "0 0 1 1 *"), ("@annually", "0 0 1 1 *"), ("@monthly", "0 0 1 * *"),
                                  ("@weekly", "0 0 * * 0"), ("@daily", "0 0 * * *"), ("@midnight", "0 0 * * *"),
                                  ("@noon", "0 12 * * *"), ("@hourly", "0 * * * *"), ("@DAILY", "0 0 * * *")] {
            let a = try CronExpression(macro), b = try CronExpression(expanded)
            XCTAssertEqual([a.seconds, a.minutes, a.hours, a.months], [b.seconds, b.minutes, b.hours, b.months], macro)
            XCTAssertEqual(a.days, b.days, macro)
            XCTAssertEqual(a.hourIsPeriodic, b.hourIsPeriodic, macro)
            XCTAssertEqual(a.source, macro)
        }
        XCTAssertTrue(try CronExpression("@hourly").hourIsPeriodic)
        XCTAssertFalse(try CronExpression("@daily").hourIsPeriodic)
    }

    func testHourPeriodicity() throws {
        XCTAssertTrue(try CronExpression("0 */2 * * *").hourIsPeriodic)
        XCTAssertTrue(try CronExpression("0 8-18/2 * * *").hourIsPeriodic)
        XCTAssertTrue(try CronExpression("*/5 * * * *").hourIsPeriodic)
        XCTAssertFalse(try CronExpression("*/5 2 * * *").hourIsPeriodic)
        XCTAssertFalse(try CronExpression("0 1,2,3 * * *").hourIsPeriodic)
        XCTAssertFalse(try CronExpression("0 1-3 * * *").hourIsPeriodic)
    }

    func testLastDayAndNthWeekday() throws {
        let last = try CronExpression("0 0 L * *")
        XCTAssertTrue(last.days.lastDayOfMonth)
        let nth = try CronExpression("0 0 * * mon#2,fri#L,0#-1")
        XCTAssertEqual(nth.days.nthWeekdays.map(\.weekday), [1, 5, 0])
        XCTAssertEqual(nth.days.nthWeekdays.map(\.n), [2, -1, -1])
    }

    func assertRefused(_ text: String, _ expected: String, file: StaticString = #filePath, line: UInt = #line) {
        do {
            _ = try CronExpression(text)
            XCTFail("'\(text)' was accepted", file: file, line: line)
        } catch {
            XCTAssertEqual(error.description, expected, file: file, line: line)
            XCTAssertEqual(error.expression, text.trimmingCharacters(in: .whitespaces), file: file, line: line)
        }
    }

    func testInvalidExpressionsNameFieldAndReason() {
        assertRefused("61 * * * *", "minute: 61 is out of range 0-59")
        assertRefused("0 24 * * *", "hour: 24 is out of range 0-23")
        assertRefused("0 0 0 * *", "day-of-month: 0 is out of range 1-31")
        assertRefused("0 0 * 13 *", "month: 13 is out of range 1-12")
        assertRefused("0 0 * * 8", "day-of-week: 8 is out of range 0-7")
        assertRefused("60 0 0 * * *", "second: 60 is out of range 0-59")
        assertRefused("0 0 * foo *", "month: 'foo' is not a number or a name (jan-dec)")
        assertRefused("0 0 * * funday", "day-of-week: 'funday' is not a number or a name (sun-sat)")
        assertRefused("0 mon * * *", "hour: 'mon' is not a number")
        assertRefused("*/0 * * * *", "minute: step 0 in '*/0' must be at least 1")
        assertRefused("*/60 * * * *", "minute: step 60 in '*/60' is larger than the field's range 0-59")
        assertRefused("*/x * * * *", "minute: step 'x' in '*/x' is not a number")
        assertRefused("40-10 * * * *", "minute: range '40-10' is reversed (40 > 10)")
        assertRefused("1,,2 * * * *", "minute: empty element in list '1,,2'")
        assertRefused("-5 * * * *", "minute: '-5' is not a number")
        assertRefused("0 0 * * mon#6", "day-of-week: 'mon#6': the occurrence after '#' must be 1-5, L or -1")
        assertRefused("0 0 30 2 *", "day-of-month: day(s) 30 never occur in month(s) 2")
        assertRefused("0 0 31 4,6 *", "day-of-month: day(s) 31 never occur in month(s) 4,6")
        assertRefused("* * * *", "expected 5 fields (minute hour day-of-month month day-of-week) or 6 (with leading seconds), got 4")
        assertRefused("* * * * * * *", "expected 5 fields (minute hour day-of-month month day-of-week) or 6 (with leading seconds), got 7")
        assertRefused("   ", "empty cron expression")
        assertRefused("@reboot", "unknown macro '@reboot' (expected one of @annually @daily @hourly @midnight @monthly @noon @weekly @yearly)")
        assertRefused("1h", "expected 5 fields (minute hour day-of-month month day-of-week) or 6 (with leading seconds), got 1")
    }

    /// Found by fuzzing (issue 32, Tests/FuzzCorpus/cron/dow-7-step-empty-set.txt): `7/n` in day-of-week meant
    /// "from 7 to 6", an empty set, so the expression parsed but never fired (the scheduler skipped it forever,
    /// silently). Every element must select at least one value.
    func testAnElementSelectingNoValueIsRefused() {
        assertRefused("0 0 * * 7/2", "day-of-week: '7/2' selects no value (Sunday is 0 in a step: 0/2)")
        assertRefused("0 0 * * 7/1", "day-of-week: '7/1' selects no value (Sunday is 0 in a step: 0/1)")
        XCTAssertEqual(try CronExpression("0 0 * * 0/2").days.weekdays.values, [0, 2, 4, 6])
        XCTAssertEqual(try CronExpression("0 0 * * 5/1").days.weekdays.values, [5, 6])
    }

    func testErrorCarriesTheField() {
        do {
            _ = try CronExpression("0 0 32 * *")
            XCTFail("accepted")
        } catch {
            XCTAssertEqual(error.field, .dayOfMonth)
            XCTAssertEqual(error.reason, "32 is out of range 1-31")
        }
    }

    func testThirtyDaysIsFineWhenSomeMonthHasIt() throws {
        XCTAssertNoThrow(try CronExpression("0 0 30 2,3 *"))
        XCTAssertNoThrow(try CronExpression("0 0 29 2 *"))
        XCTAssertNoThrow(try CronExpression("0 0 30 2 mon"))  // OR with day-of-week: Mondays in February
    }
}
