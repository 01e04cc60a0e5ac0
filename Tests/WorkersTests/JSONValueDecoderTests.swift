import Foundation
import WorkersQueue
@testable import Workers
import XCTest

/// `JSONValueDecoder` may only give what `JSONDecoder` gives: for every case where it succeeds, `JSONDecoder` on the
/// same JSON succeeds with an equal value; where they would differ it must decline. It must also succeed on ordinary
/// job arguments (else the fast path is never taken and this file would prove nothing).
final class JSONValueDecoderTests: XCTestCase {
    struct Flat: Decodable, Equatable { let name: String; let count: Int; let ratio: Double; let on: Bool; let note: String? }
    enum Kind: String, Decodable, Equatable { case apple, google }
    struct Nested: Decodable, Equatable { let kind: Kind; let ids: [Int64]; let tags: [String: String]; let small: UInt8? }
    struct Positional: Decodable, Equatable {
        let user: String
        let amount: Int
        init(from decoder: any Decoder) throws {
            var container = try decoder.unkeyedContainer()
            user = try container.decode(String.self)
            amount = try container.decodeIfPresent(Int.self) ?? 0
        }
    }
    struct WithDate: Decodable, Equatable { let at: Date }
    struct WithFloat: Decodable, Equatable { let f: Float }
    struct WithURL: Decodable, Equatable { let url: URL }

    /// Decodes `json` both ways; returns whether ours succeeded (and then checks it equals JSONDecoder's).
    @discardableResult
    private func compare<T: Decodable & Equatable>(_ type: T.Type, _ json: String, file: StaticString = #filePath,
                                                   line: UInt = #line) throws -> Bool {
        let value = try JSONValue.parse(json)
        let reference = Result { try JSONDecoder().decode(T.self, from: Data(json.utf8)) }
        guard let ours = try? JSONValueDecoder().decode(T.self, from: value) else { return false }
        XCTAssertEqual(ours, try reference.get(), "\(json)", file: file, line: line)
        return true
    }

    func testOrdinaryArgumentsDecodeWithoutJSONDecoderAndEqualIt() throws {
        XCTAssertTrue(try compare([Flat].self, #"[{"name":"a","count":3,"ratio":0.25,"on":true,"note":null}]"#))
        XCTAssertTrue(try compare([Flat].self, #"[{"name":"é\n","count":-7,"ratio":2,"on":false}]"#))
        XCTAssertTrue(try compare([Nested].self, #"[{"kind":"google","ids":[1,9007199254740993],"tags":{"a":"b"},"small":255}]"#))
        XCTAssertTrue(try compare(Positional.self, #"["u1", 5]"#))
        XCTAssertTrue(try compare(Positional.self, #"["u1"]"#))
        XCTAssertTrue(try compare([String].self, #"["bench"]"#))
        XCTAssertTrue(try compare([Double?].self, #"[null, 1.5e3]"#))
        XCTAssertTrue(try compare([WithFloat].self, #"[{"f":1.5}]"#))
    }

    func testWhatJSONDecoderTreatsOtherwiseIsDeclined() throws {
        // JSONDecoder's special cases and anything where a naive decoder could give a different value.
        let declined: [(any Decodable.Type, String)] = [
            ([WithDate].self, #"[{"at":1.5}]"#),
            ([WithURL].self, #"[{"url":"https://example.com/a"}]"#),
            ([Data].self, #"[[1,2,3]]"#),
            ([Decimal].self, #"[1.25]"#),
            ([Int].self, #"[1.0]"#),
            ([Int].self, #"[1e2]"#),
            ([UInt8].self, #"[256]"#),
            ([Int].self, #"["1"]"#),
            ([Bool].self, #"[1]"#),
            ([WithFloat].self, #"[{"f":1e300}]"#),
            ([Flat].self, #"[{"name":"a","name":"b","count":1,"ratio":1,"on":true}]"#),
            ([Kind].self, #"["amazon"]"#),
            (Positional.self, #"[5]"#),
        ]
        for (type, json) in declined {
            let value = try JSONValue.parse(json)
            XCTAssertThrowsError(try JSONValueDecoder().decode(type, from: value), json)
        }
    }

    /// The runtime's entry point: a declined case still decodes (through JSONDecoder), and errors are JSONDecoder's.
    func testArgumentsDecodingFallsBackToJSONDecoder() throws {
        let decoded = try ArgumentsDecoding.decode([WithDate].self, from: [.object(["at": .double(1.5)])])
        XCTAssertEqual(decoded, [WithDate(at: Date(timeIntervalSinceReferenceDate: 1.5))])
        XCTAssertThrowsError(try ArgumentsDecoding.decode([Int].self, from: [.string("1")])) { error in
            XCTAssertTrue(error is DecodingError, "\(error)")
            XCTAssertEqual(ArgumentsDecoding.describe(error).hasPrefix("args[0]"), true, ArgumentsDecoding.describe(error))
        }
    }
}
