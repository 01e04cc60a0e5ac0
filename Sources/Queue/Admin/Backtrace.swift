import Foundation

/// Why an `error_backtrace` field could not be decoded.
public enum BacktraceError: Error, Sendable, Equatable, CustomStringConvertible {
    case notBase64
    case compressed(InflateError)
    case notJSON(JSONParseError)
    case notAnArrayOfStrings(String)

    public var description: String {
        switch self {
        case .notBase64: return "error_backtrace is not base64"
        case .compressed(let error): return "error_backtrace is not zlib data: \(error)"
        case .notJSON(let error): return "error_backtrace does not hold JSON: \(error)"
        case .notAnArrayOfStrings(let type): return "error_backtrace must be an array of strings, got \(type)"
        }
    }
}

/// Sidekiq's `error_backtrace` (wire doc §2): `Base64.encode64(Zlib::Deflate.deflate(JSON array))`
/// with newlines every 60 characters, or, in old jobs, a plain JSON array.
public enum Backtrace {
    /// The backtrace lines of a job, nil when it has none.
    public static func lines(of payload: JobPayload) throws(BacktraceError) -> [String]? {
        guard let value = payload.fields["error_backtrace"], !value.isNull else { return nil }
        return try decode(value)
    }

    public static func decode(_ value: JSONValue) throws(BacktraceError) -> [String] {
        switch value {
        case .array(let items): return try strings(items, typeName: value.typeName)
        case .string(let text): return try decode(base64: text)
        default: throw .notAnArrayOfStrings(value.typeName)
        }
    }

    /// Decodes the base64 text (line breaks and other non-alphabet characters are ignored).
    public static func decode(base64 text: String) throws(BacktraceError) -> [String] {
        guard let data = Data(base64Encoded: text, options: .ignoreUnknownCharacters) else { throw .notBase64 }
        let inflated: [UInt8]
        do { inflated = try Inflate.zlib([UInt8](data)) } catch { throw .compressed(error) }
        let value: JSONValue
        do { value = try JSONValue.parse(String(decoding: inflated, as: UTF8.self)) } catch { throw .notJSON(error) }
        guard case .array(let items) = value else { throw .notAnArrayOfStrings(value.typeName) }
        return try strings(items, typeName: value.typeName)
    }

    private static func strings(_ items: [JSONValue], typeName: String) throws(BacktraceError) -> [String] {
        var lines: [String] = []
        for item in items {
            guard let line = item.stringValue else { throw .notAnArrayOfStrings("an array holding \(item.typeName)") }
            lines.append(line)
        }
        return lines
    }
}
