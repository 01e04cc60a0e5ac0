import Foundation

/// A personal value of a job's arguments (a declared personal field, `JobArguments.personalFields`), held so that it
/// cannot leave the job by accident (issue 50, point 1; docs/jobs-privacy.md, "Opened values"):
///
/// - its `description`, `debugDescription` and mirror are `[field]` — `"\(value)"`, `String(describing:)`,
///   `String(reflecting:)`, `print` and `dump` show the field's name, never the value, so an error text, a log line
///   or a reason that quotes it quotes the name;
/// - encoded with any encoder it writes the string `[field]`, unless the encoder's `userInfo` holds
///   `CodingUserInfoKey.personalValues` = `true`: only the typed enqueue (`JobArguments.sidekiqArgs()`) sets it, so
///   the value reaches the payload — and the sealer, which encrypts it on its way to Redis — and nothing else
///   (a `JSONEncoder` of a log or an error, an admin answer) carries it;
/// - decoded, it is the value, named after its key (`decoder.codingPath.last`).
///
/// Using the value takes one explicit call, `reveal()`, at the point it is needed (an HTTP request to the store, a
/// SQL parameter, a hash). `scripts/check-sources` refuses `.reveal()` on a line that builds an error, a log line or
/// its metadata, or a reason. The runner's scrub of opened values (`OpenedValues`) stays behind it as a second line.
public struct Personal<Value> {
    /// The argument's key (`transaction_id`), what every text shows in the value's place (`[transaction_id]`).
    public let field: String
    private let value: Value

    /// `value` as the personal value of `field`.
    public init(_ value: Value, field: String) {
        self.value = value
        self.field = field
    }

    /// The value itself, for the one place that needs it (an HTTP body, a SQL parameter, a hash). Never inside an
    /// error, a log line, log metadata or a reason: `scripts/check-sources` fails the build's checks when it is.
    public func reveal() -> Value { value }

    /// The same field with `transform` of its value (still personal), e.g. a `Personal<String>` parsed into a
    /// `Personal<UUID>`.
    public func map<T>(_ transform: (Value) throws -> T) rethrows -> Personal<T> {
        Personal<T>(try transform(value), field: field)
    }
}

extension Personal: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// `[field]`.
    public var description: String { "[\(field)]" }
    /// `[field]`.
    public var debugDescription: String { "[\(field)]" }
    /// No children: `dump` and `Mirror` show `[field]` alone.
    public var customMirror: Mirror { Mirror(self, children: [], displayStyle: .struct) }
}

extension Personal: Sendable where Value: Sendable {}
extension Personal: Equatable where Value: Equatable {}
extension Personal: Hashable where Value: Hashable {}

extension CodingUserInfoKey {
    /// Set to `true` in an encoder's `userInfo` to have `Personal` values encode as themselves (the typed enqueue,
    /// `JobArguments.sidekiqArgs()`, alone does); without it they encode as `[field]`.
    public static let personalValues = CodingUserInfoKey(rawValue: "workers.personal-values")!
}

extension Personal: Encodable where Value: Encodable {
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        if encoder.userInfo[.personalValues] as? Bool == true {
            try container.encode(value)
        } else {
            try container.encode(description)
        }
    }
}

extension Personal: Decodable where Value: Decodable {
    /// The value, named after the key it was decoded from (`"personal"` at the root of a document).
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        self.init(try container.decode(Value.self), field: decoder.codingPath.last?.stringValue ?? "personal")
    }
}
