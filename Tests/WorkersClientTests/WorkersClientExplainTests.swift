import Foundation
import WorkersTestServices
import WorkersClient
import XCTest

/// `WorkersClient.explain(jid:)` and `status(jid:)` (issue 36 points 1 and 2): the reason, the attempts, the
/// progress a job reported (`progress:<jid>`, the agreed layout) and a requested cancel (`cancelled-<jid>`), and the
/// ledger through `JobLedgerLookup`. Redis database 161.
final class WorkersClientExplainTests: XCTestCase {
    struct FixedLedger: JobLedgerLookup {
        let rows: [String: LedgerRow]
        func row(jid: String) throws -> LedgerRow? { rows[jid] }
    }

    func testStatusCarriesTheReasonProgressAndCancel() async throws {
        let client = try WorkersClient(url: TestServices.redisURL(db: 161), maxConnections: 2)
        defer { client.shutdown() }
        _ = try await client.withConnection { try $0.command("FLUSHDB") }
        let at = Date().addingTimeInterval(600)
        let jid = try await client.enqueue(NewJob("NoSuchJob", queue: "later"), at: at)
        let progressAt = Date().timeIntervalSince1970
        _ = try await client.withConnection { connection in
            _ = try connection.command("SET", JobProgress.key(jid: jid), "{\"fraction\":0.25,\"note\":\"page 1 of 4\",\"at\":\(progressAt)}", "EX", 60)
            _ = try connection.command("SET", JobCancels.markKey(jid: jid), "\(Int(progressAt))", "EX", 60)
        }

        guard case .scheduled(let when, "later") = try await client.explain(jid: jid) else { return XCTFail("not scheduled") }
        XCTAssertEqual(when.timeIntervalSince1970, at.timeIntervalSince1970, accuracy: 0.01)
        let status = try await client.status(jid: jid)
        XCTAssertEqual(status.state, .scheduled)
        XCTAssertEqual(status.attempts, 0)
        XCTAssertEqual(status.progress?.fraction, 0.25)
        XCTAssertEqual(status.progress?.note, "page 1 of 4")
        XCTAssertEqual(status.cancelRequestedAt?.timeIntervalSince1970, Double(Int(progressAt)))
        XCTAssertEqual(status.shard, "default")

        // A jid Redis does not know: unknown, or done when the ledger has its row.
        let gone = "feedfacefeedfacefeedface"
        let unknown = try await client.explain(jid: gone)
        XCTAssertEqual(unknown, .unknown(jid: gone, searchIncomplete: false))
        let finished = Date(timeIntervalSince1970: 1_800_000_000)
        let ledger = FixedLedger(rows: [gone: LedgerRow(className: "ReportJob", queue: "default", startedAt: nil, finishedAt: finished)])
        let done = try await client.explain(jid: gone, ledger: ledger)
        XCTAssertEqual(done, .done(finishedAt: finished, className: "ReportJob", queue: "default"))
        let doneStatus = try await client.status(jid: gone, ledger: ledger)
        XCTAssertNil(doneStatus.state)
        XCTAssertEqual(doneStatus.explanation.description, "done: ReportJob on queue default finished at 2027-01-15T08:00:00Z (job_ledger)")
        _ = try await client.withConnection { try $0.command("FLUSHDB") }
    }
}
