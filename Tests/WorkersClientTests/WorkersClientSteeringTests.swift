import Foundation
import WorkersTestServices
import WorkersClient
import XCTest

/// `WorkersClient.progress(jid:)` and `cancel(jid:)` against the real Redis (the worker's side: WorkersTests'
/// SteerTests).
final class WorkersClientSteeringTests: XCTestCase {
    func testProgressIsReadByJidBoundedAndCancelMovesAScheduledJobToDeadAndMarksIt() async throws {
        let client = try WorkersClient(url: TestServices.redisURL(db: 162), maxConnections: 2)
        defer { client.shutdown() }
        _ = try await client.withConnection { try $0.command("FLUSHDB") }

        let unknown = try await client.progress(jid: "0123456789abcdef01234567")
        XCTAssertNil(unknown)
        let written = #"{"fraction":1.5,"note":"half\u0007 way","at":1800000000.25}"#
        _ = try await client.withConnection { try $0.command("SET", JobProgress.key(jid: "aaaaaaaaaaaaaaaaaaaaaaaa"), written) }
        let read = try await client.progress(jid: "aaaaaaaaaaaaaaaaaaaaaaaa")
        XCTAssertEqual(read?.fraction, 1)
        XCTAssertEqual(read?.note, "half way")
        XCTAssertEqual(read?.at, Date(timeIntervalSince1970: 1_800_000_000.25))

        let jid = try await client.enqueue(NewJob("Noop"), in: .seconds(3600))
        let outcomes = try await client.cancel(jid: jid)
        XCTAssertEqual(outcomes.map(\.value.movedToDead), [[.scheduled]])
        let state = try await client.withConnection { connection in
            (try connection.command("ZCARD", Keys.schedule).integer, try connection.command("GET", JobCancels.markKey(jid: jid)).string,
             try connection.command("ZSCORE", JobCancels.set, jid).double,
             try JobAdmin(connection: connection).find(jid: jid, in: [.dead]).first?.errorClass)
        }
        XCTAssertEqual(state.0, 0)
        let requested = try XCTUnwrap(state.1.flatMap(Double.init))
        XCTAssertEqual(requested, Date().timeIntervalSince1970, accuracy: 60)
        XCTAssertNil(state.2, "its job is dead: the mark left `cancels` with it (`cancelled-<jid>` stays)")
        XCTAssertEqual(state.3, "Cancelled")

        let again = try await client.cancel(jid: "bbbbbbbbbbbbbbbbbbbbbbbb")
        XCTAssertTrue(again.allSatisfy(\.value.foundNothing), "a jid found nowhere is still marked")
        let marked = try await client.withConnection { connection in
            (try connection.command("GET", JobCancels.markKey(jid: "bbbbbbbbbbbbbbbbbbbbbbbb")).string,
             try connection.command("ZSCORE", JobCancels.set, "bbbbbbbbbbbbbbbbbbbbbbbb").double)
        }
        let markedAt = try XCTUnwrap(marked.0.flatMap(Double.init))
        XCTAssertEqual(try XCTUnwrap(marked.1), markedAt + 7 * 86_400, accuracy: 1)
        do {
            _ = try await client.cancel(jid: "a*b")
            XCTFail("a glob is not a jid")
        } catch let error as AdminError {
            XCTAssertTrue("\(error)".contains("not a jid"), "\(error)")
        }
    }
}
