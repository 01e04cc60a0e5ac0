import WorkersCivilDate
import Foundation
import XCTest

/// The one calendar implementation Storage and Scheduler share, checked against Foundation's
/// Gregorian calendar in UTC.
final class CivilDateTests: XCTestCase {
    func testDayCountsMatchFoundationAcrossCenturiesAndLeapDays() throws {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = try XCTUnwrap(TimeZone(identifier: "UTC"))
        // Every 37th day from 1600 to 2400: leap days, century years, the 1970 epoch, negative counts.
        for days in stride(from: CivilDate.days(year: 1600, month: 1, day: 1),
                           through: CivilDate.days(year: 2400, month: 12, day: 31), by: 37) {
            let date = CivilDate.date(fromDays: days)
            XCTAssertEqual(CivilDate.days(year: date.year, month: date.month, day: date.day), days)
            let parts = calendar.dateComponents([.year, .month, .day, .weekday],
                                                from: Date(timeIntervalSince1970: Double(days) * 86_400))
            XCTAssertEqual([date.year, date.month, date.day], [parts.year, parts.month, parts.day], "day \(days)")
            XCTAssertEqual(CivilDate.weekday(ofDays: days), (parts.weekday ?? 0) - 1, "day \(days)")
        }
        XCTAssertEqual(CivilDate.days(year: 1970, month: 1, day: 1), 0)
        XCTAssertEqual(CivilDate.daysInMonth(year: 2000, month: 2), 29)
        XCTAssertEqual(CivilDate.daysInMonth(year: 1900, month: 2), 28)
        XCTAssertEqual(CivilDate.daysInMonth(year: 2024, month: 4), 30)
    }

    func testFloorDivisionRoundsTowardsNegativeInfinity() {
        XCTAssertEqual(CivilDate.floorDiv(-1, 86_400), -1)
        XCTAssertEqual(CivilDate.floorDiv(86_399, 86_400), 0)
        XCTAssertEqual(CivilDate.floorDivMod(-1, 1_000_000).quotient, -1)
        XCTAssertEqual(CivilDate.floorDivMod(-1, 1_000_000).remainder, 999_999)
    }
}
