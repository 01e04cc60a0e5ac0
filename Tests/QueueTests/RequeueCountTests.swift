import Foundation
import WorkersQueue
import XCTest

/// Issue 51 point 5: an operator's retry decrements `retry_count` (Ruby's `SortedEntry#retry`) but never below −1,
/// the least a readable job carries, and a hostile count at Int64's limits neither traps nor survives: the requeued
/// payload always parses as a job again.
final class RequeueCountTests: XCTestCase {
    func testARetriedJobsCountNeverGoesBelowMinusOneNorTraps() throws {
        let cases: [(Int64, Int64)] = [(5, 4), (0, -1), (-1, -1), (-2, -1), (.min, -1), (.max, Int64(Bounded.maxCount) - 1)]
        for (count, expected) in cases {
            // Built field by field: a payload parsed from Redis with such a count is refused before an admin move.
            let payload = JobPayload(fields: ["class": "Noop", "args": [], "jid": "0123456789abcdef01234567", "queue": "default",
                                              "retry_count": .int(count)])
            let requeued = JobAdmin.requeued(payload, decrementRetryCount: true, now: 1_800_000_000)
            XCTAssertEqual(requeued.fields["retry_count"]?.intValue, expected, "retry_count \(count)")
            XCTAssertNoThrow(try JobPayload(parsing: requeued.serialized()), "retry_count \(count): the job stays readable")
        }
        // Retried again and again (retry, dead, retry, … by hand): it stays at −1.
        var payload = try JobPayload(parsing: #"{"class":"Noop","args":[],"jid":"0123456789abcdef01234567","queue":"default","retry_count":0}"#)
        for _ in 0..<3 { payload = JobAdmin.requeued(payload, decrementRetryCount: true, now: 1_800_000_000) }
        XCTAssertEqual(payload.fields["retry_count"]?.intValue, -1)
    }
}
