import Foundation
import Logging
import WorkersQueue
import XCTest

@testable import Workers

/// The give-back's bookkeeping comes from Redis, where anyone may write any number: a `unknown_class_since` or
/// `unknown_class_count` at an extreme ends in a give-back or dead, never a trap (docs/hostile-input.md).
final class UnknownClassGiveBackTests: XCTestCase {
    func testHostileBookkeepingNeverTraps() throws {
        let now = Clock.now()
        let logger = Logger(label: "give-back-test")
        for since in [-1e300, 1e300, -.infinity, .nan, now - 10, now + 3600] as [Double] {
            for count in [Int64.min, -1, 0, Int64.max] {
                var payload = try JobClient.payload(for: NewJob("NoSuchJob"), createdAt: now, enqueuedAt: now)
                payload.fields["unknown_class_since"] = since.isNaN ? .string("nan") : .double(since)
                payload.fields["unknown_class_count"] = .int(count)
                let result = UnknownClassGiveBack.settlement(payload: payload, queue: "default", knowledge: .nobody(serving: 1),
                                                             grace: 3600, now: now, logger: logger)
                guard case .settled(let settlement, _) = result else { return XCTFail("\(since) \(count)") }
                switch settlement {
                case .schedule(_, let at): XCTAssertTrue(at.isFinite && at > now && at <= now + 400, "\(at)")
                case .dead: XCTFail("a grace of an hour has not passed for since \(since)")
                default: XCTFail("\(settlement)")
                }
            }
        }
    }
}
