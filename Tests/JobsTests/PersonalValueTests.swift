import Foundation
import WorkersAppJobs
import WorkersQueue
import WorkersTestServices
import XCTest

/// `Personal` (issue 50 point 1): an opened personal value prints, mirrors and encodes as its field's name. For every
/// type of `DomainJobs.personalArgumentTypes`, each payload fixture of its class (Tests/Fixtures/payloads, the wire form
/// Ruby and SQL producers send) is decoded, and its description, reflection, `dump` and a plain `JSONEncoder` encoding
/// hold no value of a declared personal field — so every declared field is held as `Personal` (a field added in
/// clear fails here, which `scripts/check-sources` cannot see). The typed enqueue (`sidekiqArgs()`) still carries every
/// value. No services.
final class PersonalValueTests: XCTestCase {
    func testAPersonalValuePrintsMirrorsAndEncodesAsItsFieldName() throws {
        let value = Personal("2000000123456789", field: "transaction_id")
        XCTAssertEqual("\(value)", "[transaction_id]")
        XCTAssertEqual(String(describing: value), "[transaction_id]")
        XCTAssertEqual(String(reflecting: value), "[transaction_id]")
        var dumped = ""
        dump(value, to: &dumped)
        XCTAssertFalse(dumped.contains("2000000123456789"), dumped)
        XCTAssertEqual(String(decoding: try JSONEncoder().encode([value]), as: UTF8.self), "[\"[transaction_id]\"]")
        let opted = JSONEncoder()
        opted.userInfo[.personalValues] = true
        XCTAssertEqual(String(decoding: try opted.encode([value]), as: UTF8.self), "[\"2000000123456789\"]")
        XCTAssertEqual(value.reveal(), "2000000123456789")
        XCTAssertEqual(value.map { $0.count }.field, "transaction_id")

        struct Holder: Decodable { let purchase_token: Personal<String> }
        let held = try JSONDecoder().decode(Holder.self, from: Data(#"{"purchase_token": "tok-secret-value"}"#.utf8))
        XCTAssertEqual(held.purchase_token.field, "purchase_token", "named after its key")
        XCTAssertEqual(held.purchase_token.reveal(), "tok-secret-value")
        XCTAssertEqual("\(held)".contains("tok-secret-value"), false, "\(held)")
    }

    func testEveryDeclaredPersonalFieldOfEveryDomainTypeIsHeldAsPersonal() throws {
        let directory = TestServices.fixturesDirectory.appendingPathComponent("payloads")
        let files = try FileManager.default.contentsOfDirectory(atPath: directory.path).filter { $0.hasSuffix(".json") }.sorted()
        let payloads = try files.map { ($0, try JobPayload(parsing: String(contentsOf: directory.appendingPathComponent($0), encoding: .utf8))) }
        XCTAssertFalse(DomainJobs.personalArgumentTypes.isEmpty)
        for type in DomainJobs.personalArgumentTypes {
            let samples = payloads.filter { $0.1.className == type.className }
            XCTAssertFalse(samples.isEmpty, "\(type.className): no payload fixture to check its personal fields with")
            for (file, payload) in samples { try check(type, payload.args, file: file) }
        }
    }

    /// `args` decoded as `A`: no personal value in any text of it; all of them in its typed enqueue's `args`.
    func check<A: JobArguments>(_ type: A.Type, _ args: [JSONValue], file: String) throws {
        let object = try XCTUnwrap(args.first?.objectValue, file)
        let values = A.personalFields.sorted().compactMap { field in object[field]?.stringValue.map { (field, $0) } }
        XCTAssertFalse(values.isEmpty, "\(file): no personal value to look for")
        let decoded = try A.decode(args: args)
        var dumped = ""
        dump(decoded, to: &dumped)
        let texts = ["description": String(describing: decoded), "reflecting": String(reflecting: decoded), "dump": dumped,
                     "interpolation": "\(decoded)", "JSONEncoder": String(decoding: try JSONEncoder().encode(decoded), as: UTF8.self)]
        for (how, text) in texts {
            for (field, value) in values {
                XCTAssertFalse(text.lowercased().contains(value.lowercased()), "\(file): \(A.className).\(field) in \(how): \(text)")
            }
        }
        for (field, _) in values {
            XCTAssertTrue(texts["description"]!.contains("[\(field)]"), "\(file): the description names \(field): \(texts["description"]!)")
        }
        let sent = try XCTUnwrap(try decoded.sidekiqArgs().first?.objectValue, file)
        for (field, value) in values {
            XCTAssertEqual(sent[field]?.stringValue?.lowercased(), value.lowercased(), "\(file): the typed enqueue carries \(field)")
        }
    }
}
