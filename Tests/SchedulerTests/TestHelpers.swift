import Foundation
import XCTest

/// Parses an ISO-8601 instant with an explicit offset, e.g. `2026-03-29T03:00:00+02:00`.
func at(_ text: String, file: StaticString = #filePath, line: UInt = #line) -> Date {
    let formatter = ISO8601DateFormatter()
    formatter.formatOptions = [.withInternetDateTime]
    guard let date = formatter.date(from: text) else {
        XCTFail("bad test date \(text)", file: file, line: line)
        return Date(timeIntervalSince1970: 0)
    }
    return date
}

/// Formats an instant in UTC as `2026-03-29T01:00:00Z` (readable assertion failures).
func utc(_ date: Date?) -> String {
    guard let date else { return "nil" }
    let formatter = ISO8601DateFormatter()
    formatter.formatOptions = [.withInternetDateTime]
    formatter.timeZone = TimeZone(identifier: "UTC")
    return formatter.string(from: date)
}

func zone(_ identifier: String) -> TimeZone { TimeZone(identifier: identifier)! }

let berlin = zone("Europe/Berlin")
let newYork = zone("America/New_York")
let utcZone = zone("UTC")
