import WorkersQueue
import XCTest

final class JSONTests: XCTestCase {
    func testRoundTripKeepsKeyOrderAndCompactForm() throws {
        let text = #"{"retry":true,"queue":"default","class":"PlainJob","args":[1,"two",{"three":3,"nested":[null,true,false]},4.5,"ünïcødé/✓"],"jid":"514bed15214a957bc698b28c","created_at":1795330293.4722,"enqueued_at":1795330293.4723754}"#
        XCTAssertEqual(try JSONValue.parse(text).serialized(), text)
    }

    func testWhitespaceIsDroppedAndSlashesStayUnescaped() throws {
        let value = try JSONValue.parse(#"{ "url" : "https:\/\/example.com/a" , "n" : [ 1 , 2 ] }"#)
        XCTAssertEqual(value.serialized(), #"{"url":"https://example.com/a","n":[1,2]}"#)
    }

    func testRubyFloatForms() {
        XCTAssertEqual(JSONValue.rubyFloat(1795330465.2529638), "1795330465.2529638")
        XCTAssertEqual(JSONValue.rubyFloat(1000000000), "1000000000.0")
        XCTAssertEqual(JSONValue.rubyFloat(1.5e-07), "1.5e-07")
        XCTAssertEqual(JSONValue.rubyFloat(1e20), "1.0e+20")
        XCTAssertEqual(JSONValue.rubyFloat(0.0001), "0.0001")
        XCTAssertEqual(JSONValue.rubyFloat(1e16), "1.0e+16")
        XCTAssertEqual(JSONValue.rubyFloat(9007199254740992), "9007199254740992.0")
        XCTAssertEqual(JSONValue.rubyFloat(-2.5), "-2.5")
        XCTAssertEqual(JSONValue.rubyFloat(0), "0.0")
    }

    func testIntegersStayIntegersAndFloatsStayFloats() throws {
        XCTAssertEqual(try JSONValue.parse("5"), .int(5))
        XCTAssertEqual(try JSONValue.parse("5.0"), .double(5))
        XCTAssertEqual(try JSONValue.parse("-0"), .int(0))
        XCTAssertEqual(try JSONValue.parse("1e3"), .double(1000))
        // Beyond Int64: kept as a number (a Ruby producer may send 2^64).
        XCTAssertEqual(try JSONValue.parse("18446744073709551616"), .double(18446744073709551616))
    }

    func testEscapes() throws {
        let value = try JSONValue.parse(#""a\"b\\c\nd\t\u0001\u00e9\ud83d\ude00""#)
        XCTAssertEqual(value, .string("a\"b\\c\nd\t\u{01}é😀"))
        XCTAssertEqual(value.serialized(), #""a\"b\\c\nd\t\u0001é😀""#)
    }

    func testInvalidDocumentsAreRefusedWithAReason() {
        let cases = ["", "{", "[1,]", "{\"a\":}", "tru", "01", "1.", "\"abc", "{\"a\" 1}", "[1] x", "\"\u{01}\"",
                     #""\ud800""#, #""\x""#, "{'a':1}", "NaN"]
        for text in cases {
            XCTAssertThrowsError(try JSONValue.parse(text), "accepted \(text.debugDescription)") { error in
                XCTAssertTrue("\(error)".hasPrefix("invalid JSON at byte"), "\(error)")
            }
        }
    }

    func testDeepNestingIsRefusedNotACrash() {
        let deep = String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)
        XCTAssertThrowsError(try JSONValue.parse(deep))
    }

    func testObjectSubscriptKeepsPosition() {
        var object: JSONObject = ["a": 1, "b": 2]
        object["a"] = 3
        object["c"] = 4
        object["b"] = nil
        XCTAssertEqual(JSONValue.object(object).serialized(), #"{"a":3,"c":4}"#)
    }

    /// Numbers parsed through the exact-decimal fast path are the very Doubles (and Int64s) the general path
    /// (`Double(text)`, `Int64(text)`) gives: random decimals of 1 to 18 digits with the point anywhere, and the edges.
    func testNumbersAreTheSameDoublesAsTheGeneralParser() throws {
        var generator = SystemRandomNumberGenerator()
        var texts = ["0", "-0", "0.5", "-0.5", "1.0", "1764028800.123456", "1764028800.1234567", "9007199254740992",
                     "9007199254740993", "-9007199254740993", "0.1", "0.3", "123456789012345.6", "1e5", "2.5E-3",
                     "0.0000000000000000000001", "4.35", "1732540000.999999"]
        for _ in 0..<20_000 {
            let digits = Int.random(in: 1...18, using: &generator)
            var text = String(Int.random(in: 1...9, using: &generator))
            for _ in 1..<digits { text += String(Int.random(in: 0...9, using: &generator)) }
            if Bool.random(using: &generator), digits > 1 {
                let point = Int.random(in: 1..<digits, using: &generator)
                text.insert(".", at: text.index(text.startIndex, offsetBy: point))
            }
            texts.append(Bool.random(using: &generator) ? "-" + text : text)
        }
        for text in texts {
            let parsed = try JSONValue.parse(text)
            if !text.contains(".") && !text.lowercased().contains("e"), let integer = Int64(text) {
                XCTAssertEqual(parsed, .int(integer), text)
            } else {
                XCTAssertEqual(parsed, .double(try XCTUnwrap(Double(text))), text)
            }
        }
    }
}
