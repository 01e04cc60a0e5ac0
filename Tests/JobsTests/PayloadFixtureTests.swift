import Foundation
import WorkersAppJobs
import WorkersQueue
import WorkersStorage
import WorkersTestServices
import Workers
import XCTest

/// Golden payloads (Tests/Fixtures/payloads, README there): every shape docs/jobs-*.md documents, as Ruby's
/// Sidekiq client (`ruby-*.json`) and PostgreSQL's `workers_enqueue` (`sql-*.json`, args as jsonb prints them)
/// put it in Redis, aliases included. Each is run by the real runner with its class's own `Arguments` type
/// (`ArgumentsProbe`) and must decode to the expected typed value; that value's typed encoding must decode to it
/// again (identity on values: the bytes differ from Ruby's in key order, and a batch status's extra fields are
/// not kept); and every Ruby shape's args sent through real PostgreSQL's `jsonb` (as any SQL producer's are)
/// must decode to it too.
final class PayloadFixtureTests: JobsTestCase {
    override func makeFixture() throws -> JobsFixture { try JobsFixture(prefix: "payload_fixture_test", connections: 2) }

    static var folder: URL { TestServices.fixturesDirectory.appendingPathComponent("payloads") }

    func testEveryDocumentedPayloadShapeDecodesToItsTypedValue() throws {
        let shapes = try DomainTypedCases.shapes()
        let decoded = DecodedArguments()
        var registry = JobRegistry()
        for (_, typed) in shapes { typed.register(&registry, decoded) }
        let driver = fixture.driver(registry)

        func check(_ payload: JobPayload, _ typed: TypedCase, _ what: String) throws {
            let delivery = try driver.deliver(payload)
            guard case .ack = delivery else { return XCTFail("\(what): \(delivery)") }
            XCTAssertTrue(typed.matches(decoded, payload.jid ?? ""),
                          "\(what): decoded \(String(describing: decoded.value(payload.jid ?? ""))), expected \(typed.valueDescription)")
        }

        let files = try FileManager.default.contentsOfDirectory(atPath: Self.folder.path).filter { $0.hasSuffix(".json") }.sorted()
        var seenShapes: Set<String> = []
        for file in files {
            let name = String(file.dropLast(".json".count))
            guard let dash = name.firstIndex(of: "-"), ["ruby", "sql"].contains(String(name[..<dash])) else {
                XCTFail("\(file): expected ruby-<shape>.json or sql-<shape>.json")
                continue
            }
            let shape = String(name[name.index(after: dash)...])
            guard let typed = shapes[shape] else {
                XCTFail("\(file): no expected typed value for shape \(shape) in DomainTypedCases")
                continue
            }
            if name.hasPrefix("ruby-") { seenShapes.insert(shape) }
            let payload = try JobPayload(parsing: String(contentsOf: Self.folder.appendingPathComponent(file), encoding: .utf8))
            XCTAssertEqual(payload.className, typed.className, file)
            try check(payload, typed, file)

            // The typed value's own encoding decodes to it again.
            try check(try JobRunnerDriver.payload(typed.className, try typed.encoded()), typed, "\(file), typed encoding")

            // The same args as PostgreSQL's jsonb gives them back (a SQL producer's `workers_enqueue`).
            let text = try pool.withConnection { connection in
                try connection.queryFirst("SELECT $1::jsonb::text AS args", [JSONValue.array(payload.args).serialized()])!.string("args")
            }
            guard case .array(let args) = try JSONValue.parse(text) else { return XCTFail("\(file): jsonb gave \(text)") }
            try check(try JobRunnerDriver.payload(typed.className, args), typed, "\(file), through jsonb")
        }
        XCTAssertEqual(Set(shapes.keys).subtracting(seenShapes).sorted(), [], "shapes without a ruby-<shape>.json fixture")
    }
}
