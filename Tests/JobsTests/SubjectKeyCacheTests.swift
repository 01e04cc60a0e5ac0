import Crypto
import Foundation
import WorkersQueue
import WorkersSubjectKeys
import Synchronization
import WorkersTestServices
import XCTest

/// The opener's and the sealer's cache of unwrapped keys (`SubjectKeyCache`, issue 50 point 5): bounded in count,
/// least recently used dropped first, expired entries swept as it fills, dropped whole when the fleet's erasure epoch
/// moves. Redis database 169 for the epoch.
final class SubjectKeyCacheTests: XCTestCase {
    final class Clock: Sendable {
        private let time = Mutex(Date(timeIntervalSince1970: 2_000_000_000))
        var now: Date { time.withLock { $0 } }
        func advance(by seconds: Double) { time.withLock { $0 = $0.addingTimeInterval(seconds) } }
    }

    private let key = SymmetricKey(size: .bits256)

    func testTheCacheNeverHoldsMoreThanItsCapacityAndKeepsWhatIsInUse() {
        let clock = Clock()
        let cache = SubjectKeyCache(capacity: 100, ttl: .seconds(60), redis: nil, now: { clock.now })
        cache.insert("kept", keyID: "kept", key: key)
        for index in 0..<10_000 {
            cache.insert("person-\(index)", keyID: "k\(index)", key: key)
            if index % 50 == 0 { XCTAssertNotNil(cache.entry("kept"), "a key in use survives eviction (insert \(index))") }
            XCTAssertLessThanOrEqual(cache.count, 100)
        }
        XCTAssertEqual(cache.entry("kept")?.keyID, "kept")
        XCTAssertNil(cache.entry("person-0"), "the least recently used went first")
        XCTAssertNotNil(cache.entry("person-9999"))
    }

    func testExpiredEntriesAreNotServedAndAreSweptWhenTheCacheFills() {
        let clock = Clock()
        let cache = SubjectKeyCache(capacity: 100, ttl: .seconds(60), redis: nil, now: { clock.now })
        for index in 0..<100 { cache.insert("person-\(index)", keyID: "k\(index)", key: key) }
        XCTAssertEqual(cache.count, 100)
        clock.advance(by: 59)
        XCTAssertNotNil(cache.entry("person-5"), "within its TTL")
        clock.advance(by: 2)
        cache.insert("fresh", keyID: "fresh", key: key)
        XCTAssertEqual(cache.count, 1, "the full cache swept every expired entry before dropping a live one")
        XCTAssertNil(cache.entry("person-5"), "past its TTL")
        cache.insert("again", keyID: "again", key: key)
        clock.advance(by: 61)
        XCTAssertNil(cache.entry("again"), "an expired entry is not served")
        let none = SubjectKeyCache(capacity: 100, ttl: .zero, redis: nil, now: { clock.now })
        none.insert("a", keyID: "a", key: key)
        XCTAssertEqual(none.count, 0, "a zero TTL caches nothing")
    }

    func testAMovedErasureEpochDropsEveryEntryWithinTheCheckInterval() throws {
        let redis = try TestRedis(database: 169)
        try redis.flush()
        let clock = Clock()
        let cache = SubjectKeyCache(capacity: 100, ttl: .seconds(60), redis: redis.pool, epochCheckInterval: .seconds(1),
                                    now: { clock.now })
        _ = cache.entry("first read of the epoch")
        cache.insert("person", keyID: "k", key: key)
        try SubjectKeyInvalidation.announce(on: [redis.pool])
        XCTAssertNotNil(cache.entry("person"), "the epoch is read at most once per interval")
        clock.advance(by: 1.5)
        XCTAssertNil(cache.entry("person"), "the moved epoch dropped it")
        XCTAssertEqual(cache.count, 0)
    }
}
