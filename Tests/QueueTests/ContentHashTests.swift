import WorkersQueue
import XCTest

/// `ContentHash` (Sources/Boundary/ContentHash.swift) gives the published digests: the FIPS 180-4 examples (NIST's
/// "abc", 448-bit and 896-bit messages), the empty message, one million 'a' (RFC 3174 test 3 and its SHA-256
/// counterpart) and RFC 3174's test 4; and the lengths on the padding's edges give what other implementations give.
final class ContentHashTests: XCTestCase {
    static let fips448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"
    static let fips896 = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu"

    func testSHA256GivesThePublishedVectors() {
        XCTAssertEqual(ContentHash.sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        XCTAssertEqual(ContentHash.sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        XCTAssertEqual(ContentHash.sha256Hex(Self.fips448), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1")
        XCTAssertEqual(ContentHash.sha256Hex(Self.fips896), "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1")
        XCTAssertEqual(ContentHash.hex(ContentHash.sha256([UInt8](repeating: UInt8(ascii: "a"), count: 1_000_000))),
                       "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0")
    }

    func testSHA1GivesThePublishedVectors() {
        XCTAssertEqual(ContentHash.sha1Hex("abc"), "a9993e364706816aba3e25717850c26c9cd0d89d")
        XCTAssertEqual(ContentHash.sha1Hex(""), "da39a3ee5e6b4b0d3255bfef95601890afd80709")
        XCTAssertEqual(ContentHash.sha1Hex(Self.fips448), "84983e441c3bd26ebaae4aa1f95129e5e54670f1")
        XCTAssertEqual(ContentHash.sha1Hex(Self.fips896), "a49b2446a02c645bf419f995b67091253a04a259")
        XCTAssertEqual(ContentHash.hex(ContentHash.sha1([UInt8](repeating: UInt8(ascii: "a"), count: 1_000_000))),
                       "34aa973cd4c4daa4f61eeb2bdbad27316534016f")
        XCTAssertEqual(ContentHash.sha1Hex(String(repeating: "0123456701234567012345670123456701234567012345670123456701234567", count: 10)),
                       "dea356a2cddd90c7a7ecedc5ebb563934f460452")
    }

    /// 'a'×n for the lengths where the padding changes (the length field fits in the last block or needs another one;
    /// a whole number of blocks), against `sha256sum` / `sha1sum` (and Python's hashlib: the same values).
    func testEveryPaddingEdgeGivesTheDigestOfOtherImplementations() {
        let edges: [(Int, String, String)] = [
            (55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318", "c1c8bbdc22796e28c0e15163d20899b65621d65a"),
            (56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a", "c2db330f6083854c99d4b5bfb6e8f29f201be699"),
            (63, "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34", "03f09f5b158a7a8cdad920bddc29b81c18a551f5"),
            (64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb", "0098ba824b5c16427bd7a1122a5a442a25ec644d"),
            (65, "635361c48bb9eab14198e76ea8ab7f1a41685d6ad62aa9146d301d4f17eb0ae0", "11655326c708d70319be2610e8a57d9a5b959d3b"),
            (119, "31eba51c313a5c08226adf18d4a359cfdfd8d2e816b13f4af952f7ea6584dcfb", "ee971065aaa017e0632a8ca6c77bb3bf8b1dfc56"),
            (120, "2f3d335432c70b580af0e8e1b3674a7c020d683aa5f73aaaedfdc55af904c21c", "f34c1488385346a55709ba056ddd08280dd4c6d6"),
            (128, "6836cf13bac400e9105071cd6af47084dfacad4e5e302c94bfed24e013afb73e", "ad5b3fdbcb526778c2839d2f151ea753995e26a0"),
        ]
        for (count, sha256, sha1) in edges {
            let bytes = [UInt8](repeating: UInt8(ascii: "a"), count: count)
            XCTAssertEqual(ContentHash.hex(ContentHash.sha256(bytes)), sha256, "sha256 of \(count) bytes")
            XCTAssertEqual(ContentHash.hex(ContentHash.sha1(bytes)), sha1, "sha1 of \(count) bytes")
        }
    }
}
