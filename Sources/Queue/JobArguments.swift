import Foundation

/// The typed contract of one job class, shared by the code that enqueues it and the job that runs it (as River's
/// `JobArgs` and swift-jobs' `JobParameters`): the Sidekiq class it names, its default queue, and its arguments,
/// whose `Codable` conformance IS the wire form of `args` — the client encodes with it (`NewJob(_:)`,
/// `WorkersClient.enqueue(_:)`) and the worker decodes with it (`Job.Arguments`), so both sides agree by
/// construction. Producers in other languages keep sending the same JSON (docs/enqueueing.md).
///
/// Where the arguments sit in `args` is the type's `layout`: `.singleHash` (default) travels as `args: [{…}]`,
/// Sidekiq's convention of one hash argument, for a type with keyed `Codable` (synthesized, with `CodingKeys` for
/// snake_case names); `.positional` hands the whole `args` array to the type's `Codable` (an unkeyed container),
/// for classes whose producers send positional arguments.
///
/// Validation belongs in `init(from:)`: a value that decodes is valid, so the job never checks it again; a value
/// that fails there is bad input (dead at once, the error's description as the reason).
public protocol JobArguments: Codable, Sendable {
    /// The payload's `class` (e.g. `"ValidateReceiptJob"`), under which the worker registers the job.
    static var className: String { get }
    /// The queue a typed enqueue uses when the caller names none. Default: `"default"`.
    static var queue: String { get }
    /// How these arguments sit in the payload's `args` array. Default: `.singleHash`.
    static var layout: JobArgumentsLayout { get }
    /// The keys of the `.singleHash` object whose values are personal data, encrypted under the subject's key
    /// on the way to Redis (docs/jobs-privacy.md, "Encrypted arguments"). Default: none.
    static var personalFields: Set<String> { get }
    /// The key whose (clear) value names the person the personal fields belong to (a `users.id`, or an e-mail
    /// address): it selects the data key. Required when `personalFields` is not empty. Default: nil.
    static var subjectField: String? { get }
    /// The version of these arguments' shape that typed enqueues write (the payload's `args_version`); nil (default):
    /// unversioned. During a rolling deploy a worker that does not decode a job's version gives it back to a live
    /// process that announces it (docs/deploy.md, "Rolling deploys").
    static var argumentsVersion: Int? { get }
    /// The `args_version`s the worker decodes, announced in its process record. Default: `argumentsVersion` alone
    /// (nil when unversioned). A release that still reads version 1 payloads after moving to 2 declares `1...2`.
    static var decodableArgumentsVersions: ClosedRange<Int>? { get }
}

/// How a `JobArguments` type maps onto the payload's `args` array (see `JobArguments`).
public enum JobArgumentsLayout: Sendable, Equatable {
    /// The JSON value a type of this layout decodes from: `args` itself (`.positional`), or its only element
    /// (`.singleHash`; any other count is a `DecodingError`, a dead job's reason). The one place both the registry
    /// and `JobArguments.decode(args:)` read the layout.
    package func root(of args: [JSONValue]) throws -> JSONValue {
        switch self {
        case .positional: return .array(args)
        case .singleHash:
            guard args.count == 1 else {
                throw DecodingError.dataCorrupted(.init(codingPath: [], debugDescription: "expected exactly one argument, got \(args.count)"))
            }
            return args[0]
        }
    }

    /// `args: [{…}]`: the type encodes to one JSON object, the only element of `args`.
    case singleHash
    /// `args: […]`: the type encodes to the whole array (its `Codable` uses an unkeyed container).
    case positional
}

extension JobArguments {
    public static var queue: String { "default" }
    public static var layout: JobArgumentsLayout { .singleHash }
    public static var personalFields: Set<String> { [] }
    public static var subjectField: String? { nil }
    public static var argumentsVersion: Int? { nil }
    public static var decodableArgumentsVersions: ClosedRange<Int>? { argumentsVersion.map { $0...$0 } }

    /// These arguments as the payload's `args`, exactly as `Job.Arguments` decodes them. Throws
    /// `EnqueueError.invalidArguments` when the encoder refuses a value (a NaN or infinite number) or the encoded
    /// form does not fit `layout` (an object for `.singleHash`, an array for `.positional`). The one encoding where a
    /// `Personal` value writes itself (`CodingUserInfoKey.personalValues`), for the sealer to encrypt on its way.
    public func sidekiqArgs() throws(EnqueueError) -> [JSONValue] {
        let encoded: JSONValue
        do {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]  // the same arguments, the same bytes
            encoder.userInfo[.personalValues] = true  // the one encoding where a `Personal` value is itself (then sealed)
            encoded = try JSONValue.parse(data: encoder.encode(self))
        } catch {
            throw .invalidArguments("\(Self.className): \(error)")
        }
        switch (Self.layout, encoded) {
        case (.singleHash, .object): return [encoded]
        case (.positional, .array(let elements)): return elements
        case (.singleHash, _):
            throw .invalidArguments("\(Self.className) has layout singleHash but encodes to \(encoded.typeName), not an object")
        case (.positional, _):
            throw .invalidArguments("\(Self.className) has layout positional but encodes to \(encoded.typeName), not an array")
        }
    }
}

extension NewJob {
    /// The payload field that carries `JobArguments.argumentsVersion` (Ruby Sidekiq ignores it).
    public static let argumentsVersionField = "args_version"

    /// A job of `A.className` with `arguments` encoded as its `args` (`JobArguments.sidekiqArgs()`), on `queue`
    /// (default `A.queue`). Goes through the same checks as every other job when enqueued (runtime-owned fields,
    /// numbers, payload size).
    public init<A: JobArguments>(_ arguments: A, queue: String? = nil, retry: JSONValue = .bool(true),
                                 extra: JSONObject = [:]) throws(EnqueueError) {
        var extra = extra
        if let version = A.argumentsVersion { extra[NewJob.argumentsVersionField] = .int(Int64(version)) }
        self.init(A.className, args: try arguments.sidekiqArgs(), queue: queue ?? A.queue, retry: retry, extra: extra)
    }
}

/// Arguments of a class that takes none: `args: []`, a one-liner for the job
/// (`struct Arguments: NoJobArguments { static let className = "Sweep" }`). Decoding refuses any argument
/// ("expected no arguments, got N"); encoding writes the empty array. Positional layout.
///
/// The `Codable` witnesses come from this extension, not from synthesis (a conforming struct has no stored
/// properties to synthesize from, and the extension's members are found first): `JobArgumentsLayoutTests`
/// checks it.
public protocol NoJobArguments: JobArguments {
    init()
}

extension NoJobArguments {
    public static var layout: JobArgumentsLayout { .positional }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.unkeyedContainer()
        if let count = container.count, count > 0 {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "expected no arguments, got \(count)")
        }
        self.init()
    }

    public func encode(to encoder: any Encoder) throws {
        _ = encoder.unkeyedContainer()
    }
}

/// Arguments of a class that takes exactly one positional argument: `args: [value]` (e.g. `["a message"]`), a
/// one-liner for the job (`struct Arguments: SingleJobArgument { static let className = "Fail"; let value: String }`;
/// the struct's memberwise `init(value:)` is the requirement). Decoding refuses any other count ("expected exactly
/// one argument, got N"). Positional layout; the witnesses come from this extension, not from synthesis
/// (`JobArgumentsLayoutTests`).
public protocol SingleJobArgument: JobArguments {
    associatedtype Value: Codable & Sendable
    var value: Value { get }
    init(value: Value)
}

extension SingleJobArgument {
    public static var layout: JobArgumentsLayout { .positional }

    public init(from decoder: any Decoder) throws {
        var container = try decoder.unkeyedContainer()
        if let count = container.count, count != 1 {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "expected exactly one argument, got \(count)")
        }
        self.init(value: try container.decode(Value.self))
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.unkeyedContainer()
        try container.encode(value)
    }
}

extension JobArguments {
    /// `args` decoded as these arguments, by `layout`, with Foundation's `JSONDecoder` (the values the worker's
    /// registry decodes; it only adds a faster path that gives the same values). Throws what `init(from:)` or
    /// the decoder throws.
    public static func decode(args: [JSONValue]) throws -> Self {
        let root = try layout.root(of: args)
        return try JSONDecoder().decode(Self.self, from: Data(root.serialized().utf8))
    }
}

extension JobArguments {
    /// A key function over a payload's raw `args` computed from these typed arguments, for the places that take
    /// one (a limiter's instance key, `LimitDeclaration.concurrent(…, key:)`): `args` are decoded as `Self`
    /// (`decode(args:)`), and arguments that do not decode give nil (bad input: the job goes dead when it runs).
    public static func key<K>(_ body: @escaping @Sendable (Self) -> K?) -> @Sendable ([JSONValue]) -> K? {
        { args in (try? decode(args: args)).flatMap(body) }
    }
}

extension UniquePolicy {
    /// A policy whose lock key is computed from typed arguments (docs/unique-jobs.md): `key` gets `args` decoded
    /// as `A` (`JobArguments.decode(args:)`) — at a unique enqueue and when a worker fetches the job. Arguments that
    /// do not decode (bad input, dead at once when run) fall back to the whole `args` as the key.
    public init<A: JobArguments>(for duration: Duration, until: UniqueUntil = .success, arguments: A.Type,
                                 key: @escaping @Sendable (A) -> String) {
        self.init(for: duration, until: until) { args in
            guard let decoded = try? A.decode(args: args) else { return JSONValue.array(args).serialized() }
            return key(decoded)
        }
    }
}
