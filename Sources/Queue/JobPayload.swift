import Foundation

/// Why a fetched payload cannot run at all. These go straight to `dead` with
/// `error_class` = `BadPayload` and the description as `error_message`.
public enum PayloadError: Error, Sendable, Equatable, CustomStringConvertible {
    case notUTF8
    case unparseable(JSONParseError)
    case notAnObject(String)
    case missingClass
    case invalidClass(String)
    case missingArgs
    case argsNotArray(String)
    /// A field the runtime computes with holds a value it refuses (a counter at Int64's limit, say).
    case field(BoundaryError)

    public var description: String {
        switch self {
        case .notUTF8: return "payload is not valid UTF-8"
        case .unparseable(let error): return "payload is not JSON: \(error)"
        case .notAnObject(let type): return "payload must be a JSON object, got \(type)"
        case .missingClass: return "payload has no \"class\""
        case .invalidClass(let why): return "payload \"class\" is invalid: \(why)"
        case .missingArgs: return "payload has no \"args\""
        case .argsNotArray(let type): return "payload \"args\" must be an array, got \(type)"
        case .field(let error): return "payload \(error)"
        }
    }
}

/// How a job wants to be retried, from its `retry` field (Sidekiq semantics, §6 of the wire doc).
public enum RetrySetting: Sendable, Equatable {
    /// No `retry` field: the job class decides (default 25).
    case unspecified
    /// `retry: true`: the class's or the global maximum.
    case enabled
    /// `retry: false`: no retry and no dead entry.
    case disabled
    /// `retry: N`: at most N retries (0 = straight to dead).
    case limit(Int)
}

/// A Sidekiq job: the ordered JSON object plus typed access to the fields the runtime uses.
/// Unknown fields are kept as they are.
public struct JobPayload: Sendable, Equatable {
    public var fields: JSONObject

    public init(fields: JSONObject) { self.fields = fields }

    /// Parses and checks the shape every job must have (`class` string, `args` array).
    public init(parsing text: String) throws(PayloadError) {
        let value: JSONValue
        do { value = try JSONValue.parse(text) } catch { throw .unparseable(error) }
        try self.init(validating: value)
    }

    /// Parses the bytes in place (no copy into a `String` first).
    public init(parsing bytes: [UInt8]) throws(PayloadError) {
        let parsed: Result<JSONValue, PayloadError> = bytes.withUnsafeBufferPointer { buffer in
            guard UTF8Text.isValid(buffer) else { return .failure(.notUTF8) }
            do throws(JSONParseError) { return .success(try JSONValue.parse(bytes: buffer)) } catch {
                return .failure(.unparseable(error))
            }
        }
        try self.init(validating: try parsed.get())
    }

    public init(validating value: JSONValue) throws(PayloadError) {
        guard case .object(let object) = value else { throw .notAnObject(value.typeName) }
        guard let classValue = object["class"] else { throw .missingClass }
        guard case .string(let name) = classValue else { throw .invalidClass("expected a string, got \(classValue.typeName)") }
        guard !name.isEmpty else { throw .invalidClass("empty string") }
        guard let args = object["args"] else { throw .missingArgs }
        guard case .array = args else { throw .argsNotArray(args.typeName) }
        // The run-time counters are the runtime's own (a producer never sets them): a value the runtime could not
        // add 1 to, or not an integer at all, makes the job unreadable, so it goes to dead with this reason
        // instead of trapping in the runner or in every process's orphan sweep (review H1).
        for (field, range) in Self.runtimeCounters {
            if case .failure(let error) = Bounded.checkedInt(object[field], field: field, in: range) {
                throw .field(error)
            }
        }
        fields = object
    }

    /// The counters the runtime increments, with the range `init(validating:)` checks them against. `retry_count` may
    /// be -1: Sidekiq's "retry now" (`SortedEntry#retry`, and ours) decrements it after the first failure's 0.
    public static let runtimeCounters: [(field: String, range: ClosedRange<Int>)] = [
        ("retry_count", -1...Bounded.maxCount), ("interrupted_count", 0...Bounded.maxCount),
        // A limiter's reschedules so far (Sidekiq Enterprise's `overrated`): `300 × overrated` must not overflow.
        ("overrated", 0...Bounded.maxCount),
    ]

    public func serialized() -> String { JSONValue.object(fields).serialized() }

    // MARK: Typed fields

    public var className: String { fields["class"]?.stringValue ?? "" }
    public var args: [JSONValue] { fields["args"]?.arrayValue ?? [] }
    public var jid: String? {
        get { fields["jid"]?.stringValue }
        set { fields["jid"] = newValue.map { .string($0) } }
    }
    public var queue: String? {
        get { fields["queue"]?.stringValue }
        set { fields["queue"] = newValue.map { .string($0) } }
    }

    /// The class that really runs: ActiveJob's `wrapped`, else `class`.
    public var displayClass: String {
        fields["display_class"]?.stringValue ?? fields["wrapped"]?.stringValue ?? className
    }

    public var retry: RetrySetting {
        switch fields["retry"] {
        case nil, .null?: return .unspecified
        case .bool(true)?: return .enabled
        case .bool(false)?: return .disabled
        case .int(let n)?: return .limit(Bounded.int(n, in: 0...Bounded.maxCount))
        default: return .enabled  // Ruby: any other truthy value (e.g. 5.0) means "retry, default max"
        }
    }

    /// `retry_count`, clamped into `-1...Bounded.maxCount` (a parsed payload never holds more; one built from
    /// `fields` by hand may), so `count + 2` never overflows.
    public var retryCount: Int? { fields["retry_count"]?.intValue.map { Bounded.int($0, in: -1...Bounded.maxCount) } }
    /// Epoch seconds, whether the payload holds float seconds or Sidekiq 8's integer milliseconds; nil (unknown)
    /// when absent, not a number, or not a time between 1970 and 9999 (`Bounded.epochSeconds`), so a reader can
    /// subtract it from now and convert the difference to an integer.
    public var createdAt: Double? { Bounded.epochSeconds(TimestampUnit.seconds(fields["created_at"])) }
    public var enqueuedAt: Double? { Bounded.epochSeconds(TimestampUnit.seconds(fields["enqueued_at"])) }
    public var failedAt: Double? { Bounded.epochSeconds(TimestampUnit.seconds(fields["failed_at"])) }
    public var retriedAt: Double? { Bounded.epochSeconds(TimestampUnit.seconds(fields["retried_at"])) }
    /// Sidekiq 7.1.3+'s `retry_for`: seconds after the first failure during which failures are retried
    /// (a finite number, clamped into `0...Bounded.maxIntervalSeconds`; anything else counts as absent).
    public var retryFor: Double? {
        guard let seconds = fields["retry_for"]?.doubleValue, seconds.isFinite else { return nil }
        return Bounded.seconds(seconds, max: Bounded.maxIntervalSeconds)
    }
    /// `interrupted_count`, clamped into `0...Bounded.maxCount` like `retryCount`.
    public var interruptedCount: Int { fields["interrupted_count"]?.intValue.map { Bounded.int($0, in: 0...Bounded.maxCount) } ?? 0 }
    public var retryQueue: String? { fields["retry_queue"]?.stringValue }
    /// `dead: false` keeps an exhausted job out of the dead set.
    public var allowsDead: Bool { fields["dead"]?.boolValue ?? true }
    public var errorMessage: String? { fields["error_message"]?.stringValue }
    public var errorClass: String? { fields["error_class"]?.stringValue }
}
