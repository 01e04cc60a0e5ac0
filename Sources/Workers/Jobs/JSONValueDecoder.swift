import Foundation
import WorkersQueue

/// Decodes a `Decodable` straight from a parsed `JSONValue` — a job's `args`, already parsed with its payload — instead
/// of serializing them again for Foundation's `JSONDecoder` (about 10 % of a worker's CPU on small PostgreSQL jobs).
///
/// Strict by design: it only succeeds where `JSONDecoder` (default strategies) gives the same value, and throws
/// otherwise, so that `ArgumentsDecoding` runs `JSONDecoder` and the result — a value or the error a dead job's reason
/// is written from — is always `JSONDecoder`'s. What it declines: the types `JSONDecoder` special-cases (`Date`,
/// `Data`, `URL`, `Decimal`), a number into an integer type unless it is an exact integer literal, a `Float` out of
/// range, an object with a repeated key, and any type mismatch. Thread rules: a value type used by one decode call.
struct JSONValueDecoder {
    /// Anything this decoder declines; never shown to anyone (the `JSONDecoder` run that follows decides).
    struct Declined: Error {}

    func decode<T: Decodable>(_ type: T.Type, from value: JSONValue) throws -> T {
        try Node(value: value, codingPath: []).decodeValue(T.self)
    }
}

/// One value being decoded, with its path (what a custom `init(from:)` may read).
private struct Node: Decoder {
    let value: JSONValue
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        guard case .object(let object) = value else { throw JSONValueDecoder.Declined() }
        var seen = Set<String>()
        for key in object.keys where !seen.insert(key).inserted { throw JSONValueDecoder.Declined() }
        return KeyedDecodingContainer(Keyed<Key>(object: object, codingPath: codingPath))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        guard case .array(let elements) = value else { throw JSONValueDecoder.Declined() }
        return Unkeyed(elements: elements, codingPath: codingPath)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer { self }

    /// The value as `T`: primitives directly, `JSONDecoder`'s special cases declined, anything else by its own
    /// `init(from:)` on this node.
    func decodeValue<T: Decodable>(_ type: T.Type) throws -> T {
        switch type {
        case is String.Type: return try decode(String.self) as! T
        case is Bool.Type: return try decode(Bool.self) as! T
        case is Double.Type: return try decode(Double.self) as! T
        case is Int.Type: return try decode(Int.self) as! T
        case is Int64.Type: return try decode(Int64.self) as! T
        case is Date.Type, is Data.Type, is URL.Type, is Decimal.Type: throw JSONValueDecoder.Declined()
        default: return try T(from: self)
        }
    }
}

extension Node: SingleValueDecodingContainer {
    func decodeNil() -> Bool { value.isNull }
    func decode(_ type: Bool.Type) throws -> Bool {
        guard case .bool(let bool) = value else { throw JSONValueDecoder.Declined() }
        return bool
    }
    func decode(_ type: String.Type) throws -> String {
        guard case .string(let string) = value else { throw JSONValueDecoder.Declined() }
        return string
    }
    func decode(_ type: Double.Type) throws -> Double {
        switch value {
        case .double(let double):
            guard double.isFinite else { throw JSONValueDecoder.Declined() }
            return double
        case .int(let int): return Double(int)
        default: throw JSONValueDecoder.Declined()
        }
    }
    func decode(_ type: Float.Type) throws -> Float {
        let double = try decode(Double.self)
        let float = Float(double)
        guard float.isFinite else { throw JSONValueDecoder.Declined() }
        return float
    }
    func decode(_ type: Int.Type) throws -> Int { try integer() }
    func decode(_ type: Int8.Type) throws -> Int8 { try integer() }
    func decode(_ type: Int16.Type) throws -> Int16 { try integer() }
    func decode(_ type: Int32.Type) throws -> Int32 { try integer() }
    func decode(_ type: Int64.Type) throws -> Int64 { try integer() }
    func decode(_ type: UInt.Type) throws -> UInt { try integer() }
    func decode(_ type: UInt8.Type) throws -> UInt8 { try integer() }
    func decode(_ type: UInt16.Type) throws -> UInt16 { try integer() }
    func decode(_ type: UInt32.Type) throws -> UInt32 { try integer() }
    func decode(_ type: UInt64.Type) throws -> UInt64 { try integer() }
    func decode<T: Decodable>(_ type: T.Type) throws -> T { try decodeValue(T.self) }

    /// An integer literal that fits `T` exactly; anything else (a fraction, an exponent, a number parsed as a
    /// `Double`) is declined.
    private func integer<T: FixedWidthInteger>() throws -> T {
        guard case .int(let int) = value, let exact = T(exactly: int) else { throw JSONValueDecoder.Declined() }
        return exact
    }
}

private struct Keyed<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let object: JSONObject
    let codingPath: [any CodingKey]

    var allKeys: [Key] { object.keys.compactMap { Key(stringValue: $0) } }
    func contains(_ key: Key) -> Bool { object[key.stringValue] != nil }

    private func node(_ key: Key) throws -> Node {
        guard let value = object[key.stringValue] else { throw JSONValueDecoder.Declined() }
        return Node(value: value, codingPath: codingPath + [key])
    }

    func decodeNil(forKey key: Key) throws -> Bool { try node(key).value.isNull }
    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T { try node(key).decodeValue(T.self) }
    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type,
                                               forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
        try node(key).container(keyedBy: type)
    }
    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        try node(key).unkeyedContainer()
    }
    func superDecoder() throws -> any Decoder { throw JSONValueDecoder.Declined() }
    func superDecoder(forKey key: Key) throws -> any Decoder { throw JSONValueDecoder.Declined() }
}

private struct Unkeyed: UnkeyedDecodingContainer {
    let elements: [JSONValue]
    let codingPath: [any CodingKey]
    private(set) var currentIndex = 0

    init(elements: [JSONValue], codingPath: [any CodingKey]) {
        self.elements = elements
        self.codingPath = codingPath
    }

    var count: Int? { elements.count }
    var isAtEnd: Bool { currentIndex >= elements.count }

    private mutating func next() throws -> Node {
        guard !isAtEnd else { throw JSONValueDecoder.Declined() }
        defer { currentIndex += 1 }
        return Node(value: elements[currentIndex], codingPath: codingPath + [Index(intValue: currentIndex)])
    }

    mutating func decodeNil() throws -> Bool {
        guard !isAtEnd else { throw JSONValueDecoder.Declined() }
        guard elements[currentIndex].isNull else { return false }
        currentIndex += 1
        return true
    }
    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T { try next().decodeValue(T.self) }
    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<NestedKey> {
        try next().container(keyedBy: type)
    }
    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer { try next().unkeyedContainer() }
    mutating func superDecoder() throws -> any Decoder { throw JSONValueDecoder.Declined() }

    /// The coding key of an array element.
    private struct Index: CodingKey {
        let intValue: Int?
        var stringValue: String { "Index \(intValue ?? 0)" }
        init(intValue: Int) { self.intValue = intValue }
        init?(stringValue: String) { return nil }
    }
}
