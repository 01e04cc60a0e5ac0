import Foundation
import Logging
import ServiceLifecycle
import WorkersTestServices
import WorkersClient
import XCTest

/// `WorkersClient` as a swift-service-lifecycle `Service` (WorkersClient+Service.swift): it serves calls while the
/// group runs and closes at the group's graceful shutdown. Redis database 49.
final class WorkersClientServiceTests: XCTestCase {
    func testTheGroupsGracefulShutdownClosesTheClient() async throws {
        let client = try WorkersClient(url: TestServices.redisURL(db: 49), maxConnections: 1)
        _ = try await client.withConnection { try $0.command("FLUSHDB") }
        var logger = Logger(label: "test")
        logger.logLevel = .critical
        let group = ServiceGroup(configuration: ServiceGroupConfiguration(services: [client], logger: logger))
        let running = Task { try await group.run() }

        try await client.enqueue(NewJob("Noop"))
        await group.triggerGracefulShutdown()
        try await running.value
        do {
            try await client.enqueue(NewJob("Noop"))
            XCTFail("the client took a call after the group's graceful shutdown")
        } catch let error as WorkersClientError {
            XCTAssertEqual(error, .shutDown)
        }
        let verify = try WorkersClient(url: TestServices.redisURL(db: 49), maxConnections: 1)
        defer { verify.shutdown() }
        let queued = try await verify.withConnection { try $0.command("LLEN", "queue:default").integer }
        XCTAssertEqual(queued, 1, "the call made while the group ran was served")
    }
}
