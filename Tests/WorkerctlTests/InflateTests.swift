import Foundation
import WorkersQueue
import XCTest

/// The inflater and backtrace decoder against bytes produced by Ruby's Zlib and Base64
/// (`ruby -rzlib -rbase64 -rjson -e 'print Base64.encode64(Zlib::Deflate.deflate(JSON.generate([...])))'`).
final class InflateTests: XCTestCase {
    /// `["a.rb:1","b.rb:2"]`, default level: one fixed-Huffman block.
    static let fixedBlock = "eJyLVkrUK0qyMlTSUUoCMYyUYgEzOAUL\n"
    /// `["a.rb:1","b.rb:2"]` at level 0: one stored block.
    static let storedBlock = "eAEBEwDs/1siYS5yYjoxIiwiYi5yYjoyIl0zOAUL\n"
    /// 60 lines `/usr/lib/ruby/vendor_ruby/sidekiq/processor.rb:{i*7}:in `block ({i} levels) in process'`
    /// (5197 bytes of JSON): one dynamic-Huffman block with long back-references.
    static let dynamicBlock = """
        eJyt2M1Kw0AYheFbKd2oICbf3/z0VkSUtFmEhkYTWvDuFXExB9wIZxeG4V3N
        w3yT53133dZunoZuvQ6f3W28nJb19ed7m07jefro3tflOG7bsj6twyEfpsvu
        bZiX43l3L7t5vI3z9rD7Xvzddrd//G9TvI0qJ6rSRo0ULW3UOVGLNhqcqGsb
        TaRobaOZE43URgsnmqyNVk4093D4e1IVSZFMFTAlJFQVUAlJVQVVQmIlPbgS
        EiwRkCUkWiJgS0i4REGXkHiJgS8hARMHYUoSJg7ElHVtBd5bJGOSAJmSkEkC
        ZcpSlkGZspQVUKYsZQWUKUtZBWVKUqY9KFOSMhVQZiRlKqDMSMpUQZmxxkPD
        +ZA1IBooM5IydVBmJGUaoMxIyjRAmZGUaQJlxlKWQZmxlBVQ5ixlBZQ5S1kF
        ZU5SZj0oc5Iy6/EdxnqICShzkjJTUOYkZaagzEnKzECZk5SZgzInKbMAZUFS
        ZgHKgqTMEigLlrIMyoKlLIOyYCkr+L+DpayCsmApq6AsSMq8B2VBUuYCyoKk
        zBWUpb+VvXwBWWEkfQ==

        """

    static var expectedDynamicLines: [String] {
        (1...60).map { "/usr/lib/ruby/vendor_ruby/sidekiq/processor.rb:\($0 * 7):in `block (\($0) levels) in process'" }
    }

    func testFixedHuffmanBlockFromRuby() throws {
        XCTAssertEqual(try Backtrace.decode(base64: Self.fixedBlock), ["a.rb:1", "b.rb:2"])
    }

    func testStoredBlockFromRuby() throws {
        XCTAssertEqual(try Backtrace.decode(base64: Self.storedBlock), ["a.rb:1", "b.rb:2"])
    }

    func testDynamicHuffmanBlockFromRuby() throws {
        XCTAssertEqual(try Backtrace.decode(base64: Self.dynamicBlock), Self.expectedDynamicLines)
    }

    func testOldJobsWithAPlainArray() throws {
        XCTAssertEqual(try Backtrace.decode(.array(["x.rb:1"])), ["x.rb:1"])
        let payload = try JobPayload(parsing: #"{"class":"A","args":[],"error_backtrace":"\#(Self.fixedBlock.replacingOccurrences(of: "\n", with: "\\n"))"}"#)
        XCTAssertEqual(try Backtrace.lines(of: payload), ["a.rb:1", "b.rb:2"])
        XCTAssertNil(try Backtrace.lines(of: JobPayload(parsing: #"{"class":"A","args":[]}"#)))
    }

    func testCorruptDataIsATypedErrorNotACrash() throws {
        var bytes = [UInt8](Data(base64Encoded: Self.dynamicBlock, options: .ignoreUnknownCharacters)!)
        // Checksum: flip the last byte.
        var badChecksum = bytes
        badChecksum[badChecksum.count - 1] ^= 0xFF
        XCTAssertThrowsError(try Inflate.zlib(badChecksum)) { error in
            XCTAssertTrue("\(error)".contains("Adler-32"), "\(error)")
        }
        // Truncated.
        XCTAssertThrowsError(try Inflate.zlib(Array(bytes.prefix(40))))
        // Bad header.
        bytes[0] = 0x79
        XCTAssertThrowsError(try Inflate.zlib(bytes))
        // Every single-byte corruption of the body either throws or yields other bytes, never traps.
        let original = [UInt8](Data(base64Encoded: Self.dynamicBlock, options: .ignoreUnknownCharacters)!)
        for index in 2..<(original.count - 4) {
            var corrupt = original
            corrupt[index] ^= 0x5A
            _ = try? Inflate.zlib(corrupt)
        }
        XCTAssertThrowsError(try Backtrace.decode(base64: "!!!"))
        XCTAssertThrowsError(try Backtrace.decode(.int(5))) { XCTAssertEqual($0 as? BacktraceError, .notAnArrayOfStrings("integer")) }
    }

    func testOutputCap() throws {
        let bytes = [UInt8](Data(base64Encoded: Self.dynamicBlock, options: .ignoreUnknownCharacters)!)
        XCTAssertThrowsError(try Inflate.zlib(bytes, maxOutput: 1000))
        XCTAssertEqual(try Inflate.zlib(bytes).count, 5197)
    }

    func testAdler32() {
        XCTAssertEqual(Inflate.adler32(Array("Wikipedia".utf8)), 0x11E6_0398)
        XCTAssertEqual(Inflate.adler32([]), 1)
    }
}
