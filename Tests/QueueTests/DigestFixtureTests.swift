@testable import WorkersQueue
import WorkersTestServices
import XCTest

/// The digests Queue writes into Redis keep their values across the change from swift-crypto to `ContentHash`
/// (issue 53, point 6): a unique lock taken by a process of the previous build is found by the next one, and a
/// script is named as Redis names it. The lock digests below were computed by the swift-crypto based code (land2,
/// 4857177) and are fixtures, not recomputed.
final class DigestFixtureTests: XCTestCase {
    /// `(class, queue, key)` → the digest swift-crypto's SHA-256 gave. Keys chosen for escaping (quotes, `/`,
    /// non-ASCII, control characters), the empty key, and materials of 55, 56, 64, 120 and 1012 bytes (the padding's
    /// edges: one block or two, a whole number of blocks, many).
    static let locks: [(className: String, queue: String, key: String, digest: String)] = [
        ("HardJob", "default", "[1,2,3]", "423fed70489dd45540364205aaa2cb7b51bdc65843f93d8f140ce765544e7d77"),
        ("Billing::InvoiceReminder", "critical", #"{"invoice_id":42,"email":"a/b@example.com"}"#,
         "0e28a347443853de1614eff90126588a08e84a95fd52b4e7a33fc30acfa9e877"),
        ("Émile", "queue/ü", "ключ 🔑\n\t\u{0}\u{7f}", "ca0dc9c3b9fb37a4a84f8191e383d3fb1e7d46cd4e86b1850e0a5fe5da961997"),
        ("A", "q", "", "ab067a6e607d1177f2e3132f771a41f794afade6b4f0dffbf84031680d5de6a3"),
        ("C", "q", String(repeating: "k", count: 43), "8107c2a0aec0c39b3713f1d1c00cba9fad2eeb7d55d4e0e003076cd72d1506ea"),
        ("C", "q", String(repeating: "k", count: 44), "b4b50393b957961b8393e070256b8bb4d5eb6720b9c15eae432eac9ef359c1c8"),
        ("C", "q", String(repeating: "k", count: 52), "0c8efe0628eeb1f5e045208ad976068dcafb0934256ad14ebd3c3e48a1a02e86"),
        ("C", "q", String(repeating: "k", count: 108), "432cf6cedbf4cbfb1012173ebd36a88383bcdd1a06e92200d7b901209d5cfd5b"),
        ("C", "q", String(repeating: "k", count: 1000), "bce9ef908c90d8898bd0f5eb44f0e495ef9cea1d9a1ee6bc79c478deaa4bbc38"),
    ]

    func testUniqueLockDigestsAreTheOnesThePreviousBuildWrote() throws {
        for lock in Self.locks {
            XCTAssertEqual(UniqueLockKey(className: lock.className, queue: lock.queue, key: lock.key).digest, lock.digest,
                           "\(lock.className) \(lock.queue) \(lock.key.utf8.count) bytes of key")
        }
        // Through a payload: the key is the compact JSON of `args` (nested, `/` unescaped, a null, a double).
        let payload = try JobPayload(parsing: #"{"class":"Mailer","queue":"mail","args":[1,"a/b",{"k":null,"z":[true,2.5]}],"unique_for":60}"#)
        let policy = try XCTUnwrap(UniquePolicy.requested(by: payload))
        XCTAssertEqual(UniqueLockKey(payload: payload, policy: policy).digest,
                       "ed10395eb715b62c18b79c24855ca671982b2efa640c878f80d7058a9931ff36")
    }

    /// Every script Queue sends by `EVALSHA` is named by the SHA-1 Redis itself computes (`SCRIPT LOAD`), so no
    /// call falls back to `EVAL` or fails with NOSCRIPT. Database 135.
    func testEveryScriptIsNamedAsRedisNamesIt() throws {
        let redis = try TestRedis(database: 135)
        let scripts: [RedisScript] = [
            RedisScript(""), RedisScript("return 1"),
            Scripts.fetch, Scripts.complete, Scripts.moveDue, Scripts.buryUnreadable, Scripts.trimByBytes, Scripts.recover,
            UniqueScripts.push, UniqueScripts.claim, UniqueScripts.releaseJids, UniqueScripts.releaseLock,
            UniqueScripts.parkQueue, LimitScripts.admit, LimitScripts.hold, LimitScripts.renew,
            AdminScripts.removeFromDeadWorkingList, AdminScripts.setToQueue, AdminScripts.replaceMember,
            AdminScripts.pageAfter, AdminScripts.toDead, BatchScripts.create,
        ]
        for script in scripts {
            XCTAssertEqual(try redis.command("SCRIPT", "LOAD", script.source).string, script.sha1,
                           "a script of \(script.source.utf8.count) bytes")
        }
    }
}
