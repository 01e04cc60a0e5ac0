import Foundation
import WorkersSubjectKeys
import XCTest

/// The KEK opens every person's data key: a `WORKERS_KEK_FILE` that group or others may read or write is refused at
/// start, and a KEK given inline in the environment works but is warned about (issue 50, point 6).
final class KEKConfigurationTests: XCTestCase {
    /// What producers seal: v3 by default, v2 or v1 on request (warned: for a rolling deploy only), nothing else.
    func testTheEnvelopeVersionIsV3ByDefaultV2OrV1OnRequestAndNothingElse() throws {
        let kek = "k-1:" + Data(repeating: 7, count: 32).base64EncodedString()
        XCTAssertEqual(try SubjectKeysConfiguration.fromEnvironment(["WORKERS_KEK": kek])?.envelopeVersion, "v3")
        for version in ["v2", "v1"] {
            let legacy = try XCTUnwrap(try SubjectKeysConfiguration.fromEnvironment(["WORKERS_KEK": kek, "WORKERS_ENVELOPE_VERSION": version]))
            XCTAssertEqual(legacy.envelopeVersion, version)
            XCTAssertTrue(legacy.warnings.contains { $0.contains("rolling deploy") }, "\(legacy.warnings)")
        }
        XCTAssertThrowsError(try SubjectKeysConfiguration.fromEnvironment(["WORKERS_KEK": kek, "WORKERS_ENVELOPE_VERSION": "v4"])) { error in
            XCTAssertTrue("\(error)".contains("WORKERS_ENVELOPE_VERSION must be v3, v2 or v1"), "\(error)")
        }
    }

    func testAKEKFileOthersMayReadIsRefusedAndAnInlineKEKIsWarnedAbout() throws {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("kek-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: file) }
        let kek = "file-1:" + Data(repeating: 7, count: 32).base64EncodedString()
        XCTAssertTrue(FileManager.default.createFile(atPath: file, contents: Data(kek.utf8)))

        for mode in [0o644, 0o640, 0o604, 0o620] {
            XCTAssertEqual(chmod(file, mode_t(mode)), 0)
            XCTAssertThrowsError(try SubjectKeysConfiguration.fromEnvironment(["WORKERS_KEK_FILE": file])) { error in
                XCTAssertTrue("\(error)".contains("group or others"), "\(error)")
                XCTAssertFalse("\(error)".contains(kek), "the refusal never quotes the key")
            }
        }
        for mode in [0o600, 0o400] {
            XCTAssertEqual(chmod(file, mode_t(mode)), 0)
            let configuration = try XCTUnwrap(SubjectKeysConfiguration.fromEnvironment(["WORKERS_KEK_FILE": file]))
            XCTAssertEqual(configuration.current.id, "file-1")
            XCTAssertEqual(configuration.warnings, [], "a private file: nothing to warn about")
        }
        let inline = try XCTUnwrap(SubjectKeysConfiguration.fromEnvironment(["WORKERS_KEK": kek]))
        XCTAssertEqual(inline.warnings.count, 1)
        XCTAssertTrue(inline.warnings[0].contains("WORKERS_KEK_FILE"), inline.warnings[0])
        XCTAssertFalse(inline.warnings[0].contains(kek))
    }
}
