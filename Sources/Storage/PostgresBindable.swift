import Foundation

/// A Swift value that can be sent as a query parameter (`$1`, `$2`, ...).
///
/// Parameters travel separately from the SQL text (`PQexecParams`, text format), so no value is ever
/// spliced into a statement. `postgresText` is the value's PostgreSQL text representation;
/// `nil` sends SQL `NULL`. The server infers each parameter's type from the statement; add a cast
/// (`$1::uuid`, `$2::jsonb`, `$3::timestamptz`) where the context is ambiguous.
public protocol PostgresBindable: Sendable {
    var postgresText: String? { get }
    /// Appends the UTF-8 bytes of `postgresText` to `bytes` and returns true, or appends nothing and returns false
    /// when the value is SQL `NULL`. How statement parameters are built (one buffer per statement); the default goes
    /// through `postgresText`, and the hot types (strings, arrays) write their bytes straight in.
    func appendPostgresText(to bytes: inout [UInt8]) -> Bool
}

extension PostgresBindable {
    public func appendPostgresText(to bytes: inout [UInt8]) -> Bool {
        guard let text = postgresText else { return false }
        bytes.append(contentsOf: text.utf8)
        return true
    }
}

extension String: PostgresBindable {
    public var postgresText: String? { self }
    public func appendPostgresText(to bytes: inout [UInt8]) -> Bool {
        bytes.append(contentsOf: utf8)
        return true
    }
}

extension Substring: PostgresBindable {
    public var postgresText: String? { String(self) }
}

extension Int: PostgresBindable {
    public var postgresText: String? { String(self) }
}

extension Int32: PostgresBindable {
    public var postgresText: String? { String(self) }
}

extension Int64: PostgresBindable {
    public var postgresText: String? { String(self) }
}

extension Double: PostgresBindable {
    /// `NaN`, `Infinity` and `-Infinity` use PostgreSQL's spellings.
    public var postgresText: String? {
        if isNaN { return "NaN" }
        if isInfinite { return self < 0 ? "-Infinity" : "Infinity" }
        return String(self)  // shortest representation that round-trips
    }
}

extension Bool: PostgresBindable {
    public var postgresText: String? { self ? "true" : "false" }
}

extension UUID: PostgresBindable {
    public var postgresText: String? { uuidString.lowercased() }
}

extension Date: PostgresBindable {
    /// UTC timestamp with microseconds, e.g. `2025-11-23 16:00:00.123456+00` (valid for `timestamptz`).
    public var postgresText: String? { PostgresTimestamp.format(self) }
}

extension Data: PostgresBindable {
    /// `bytea` hex format: `\x0a1b...`.
    public var postgresText: String? {
        var text = "\\x"
        text.reserveCapacity(2 + count * 2)
        let digits = Array("0123456789abcdef")
        for byte in self {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0f)])
        }
        return text
    }
}

extension Optional: PostgresBindable where Wrapped: PostgresBindable {
    public var postgresText: String? {
        switch self {
        case .none: return nil
        case .some(let value): return value.postgresText
        }
    }

    public func appendPostgresText(to bytes: inout [UInt8]) -> Bool {
        switch self {
        case .none: return false
        case .some(let value): return value.appendPostgresText(to: &bytes)
        }
    }
}

extension Array: PostgresBindable where Element: PostgresBindable {
    /// A one-dimensional array literal, e.g. `{"a","b\\"c",NULL}`, for `= ANY($1::text[])` and batch
    /// statements. Every element is quoted, so any text is safe; cast the parameter to the element type.
    public var postgresText: String? {
        var bytes: [UInt8] = []
        _ = appendPostgresText(to: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Built from UTF-8 bytes (a group commit's claim sends three arrays of 50 per group): each element's text is
    /// appended in place and escaped only if it holds a `"` or `\` — both ASCII, never inside a multi-byte sequence,
    /// so escaping byte by byte escapes exactly those characters. Arrays of strings take a path compiled for
    /// `String` (this method is reached through the protocol, where the element type is only known at run time).
    public func appendPostgresText(to bytes: inout [UInt8]) -> Bool {
        if Element.self == String.self {
            appendArrayLiteral(unsafeBitCast(self, to: [String].self), to: &bytes)
        } else {
            appendArrayLiteral(self, to: &bytes)
        }
        return true
    }
}

/// `{"e1","e2",NULL}` for `elements` (see `Array.appendPostgresText`).
private func appendArrayLiteral<Elements: Collection>(_ elements: Elements, to bytes: inout [UInt8])
where Elements.Element: PostgresBindable {
    let quote = UInt8(ascii: "\""), backslash = UInt8(ascii: "\\")
    bytes.append(UInt8(ascii: "{"))
    var first = true
    for element in elements {
        if !first { bytes.append(UInt8(ascii: ",")) }
        first = false
        bytes.append(quote)
        let start = bytes.count
        guard element.appendPostgresText(to: &bytes) else {
            bytes.removeLast()  // the opening quote: NULL goes unquoted
            bytes.append(contentsOf: "NULL".utf8)
            continue
        }
        if bytes[start...].contains(where: { $0 == quote || $0 == backslash }) {
            let raw = [UInt8](bytes[start...])
            bytes.removeSubrange(start...)
            for byte in raw {
                if byte == quote || byte == backslash { bytes.append(backslash) }
                bytes.append(byte)
            }
        }
        bytes.append(quote)
    }
    bytes.append(UInt8(ascii: "}"))
}

/// A date without time of day (PostgreSQL `date`), e.g. the day an aggregate row is about.
public struct PostgresDay: PostgresBindable, Hashable, Comparable, CustomStringConvertible {
    public var year: Int
    public var month: Int
    public var day: Int

    public init(year: Int, month: Int, day: Int) {
        self.year = year
        self.month = month
        self.day = day
    }

    /// The UTC calendar day containing `date`.
    public init(utc date: Date) {
        let parts = PostgresTimestamp.utcComponents(of: date)
        self.init(year: parts.year, month: parts.month, day: parts.day)
    }

    /// Midnight UTC at the start of this day.
    public var startDate: Date {
        PostgresTimestamp.makeDate(year: year, month: month, day: day, seconds: 0, micros: 0, offsetSeconds: 0)
    }

    public var postgresText: String? { description }

    public var description: String {
        func pad(_ value: Int, _ width: Int) -> String {
            let digits = String(value)
            return String(repeating: "0", count: max(0, width - digits.count)) + digits
        }
        return "\(pad(year, 4))-\(pad(month, 2))-\(pad(day, 2))"
    }

    public static func < (lhs: PostgresDay, rhs: PostgresDay) -> Bool {
        (lhs.year, lhs.month, lhs.day) < (rhs.year, rhs.month, rhs.day)
    }
}

/// Statement parameters as C strings for libpq: every value's text, NUL-terminated, one after the other in one
/// byte array (written by `PostgresBindable.appendPostgresText`, no `String` or C copy per value), immutable once
/// built. Values are checked here: a NUL byte cannot be sent as text and is refused.
/// Written by the thread that builds it; read by the thread that sends the statement (the connection's owner).
final class BoundParameters {
    /// The values' bytes, each followed by a NUL.
    private let text: [UInt8]
    /// Where each parameter's text starts in `text`; nil for SQL NULL.
    private let starts: [Int?]

    init(_ parameters: [(any PostgresBindable)?], query sql: String) throws {
        guard parameters.count <= Int(Int32.max) else {
            throw PostgresError(category: .usage, message: "too many parameters", query: sql)
        }
        var text: [UInt8] = []
        var starts: [Int?] = []
        starts.reserveCapacity(parameters.count)
        for (position, parameter) in parameters.enumerated() {
            let start = text.count
            guard let parameter, parameter.appendPostgresText(to: &text) else {
                text.removeSubrange(start...)
                starts.append(nil)
                continue
            }
            if text[start...].contains(0) {
                throw PostgresError(category: .usage, message: "parameter $\(position + 1) contains a NUL byte", query: sql)
            }
            text.append(0)
            starts.append(start)
        }
        self.text = text
        self.starts = starts
    }

    /// Calls `body` with the parameter count and the array of value pointers (NULL = SQL NULL), valid during `body`.
    func withPointers<T>(_ body: (Int32, UnsafePointer<UnsafePointer<CChar>?>?) -> T) -> T {
        text.withUnsafeBytes { bytes in
            let base = bytes.baseAddress?.assumingMemoryBound(to: CChar.self)
            let pointers: [UnsafePointer<CChar>?] = starts.map { start in
                guard let start, let base else { return nil }
                return UnsafePointer(base + start)
            }
            return pointers.withUnsafeBufferPointer { buffer in body(Int32(buffer.count), buffer.baseAddress) }
        }
    }
}
