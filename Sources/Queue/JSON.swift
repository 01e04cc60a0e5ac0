import Foundation

/// A JSON value that keeps object keys in their original order.
///
/// Sidekiq payloads are compared byte for byte in Redis (`LREM`, `ZREM`), and Ruby's
/// `JSON.generate` writes keys in insertion order, compact, with `/` unescaped and floats in
/// Ruby's shortest round-trip form. `JSONValue` parses any RFC 8259 document and
/// `serialized()` writes exactly that canonical form, so a payload we write and Ruby
/// re-serializes stays the same bytes.
///
/// Integers that fit in `Int64` stay integers (Ruby's `retry` and `retry_count` must be
/// JSON integers); larger ones become `.double`.
public enum JSONValue: Sendable, Equatable {
    case null
    case bool(Bool)
    case int(Int64)
    case double(Double)
    case string(String)
    case array([JSONValue])
    case object(JSONObject)
}

/// An ordered JSON object. Lookups are linear, which is faster than hashing for the
/// dozen keys a job payload has.
public struct JSONObject: Sendable, Equatable, ExpressibleByDictionaryLiteral, Sequence {
    public private(set) var entries: [(key: String, value: JSONValue)]

    public init() { entries = [] }
    public init(_ entries: [(key: String, value: JSONValue)]) { self.entries = entries }
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        entries = elements.map { (key: $0.0, value: $0.1) }
    }

    public static func == (lhs: JSONObject, rhs: JSONObject) -> Bool {
        lhs.entries.count == rhs.entries.count
            && zip(lhs.entries, rhs.entries).allSatisfy { $0.key == $1.key && $0.value == $1.value }
    }

    public var count: Int { entries.count }
    public var keys: [String] { entries.map(\.key) }

    /// Reading gives the value or nil; writing replaces in place (keeping the key's position),
    /// appends a new key at the end, or removes the key when given nil.
    public subscript(key: String) -> JSONValue? {
        get {
            for entry in entries where entry.key == key { return entry.value }
            return nil
        }
        set {
            if let index = entries.firstIndex(where: { $0.key == key }) {
                if let newValue { entries[index].value = newValue } else { entries.remove(at: index) }
            } else if let newValue {
                entries.append((key: key, value: newValue))
            }
        }
    }

    public func makeIterator() -> IndexingIterator<[(key: String, value: JSONValue)]> {
        entries.makeIterator()
    }
}

/// Why a text is not JSON, with the byte offset where the parser stopped.
public struct JSONParseError: Error, Sendable, CustomStringConvertible, Equatable {
    public let reason: String
    public let offset: Int
    public var description: String { "invalid JSON at byte \(offset): \(reason)" }
}

// MARK: - Convenience accessors

extension JSONValue {
    public var stringValue: String? { if case .string(let s) = self { return s } else { return nil } }
    public var objectValue: JSONObject? { if case .object(let o) = self { return o } else { return nil } }
    public var arrayValue: [JSONValue]? { if case .array(let a) = self { return a } else { return nil } }
    public var boolValue: Bool? { if case .bool(let b) = self { return b } else { return nil } }
    public var isNull: Bool { if case .null = self { return true } else { return false } }

    /// An integer, or nil when the value is not a JSON integer (a float is not an integer here,
    /// as in Ruby: `5.0` is not an Integer).
    public var intValue: Int64? { if case .int(let i) = self { return i } else { return nil } }

    /// Any JSON number as a Double.
    public var doubleValue: Double? {
        switch self {
        case .int(let i): return Double(i)
        case .double(let d): return d
        default: return nil
        }
    }

    /// A short name of the JSON type, for error messages ("expected an array, got string").
    public var typeName: String {
        switch self {
        case .null: return "null"
        case .bool: return "boolean"
        case .int: return "integer"
        case .double: return "float"
        case .string: return "string"
        case .array: return "array"
        case .object: return "object"
        }
    }
}

extension JSONValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByBooleanLiteral,
    ExpressibleByArrayLiteral, ExpressibleByNilLiteral, ExpressibleByFloatLiteral
{
    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int64) { self = .int(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    public init(nilLiteral: ()) { self = .null }
    public init(floatLiteral value: Double) { self = .double(value) }
}

// MARK: - Parsing

extension JSONValue {
    /// Parses one JSON document (surrounding whitespace allowed, nothing else after it).
    public static func parse(_ text: String) throws(JSONParseError) -> JSONValue {
        var text = text
        let result: Result<JSONValue, JSONParseError> = text.withUTF8 { buffer in
            do throws(JSONParseError) { return .success(try parse(bytes: buffer)) } catch { return .failure(error) }
        }
        return try result.get()
    }

    public static func parse(bytes: UnsafeBufferPointer<UInt8>) throws(JSONParseError) -> JSONValue {
        var parser = JSONParser(bytes: bytes)
        parser.skipWhitespace()
        let value = try parser.parseValue(depth: 0)
        parser.skipWhitespace()
        if parser.index != bytes.count { throw parser.error("unexpected data after the JSON value") }
        return value
    }

    public static func parse(data: Data) throws(JSONParseError) -> JSONValue {
        let result: Result<JSONValue, JSONParseError> = data.withUnsafeBytes { raw in
            do throws(JSONParseError) { return .success(try parse(bytes: raw.bindMemory(to: UInt8.self))) } catch {
                return .failure(error)
            }
        }
        return try result.get()
    }
}

private struct JSONParser {
    let bytes: UnsafeBufferPointer<UInt8>
    var index = 0
    static let maxDepth = 256

    init(bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

    func error(_ reason: String) -> JSONParseError { JSONParseError(reason: reason, offset: index) }

    mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }

    mutating func parseValue(depth: Int) throws(JSONParseError) -> JSONValue {
        guard index < bytes.count else { throw error("unexpected end of input") }
        switch bytes[index] {
        case UInt8(ascii: "{"): return try parseObject(depth: depth + 1)
        case UInt8(ascii: "["): return try parseArray(depth: depth + 1)
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"): try expectLiteral("true"); return .bool(true)
        case UInt8(ascii: "f"): try expectLiteral("false"); return .bool(false)
        case UInt8(ascii: "n"): try expectLiteral("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try parseNumber()
        default: throw error("unexpected character '\(Character(Unicode.Scalar(bytes[index])))'")
        }
    }

    mutating func expectLiteral(_ literal: StaticString) throws(JSONParseError) {
        let count = literal.utf8CodeUnitCount
        guard index + count <= bytes.count else { throw error("unexpected end of input") }
        let start = literal.utf8Start
        for offset in 0..<count where bytes[index + offset] != start[offset] {
            throw error("invalid literal")
        }
        index += count
    }

    mutating func parseObject(depth: Int) throws(JSONParseError) -> JSONValue {
        if depth > Self.maxDepth { throw error("nesting deeper than \(Self.maxDepth)") }
        index += 1
        var entries: [(key: String, value: JSONValue)] = []
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "}") { index += 1; return .object(JSONObject(entries)) }
        while true {
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw error("expected a string key") }
            let key = try parseString()
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw error("expected ':'") }
            index += 1
            skipWhitespace()
            let value = try parseValue(depth: depth)
            entries.append((key: key, value: value))
            skipWhitespace()
            guard index < bytes.count else { throw error("unexpected end of input in object") }
            if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
            if bytes[index] == UInt8(ascii: "}") { index += 1; return .object(JSONObject(entries)) }
            throw error("expected ',' or '}'")
        }
    }

    mutating func parseArray(depth: Int) throws(JSONParseError) -> JSONValue {
        if depth > Self.maxDepth { throw error("nesting deeper than \(Self.maxDepth)") }
        index += 1
        var elements: [JSONValue] = []
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "]") { index += 1; return .array(elements) }
        while true {
            skipWhitespace()
            elements.append(try parseValue(depth: depth))
            skipWhitespace()
            guard index < bytes.count else { throw error("unexpected end of input in array") }
            if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
            if bytes[index] == UInt8(ascii: "]") { index += 1; return .array(elements) }
            throw error("expected ',' or ']'")
        }
    }

    mutating func parseNumber() throws(JSONParseError) -> JSONValue {
        let start = index
        var isInteger = true
        if bytes[index] == UInt8(ascii: "-") { index += 1 }
        guard index < bytes.count, isDigit(bytes[index]) else { throw error("invalid number") }
        if bytes[index] == UInt8(ascii: "0") {
            index += 1
            if index < bytes.count, isDigit(bytes[index]) { throw error("leading zero in number") }
        } else {
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            isInteger = false
            index += 1
            guard index < bytes.count, isDigit(bytes[index]) else { throw error("expected a digit after '.'") }
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            isInteger = false
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") { index += 1 }
            guard index < bytes.count, isDigit(bytes[index]) else { throw error("expected a digit in exponent") }
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        if let value = Self.exactDecimal(UnsafeBufferPointer(rebasing: bytes[start..<index]), isInteger: isInteger) {
            return value
        }
        let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
        if isInteger, let value = Int64(text) { return .int(value) }
        guard let value = Double(text) else { throw JSONParseError(reason: "invalid number", offset: start) }
        return .double(value)
    }

    func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }

    /// Powers of ten a Double holds exactly.
    private static let exactPowersOfTen: [Double] = (0...22).map { exponent in
        (0..<exponent).reduce(1.0) { value, _ in value * 10 }
    }

    /// The value of an already-validated number without an exponent whose digits, as an integer, are at most 2^53
    /// (`1764028800.123456`,
    /// `42`, `-3.5`): the digits as an integer m, then m / 10^k — both exact Doubles, and IEEE division is correctly
    /// rounded, so this is the nearest Double, what `Double(text)` gives (Clinger's fast path). Nil for anything else,
    /// which takes the general path. Integers come out as `.int`, as there.
    static func exactDecimal(_ text: UnsafeBufferPointer<UInt8>, isInteger: Bool) -> JSONValue? {
        var mantissa: Int64 = 0
        var digits = 0
        var fraction = 0
        var seenPoint = false
        var negative = false
        for byte in text {
            switch byte {
            case UInt8(ascii: "-"): negative = true
            case UInt8(ascii: "."): seenPoint = true
            case UInt8(ascii: "0")...UInt8(ascii: "9"):
                if digits > 0 || byte != UInt8(ascii: "0") { digits += 1 }
                if digits > 16 { return nil }
                mantissa = mantissa * 10 + Int64(byte - UInt8(ascii: "0"))
                if seenPoint { fraction += 1 }
            default: return nil  // an exponent
            }
        }
        if fraction > 22 || mantissa > 1 << 53 { return nil }  // beyond 2^53 the mantissa is no exact Double
        if isInteger { return .int(negative ? -mantissa : mantissa) }
        let value = Double(mantissa) / exactPowersOfTen[fraction]
        return .double(negative ? -value : value)
    }

    mutating func parseString() throws(JSONParseError) -> String {
        index += 1  // opening quote
        let start = index
        // Fast path: no escapes. ASCII text (keys, class names, jids, most arguments) needs no UTF-8 validation.
        var ascii = true
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                let slice = UnsafeBufferPointer(rebasing: bytes[start..<index])
                index += 1
                if ascii { return String(decoding: slice, as: UTF8.self) }
                guard let string = UTF8Text.validated(slice) else {
                    throw JSONParseError(reason: "string is not valid UTF-8", offset: start)
                }
                return string
            }
            if byte >= 0x80 { ascii = false }
            if byte == UInt8(ascii: "\\") { break }
            if byte < 0x20 { throw error("unescaped control character in string") }
            index += 1
        }
        var scratch = Array(UnsafeBufferPointer(rebasing: bytes[start..<index]))
        while index < bytes.count {
            let byte = bytes[index]
            switch byte {
            case UInt8(ascii: "\""):
                index += 1
                guard let string = scratch.withUnsafeBufferPointer({ UTF8Text.validated($0) }) else {
                    throw JSONParseError(reason: "string is not valid UTF-8", offset: start)
                }
                return string
            case UInt8(ascii: "\\"):
                index += 1
                guard index < bytes.count else { throw error("unexpected end of input in string") }
                let escape = bytes[index]
                index += 1
                switch escape {
                case UInt8(ascii: "\""): scratch.append(0x22)
                case UInt8(ascii: "\\"): scratch.append(0x5C)
                case UInt8(ascii: "/"): scratch.append(0x2F)
                case UInt8(ascii: "b"): scratch.append(0x08)
                case UInt8(ascii: "f"): scratch.append(0x0C)
                case UInt8(ascii: "n"): scratch.append(0x0A)
                case UInt8(ascii: "r"): scratch.append(0x0D)
                case UInt8(ascii: "t"): scratch.append(0x09)
                case UInt8(ascii: "u"):
                    var scalar = try parseHex4()
                    if (0xD800...0xDBFF).contains(scalar) {
                        // A high surrogate must be followed by \u and a low surrogate.
                        guard index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"),
                              bytes[index + 1] == UInt8(ascii: "u") else { throw error("lone high surrogate") }
                        index += 2
                        let low = try parseHex4()
                        guard (0xDC00...0xDFFF).contains(low) else { throw error("invalid low surrogate") }
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    } else if (0xDC00...0xDFFF).contains(scalar) {
                        throw error("lone low surrogate")
                    }
                    guard let unicode = Unicode.Scalar(scalar) else { throw error("invalid unicode escape") }
                    scratch.append(contentsOf: Array(String(Character(unicode)).utf8))
                default:
                    throw error("invalid escape")
                }
            default:
                if byte < 0x20 { throw error("unescaped control character in string") }
                scratch.append(byte)
                index += 1
            }
        }
        throw error("unterminated string")
    }

    mutating func parseHex4() throws(JSONParseError) -> UInt32 {
        guard index + 4 <= bytes.count else { throw error("short unicode escape") }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let byte = bytes[index]
            let digit: UInt32
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt32(byte - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = UInt32(byte - UInt8(ascii: "a") + 10)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = UInt32(byte - UInt8(ascii: "A") + 10)
            default: throw error("invalid hex digit in unicode escape")
            }
            value = value << 4 | digit
            index += 1
        }
        return value
    }
}

// MARK: - Serializing

extension JSONValue {
    /// Compact JSON the way Ruby's `JSON.generate` writes it: no whitespace, keys in order,
    /// `/` and non-ASCII unescaped, floats in Ruby's `Float#to_s` form.
    public func serialized() -> String {
        var out = ""
        out.reserveCapacity(256)
        write(into: &out)
        return out
    }

    public func write(into out: inout String) {
        switch self {
        case .null: out += "null"
        case .bool(let b): out += b ? "true" : "false"
        case .int(let i): out += String(i)
        case .double(let d): out += JSONValue.rubyFloat(d)
        case .string(let s): JSONValue.writeString(s, into: &out)
        case .array(let elements):
            out += "["
            var first = true
            for element in elements {
                if !first { out += "," }
                first = false
                element.write(into: &out)
            }
            out += "]"
        case .object(let object):
            out += "{"
            var first = true
            for (key, value) in object.entries {
                if !first { out += "," }
                first = false
                JSONValue.writeString(key, into: &out)
                out += ":"
                value.write(into: &out)
            }
            out += "}"
        }
    }

    /// Ruby's `Float#to_s`: shortest round-trip digits, always a `.` in the mantissa
    /// (`1.0e+20`, `1000000000.0`). Non-finite numbers are not JSON: written as `null`.
    public static func rubyFloat(_ value: Double) -> String {
        guard value.isFinite else { return "null" }
        let magnitude = abs(value)
        if magnitude != 0 && (magnitude >= 1e16 || magnitude < 1e-4) {
            // Exponent form: Swift prints "1e+16"; Ruby prints "1.0e+16" with a two-digit exponent.
            var text = value.description
            if !text.contains("e") {
                text = String(format: "%.17g", value)
            }
            guard let eIndex = text.firstIndex(where: { $0 == "e" || $0 == "E" }) else { return text }
            var mantissa = String(text[..<eIndex])
            var exponent = String(text[text.index(after: eIndex)...])
            if !mantissa.contains(".") { mantissa += ".0" }
            var sign = "+"
            if exponent.hasPrefix("-") { sign = "-"; exponent.removeFirst() } else if exponent.hasPrefix("+") { exponent.removeFirst() }
            while exponent.count < 2 { exponent = "0" + exponent }
            return "\(mantissa)e\(sign)\(exponent)"
        }
        var text = value.description
        if text.contains("e") {
            // Swift switched to exponent form where Ruby does not (2^53 <= x < 1e16).
            text = String(format: "%.1f", value)
        }
        if !text.contains(".") { text += ".0" }
        return text
    }

    private static let hexDigits: [Character] = Array("0123456789abcdef")

    static func writeString(_ string: String, into out: inout String) {
        out += "\""
        var needsEscape = false
        for byte in string.utf8 where byte < 0x20 || byte == 0x22 || byte == 0x5C {
            needsEscape = true
            break
        }
        if !needsEscape {
            out += string
        } else {
            for scalar in string.unicodeScalars {
                switch scalar {
                case "\"": out += "\\\""
                case "\\": out += "\\\\"
                case "\n": out += "\\n"
                case "\r": out += "\\r"
                case "\t": out += "\\t"
                case "\u{08}": out += "\\b"
                case "\u{0C}": out += "\\f"
                default:
                    if scalar.value < 0x20 {
                        out += "\\u00"
                        out.append(hexDigits[Int(scalar.value >> 4)])
                        out.append(hexDigits[Int(scalar.value & 0xF)])
                    } else {
                        out.unicodeScalars.append(scalar)
                    }
                }
            }
        }
        out += "\""
    }
}

/// Bytes to `String`, refusing invalid UTF-8 — the one way Queue does it. `String(validating:as:)` is generic and,
/// unspecialized in this module, looked its metadata up on every call (4–5 % of a no-op drain's CPU in `perf`);
/// ASCII, the common case, is copied without it.
enum UTF8Text {
    static func validated(_ bytes: UnsafeBufferPointer<UInt8>) -> String? {
        isASCII(bytes) ? String(decoding: bytes, as: UTF8.self) : String(validating: bytes, as: UTF8.self)
    }

    static func isValid(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        isASCII(bytes) || String(validating: bytes, as: UTF8.self) != nil
    }

    private static func isASCII(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        for byte in bytes where byte >= 0x80 { return false }
        return true
    }

    static func validated(_ bytes: [UInt8]) -> String? { bytes.withUnsafeBufferPointer { validated($0) } }
}
