import Foundation
import WorkersQueue
import WorkersTestServices
import XCTest

/// Commands are written in RESP by us (`RESP.appendCommand`) and only queued by hiredis: every kind of argument must
/// reach Redis byte for byte — empty, binary with CR LF and NUL, non-ASCII text, numbers, and one larger than the
/// reused buffer keeps.
final class RESPTests: XCTestCase {
    func testEveryKindOfArgumentReachesRedisByteForByte() throws {
        let redis = try TestRedis(database: 98)
        let connection = try redis.connection()
        let binary: [UInt8] = [0x00, 0x0D, 0x0A, 0xFF, 0x24, 0x2A, 0x0D, 0x0A]
        let large = [UInt8](repeating: 0x61, count: 3 << 20)
        let cases: [(String, any RedisArgument, [UInt8])] = [
            ("empty", "", []),
            ("binary", binary, binary),
            ("text", "Zürich 🌍 \r\n$3\r\nend", Array("Zürich 🌍 \r\n$3\r\nend".utf8)),
            ("substring", "abcdef".dropFirst(2), Array("cdef".utf8)),
            ("int", 1234567890, Array("1234567890".utf8)),
            ("negative", -42, Array("-42".utf8)),
            ("int64", Int64(9), Array("9".utf8)),
            ("double", 1764028800.5, Array("1764028800.5".utf8)),
            ("large", large, large),
        ]
        for (key, value, expected) in cases {
            XCTAssertEqual(try connection.command("SET", key, value), .status("OK"), key)
            XCTAssertEqual(try connection.command("GET", key).bytes, expected, key)
        }
        // A pipeline after the large command (its buffer was let go) still works.
        let replies = try connection.pipeline([["INCR", "n"], ["INCRBY", "n", 10], ["STRLEN", "large"]])
        XCTAssertEqual(replies, [.integer(1), .integer(11), .integer(Int64(large.count))])
    }
}
