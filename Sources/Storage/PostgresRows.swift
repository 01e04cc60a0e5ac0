import Foundation

/// The rows a statement returned, copied out of libpq's `PGresult` (which is freed at once).
///
/// Immutable value type: safe to keep, pass between threads and use after the connection is gone.
public struct PostgresRows: Sendable, RandomAccessCollection {
    /// Column names in result order.
    public let columns: [String]
    /// Rows affected by an INSERT/UPDATE/DELETE (from `PQcmdTuples`), or the row count for a SELECT.
    public let affectedRows: Int
    /// The command tag, e.g. `INSERT 0 1`, `UPDATE 3`, `SELECT 2`.
    public let commandTag: String
    let values: [[String?]]
    let columnIndex: [String: Int]
    let query: String

    init(columns: [String], values: [[String?]], affectedRows: Int, commandTag: String, query: String) {
        self.columns = columns
        self.values = values
        self.affectedRows = affectedRows
        self.commandTag = commandTag
        self.query = query
        var index: [String: Int] = [:]
        for (position, name) in columns.enumerated() where index[name] == nil {
            index[name] = position  // first column wins when names repeat (e.g. `SELECT a.id, b.id`)
        }
        self.columnIndex = index
    }

    public var startIndex: Int { 0 }
    public var endIndex: Int { values.count }

    public subscript(position: Int) -> PostgresRow {
        PostgresRow(rows: self, index: position)
    }
}

/// One row of a result, with typed accessors by column name.
///
/// Non-optional accessors throw `PostgresError` (`.decoding`) when the column is missing, NULL, or its
/// text cannot be converted; the `optional…` variants return nil for NULL but still throw for a missing
/// column or an unconvertible value. Nothing here traps on bad data.
public struct PostgresRow: Sendable {
    let rows: PostgresRows
    let index: Int

    /// Raw text of `column`, nil when SQL NULL.
    public func raw(_ column: String) throws -> String? {
        guard let position = rows.columnIndex[column] else {
            throw PostgresError(category: .decoding, message: "no column \"\(column)\" in result (columns: \(rows.columns.joined(separator: ", ")))", query: rows.query)
        }
        return rows.values[index][position]
    }

    /// True when `column` is SQL NULL.
    public func isNull(_ column: String) throws -> Bool { try raw(column) == nil }

    /// Decodes `column` as `T`; `T` may be an `Optional` to accept NULL.
    public func decode<T: PostgresDecodable>(_ column: String, as type: T.Type = T.self) throws -> T {
        let text = try raw(column)
        do {
            return try T(postgresText: text)
        } catch let failure as PostgresDecodingFailure {
            // The value itself is not shown: a column can hold personal data (an e-mail decoded as a UUID, say), and
            // this message reaches logs and the dead set.
            let shown = text.map { "a value of \($0.utf8.count) bytes" } ?? "NULL"
            throw PostgresError(category: .decoding, message: "column \"\(column)\": cannot decode \(shown) as \(T.self): \(failure.reason)", query: rows.query)
        }
    }

    public func string(_ column: String) throws -> String { try decode(column) }
    public func int(_ column: String) throws -> Int { try decode(column) }
    public func int64(_ column: String) throws -> Int64 { try decode(column) }
    public func double(_ column: String) throws -> Double { try decode(column) }
    public func bool(_ column: String) throws -> Bool { try decode(column) }
    /// `timestamptz`, `timestamp` (taken as UTC) or `date` (midnight UTC).
    public func date(_ column: String) throws -> Date { try decode(column) }
    public func day(_ column: String) throws -> PostgresDay { try decode(column) }
    public func uuid(_ column: String) throws -> UUID { try decode(column) }
    /// `bytea` (hex output format).
    public func data(_ column: String) throws -> Data { try decode(column) }

    public func optionalString(_ column: String) throws -> String? { try decode(column) }
    public func optionalInt(_ column: String) throws -> Int? { try decode(column) }
    public func optionalInt64(_ column: String) throws -> Int64? { try decode(column) }
    public func optionalDouble(_ column: String) throws -> Double? { try decode(column) }
    public func optionalBool(_ column: String) throws -> Bool? { try decode(column) }
    public func optionalDate(_ column: String) throws -> Date? { try decode(column) }
    public func optionalDay(_ column: String) throws -> PostgresDay? { try decode(column) }
    public func optionalUUID(_ column: String) throws -> UUID? { try decode(column) }
    public func optionalData(_ column: String) throws -> Data? { try decode(column) }
}

/// Why a text value could not be decoded (wrapped into a `PostgresError` with the column name).
public struct PostgresDecodingFailure: Error, Sendable {
    public var reason: String
    public init(_ reason: String) { self.reason = reason }
}

/// A Swift type that can be built from a column's PostgreSQL text representation (`nil` = SQL NULL).
public protocol PostgresDecodable {
    init(postgresText: String?) throws
}

extension PostgresDecodable {
    static func nonNull(_ text: String?) throws -> String {
        guard let text else { throw PostgresDecodingFailure("value is NULL") }
        return text
    }
}

extension Optional: PostgresDecodable where Wrapped: PostgresDecodable {
    public init(postgresText: String?) throws {
        guard let text = postgresText else { self = .none; return }
        self = .some(try Wrapped(postgresText: text))
    }
}

extension String: PostgresDecodable {
    public init(postgresText: String?) throws { self = try Self.nonNull(postgresText) }
}

extension Int: PostgresDecodable {
    public init(postgresText: String?) throws {
        guard let value = Int(try Self.nonNull(postgresText)) else { throw PostgresDecodingFailure("not an integer") }
        self = value
    }
}

extension Int64: PostgresDecodable {
    public init(postgresText: String?) throws {
        guard let value = Int64(try Self.nonNull(postgresText)) else { throw PostgresDecodingFailure("not an integer") }
        self = value
    }
}

extension Double: PostgresDecodable {
    /// Accepts float4/float8/numeric text, including `NaN`, `Infinity`, `-Infinity`.
    public init(postgresText: String?) throws {
        guard let value = Double(try Self.nonNull(postgresText)) else { throw PostgresDecodingFailure("not a number") }
        self = value
    }
}

extension Bool: PostgresDecodable {
    public init(postgresText: String?) throws {
        switch try Self.nonNull(postgresText) {
        case "t", "true": self = true
        case "f", "false": self = false
        default: throw PostgresDecodingFailure("not a boolean")
        }
    }
}

extension Date: PostgresDecodable {
    public init(postgresText: String?) throws {
        guard let value = PostgresTimestamp.parse(try Self.nonNull(postgresText)) else {
            throw PostgresDecodingFailure("not an ISO date or timestamp")
        }
        self = value
    }
}

extension PostgresDay: PostgresDecodable {
    public init(postgresText: String?) throws {
        let text = try Self.nonNull(postgresText)
        let parts = text.split(separator: "-", omittingEmptySubsequences: false)
        guard parts.count == 3, let year = Int(parts[0]), let month = Int(parts[1]), let day = Int(parts[2]),
              (1...12).contains(month), (1...31).contains(day)
        else { throw PostgresDecodingFailure("not a date (YYYY-MM-DD)") }
        self.init(year: year, month: month, day: day)
    }
}

extension UUID: PostgresDecodable {
    public init(postgresText: String?) throws {
        guard let value = UUID(uuidString: try Self.nonNull(postgresText)) else { throw PostgresDecodingFailure("not a UUID") }
        self = value
    }
}

extension Data: PostgresDecodable {
    public init(postgresText: String?) throws {
        let text = try Self.nonNull(postgresText)
        guard text.hasPrefix("\\x") else { throw PostgresDecodingFailure("not bytea hex output") }
        let hex = Array(text.utf8.dropFirst(2))
        guard hex.count % 2 == 0 else { throw PostgresDecodingFailure("odd number of hex digits") }
        func nibble(_ byte: UInt8) -> UInt8? {
            switch byte {
            case 48...57: return byte - 48
            case 97...102: return byte - 87
            case 65...70: return byte - 55
            default: return nil
            }
        }
        var bytes = [UInt8]()
        bytes.reserveCapacity(hex.count / 2)
        var position = 0
        while position < hex.count {
            guard let high = nibble(hex[position]), let low = nibble(hex[position + 1]) else {
                throw PostgresDecodingFailure("invalid hex digit")
            }
            bytes.append(high << 4 | low)
            position += 2
        }
        self = Data(bytes)
    }
}
