import Foundation
import WorkersHTTP
import WorkersAppJobs
import WorkersQueue
import WorkersTestServices
import Workers
import WorkersClient
import XCTest

/// The typed contract end to end, for every domain class: a typed value of its `Arguments`, enqueued through the
/// async client (`WorkersClient.enqueue(_:)`) into real Redis, read back from its queue as the worker fetches it,
/// and run by the real runner (`JobRunnerDriver`, against real PostgreSQL) with the class's own `Arguments` type
/// (`ArgumentsProbe`): the job receives exactly the value enqueued.
final class TypedRoundTripTests: JobsTestCase {
    override func makeFixture() throws -> JobsFixture {
        try JobsFixture(prefix: "typed_round_trip_test", connections: 2, redis: 183)
    }

    func testEveryDomainClassHasATypedCase() throws {
        var registry = JobRegistry()
        _ = DomainJobs.register(into: &registry, environment: [:], redis: redis.pool, http: http)
        XCTAssertFalse(registry.classNames.isEmpty)
        let covered = Set(try DomainTypedCases.shapes().values.map(\.className))
        XCTAssertEqual(registry.classNames.filter { !covered.contains($0) }, [],
                       "registered domain classes without a typed case in DomainTypedCases")
    }

    func testTypedEnqueueDecodesToTheSameValueInTheRealRunner() async throws {
        let client = try WorkersClient(url: redis.url, maxConnections: 2)
        defer { client.shutdown() }
        let decoded = DecodedArguments()
        let cases = try DomainTypedCases.shapes().sorted { $0.key < $1.key }
        var registry = JobRegistry()
        for (_, typed) in cases { typed.register(&registry, decoded) }
        let driver = fixture.driver(registry)
        for (shape, typed) in cases {
            let jid = try await typed.enqueue(client)
            let queued = try redis.payloads(list: "queue:default")
            try redis.command("DEL", "queue:default")
            guard queued.count == 1, let payload = queued.first, payload.jid == jid else {
                XCTFail("\(shape): expected the one job \(jid) in queue:default, found \(queued.map(\.jid))")
                continue
            }
            XCTAssertEqual(payload.className, typed.className, shape)
            let delivery = try driver.deliver(payload)
            guard case .ack = delivery else {
                XCTFail("\(shape): \(delivery)")
                continue
            }
            XCTAssertTrue(typed.matches(decoded, jid),
                          "\(shape): decoded \(String(describing: decoded.value(jid))), enqueued \(typed.valueDescription)")
        }
    }
}
