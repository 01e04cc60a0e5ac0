import Foundation
import WorkersQueue

/// Why a payload could not be turned into a runnable job: always bad input (dead at once).
public enum DispatchError: Error, Sendable, CustomStringConvertible {
    case unknownClass(String)
    case undecodableArguments(className: String, reason: String)
    case invalidArguments(className: String, reason: String)
    /// Personal arguments that can never be opened (`PersonalArgumentsRefusal`: the subject's key is erased, a
    /// clear value in strict mode, a damaged envelope); `errorClass` is the dead entry's `error_class`.
    case refusedPersonalArguments(className: String, errorClass: String, reason: String)
    /// Personal arguments that cannot be opened now (the key store unreachable): not the job's fault; the runner gives
    /// it back to `schedule` without spending a retry (`KeyStoreWait`).
    case keyStoreUnavailable(className: String, reason: String)

    /// The dead entry's `error_class`: `BadInput`, or the refusal's own class for personal arguments.
    public var errorClass: String {
        if case .refusedPersonalArguments(_, let errorClass, _) = self { return errorClass }
        return "BadInput"
    }

    public var description: String {
        switch self {
        case .unknownClass(let name): return "unknown job class '\(name)': no job is registered under that name"
        case .undecodableArguments(let name, let reason): return "arguments do not fit \(name): \(reason)"
        case .invalidArguments(let name, let reason): return "invalid arguments for \(name): \(reason)"
        case .refusedPersonalArguments(let name, _, let reason): return "personal arguments of \(name) refused: \(reason)"
        case .keyStoreUnavailable(let name, let reason): return "personal arguments of \(name) cannot be opened now: \(reason)"
        }
    }
}

/// A worker whose registry declares personal arguments but has no key store (`JobRegistry.checkPersonalArguments()`).
public struct PersonalArgumentsSetupError: Error, Sendable, CustomStringConvertible {
    public let classNames: [String]
    public var description: String {
        "job classes \(classNames.joined(separator: ", ")) declare personal arguments, but no key store is configured: "
            + "set WORKERS_KEK or WORKERS_KEK_FILE (docs/jobs-privacy.md, \"Encrypted arguments\")"
    }
}

/// A job with its arguments decoded, ready to run.
package struct PreparedJob: Sendable {
    /// What runs: a `Job`'s `perform` (on a pool thread) or an `AsyncJob`'s (in a task of `AsyncRuns`).
    enum Body: Sendable {
        case sync(@Sendable (JobContext) throws -> Void)
        case async(@Sendable (JobContext) async throws -> Void)
    }

    public let className: String
    public let options: JobOptions
    let body: Body
    /// The personal values the registry opened for this run: what the runner scrubs from its error texts and logs.
    var opened = OpenedValues.none

    /// True for an `AsyncJob`: it runs only through `runAsync`, in a task.
    var isAsync: Bool { if case .async = body { true } else { false } }

    /// Runs a `Job`'s body on the calling thread. An `AsyncJob` is never run here (the pool hands it to `AsyncRuns`,
    /// `JobRegistry.isAsync`): were one to reach here, the run fails permanently rather than block a pool thread.
    public func run(_ context: JobContext) throws {
        switch body {
        case .sync(let body): try body(context)
        case .async: throw JobError.permanent("async job \(className) reached a pool thread's synchronous path")
        }
    }

    /// Runs the body in the calling task (a `Job`'s body too, which then blocks the task's thread).
    func runAsync(_ context: JobContext) async throws {
        switch body {
        case .sync(let body): try body(context)
        case .async(let body): try await body(context)
        }
    }
}

/// From Sidekiq class name to job. Filled once at start-up, then read by every pool thread
/// (immutable after `freeze`-style use: register before the pool starts).
public struct JobRegistry: Sendable {
    private var entries: [String: @Sendable (JobPayload) throws -> PreparedJob] = [:]
    private var optionsByName: [String: JobOptions] = [:]
    /// The completion record's TTL of each registered name whose class keeps one (`JobOptions.completionRecord`).
    private var completionTTLByName: [String: Duration] = [:]
    /// The reflected Swift name of each registered job type (`Workers.FailJob`) → its Sidekiq class
    /// name (`Fail`): error classes nested in a job type are written as `Fail::Failure`.
    private(set) var classNamesByType: [String: String] = [:]
    /// Registered names whose `Arguments` declare personal fields (`JobArguments.personalFields`) → the fields and
    /// the subject field.
    private var personalByName: [String: (fields: Set<String>, subject: String?)] = [:]
    /// Registered names whose `Arguments` are versioned → the `args_version`s this registry decodes
    /// (`JobArguments.decodableArgumentsVersions`, or what `register(_:as:argumentVersions:)` was given).
    public private(set) var argumentVersions: [String: ClosedRange<Int>] = [:]
    /// Registered names whose job is an `AsyncJob` (run as tasks, `AsyncRuns`).
    private var asyncNames: Set<String> = []

    /// Opens the envelopes of declared personal fields before decoding (docs/jobs-privacy.md). Nil: arguments are
    /// decoded as sent (clear text decodes; an envelope does not fit and the job goes dead as bad input). Set it
    /// before the pool starts; `checkPersonalArguments()` refuses a registry that needs one and has none.
    public var personalArgumentsOpener: (any PersonalArgumentsOpener)?

    public init() {}

    /// The registered class names whose arguments declare personal fields.
    public var classNamesWithPersonalArguments: [String] { personalByName.keys.sorted() }

    /// Throws when a registered class declares personal arguments and no `personalArgumentsOpener` is set: a worker
    /// must not start without the key store it needs to run those jobs (`workerctl worker` calls it at start).
    public func checkPersonalArguments() throws(PersonalArgumentsSetupError) {
        if personalArgumentsOpener == nil, !personalByName.isEmpty {
            throw PersonalArgumentsSetupError(classNames: classNamesWithPersonalArguments)
        }
    }

    /// Registers `job` under its class name, or under `name` (an alias, e.g. a Ruby class name
    /// that another service enqueues). `argumentVersions`: the `args_version`s announced as decoded here, when not
    /// the arguments' own `decodableArgumentsVersions` (a test or bench standing in for another release).
    public mutating func register<J: Job>(_ job: J, as name: String? = nil, argumentVersions: ClosedRange<Int>? = nil) {
        add(J.Arguments.self, className: J.className, options: J.options, type: J.self, as: name,
            argumentVersions: argumentVersions) { arguments in .sync { try job.perform(arguments, context: $0) } }
    }

    /// Registers an `AsyncJob` as `register(_:as:argumentVersions:)` registers a `Job`: the same names, typed
    /// arguments and options; its runs are tasks (`WorkerConfiguration.asyncConcurrency`), not pool threads.
    public mutating func register<J: AsyncJob>(_ job: J, as name: String? = nil, argumentVersions: ClosedRange<Int>? = nil) {
        add(J.Arguments.self, className: J.className, options: J.options, type: J.self, as: name,
            argumentVersions: argumentVersions) { arguments in .async { try await job.perform(arguments, context: $0) } }
        asyncNames.insert(name ?? J.className)
    }

    /// True when `className` is registered as an `AsyncJob`: the pool hands its runs to `AsyncRuns`.
    func isAsync(_ className: String) -> Bool { !asyncNames.isEmpty && asyncNames.contains(className) }

    /// The registered names of async jobs.
    public var asyncClassNames: [String] { asyncNames.sorted() }

    /// The one registration path of both kinds of job: `body` makes a run's body from its decoded arguments.
    private mutating func add<A: JobArguments>(_: A.Type, className: String, options: JobOptions, type: Any.Type,
                                               as name: String?, argumentVersions: ClosedRange<Int>?,
                                               body: @escaping @Sendable (A) -> PreparedJob.Body) {
        let key = name ?? className
        asyncNames.remove(key)
        self.argumentVersions[key] = argumentVersions ?? A.decodableArgumentsVersions
        // Arguments the job never reads (`IgnoredJobArguments`, Noop): one value made here and handed to every run —
        // no decoding and no protocol cast per job (a cast per run cost ~2 % of a no-op drain's worker CPU in a
        // `perf` profile).
        if let ignored = A.self as? any IgnoredJobArguments.Type, let arguments = ignored.init() as? A {
            let prepared = PreparedJob(className: className, options: options, body: body(arguments))
            entries[key] = { _ in prepared }
        } else {
            let layout = A.layout
            entries[key] = { payload in
                let arguments: A
                do {
                    arguments = try ArgumentsDecoding.decode(A.self, from: payload.args, layout: layout)
                } catch JobError.badInput(let why) {
                    // A check in `init(from:)`: the value has the right type but is out of range or malformed.
                    throw DispatchError.invalidArguments(className: className, reason: why)
                } catch {
                    throw DispatchError.undecodableArguments(className: className, reason: ArgumentsDecoding.describe(error))
                }
                return PreparedJob(className: className, options: options, body: body(arguments))
            }
        }
        optionsByName[key] = options
        if case .keep(let ttl) = options.completionRecord { completionTTLByName[key] = ttl } else { completionTTLByName[key] = nil }
        if !A.personalFields.isEmpty {
            personalByName[key] = (A.personalFields, A.subjectField)
        } else {
            personalByName[key] = nil
        }
        classNamesByType[String(reflecting: type)] = className
    }

    public var classNames: [String] { entries.keys.sorted() }

    public func options(for className: String) -> JobOptions? { optionsByName[className] }

    /// True when some registered class keeps a completion record: the runtime then looks each settled job's class up
    /// (`completionTTL(for:)`); otherwise it skips that lookup.
    var keepsCompletionRecords: Bool { !completionTTLByName.isEmpty }

    /// The TTL of the completion record jobs of `className` leave, nil when the class keeps none (or is not registered).
    func completionTTL(for className: String) -> Duration? { completionTTLByName[className] }

    /// Looks the payload's class up and decodes its arguments.
    package func prepare(_ payload: JobPayload) throws(DispatchError) -> PreparedJob {
        guard let make = entries[payload.className] else { throw .unknownClass(payload.className) }
        var payload = payload
        var opened = OpenedValues.none
        if let personal = personalByName[payload.className], let opener = personalArgumentsOpener {
            do {
                let args = try opener.open(payload.args, className: payload.className, jid: payload.jid ?? "", fields: personal.fields,
                                           subjectField: personal.subject)
                payload.fields["args"] = .array(args)
                opened = OpenedValues(args: args, fields: personal.fields)
            } catch let refusal as PersonalArgumentsRefusal {
                throw .refusedPersonalArguments(className: payload.className, errorClass: refusal.errorClass,
                                                reason: refusal.reason)
            } catch {
                // The key store is unreachable (or the like): not the job's fault — it waits, spending no retry.
                throw .keyStoreUnavailable(className: payload.className, reason: "\(error)")
            }
        }
        do {
            var prepared = try make(payload)
            prepared.opened = opened
            return prepared
        } catch let error as DispatchError {
            // A check in `init(from:)` may quote the value it refused: the reason leaves without opened values.
            switch error {
            case .invalidArguments(let name, let reason): throw .invalidArguments(className: name, reason: opened.scrub(reason))
            case .undecodableArguments(let name, let reason): throw .undecodableArguments(className: name, reason: opened.scrub(reason))
            default: throw error
            }
        } catch {
            throw .undecodableArguments(className: payload.className, reason: opened.scrub("\(error)"))
        }
    }

}

/// Decodes `args` (a JSON array) into a job's `Arguments` as Foundation's `JSONDecoder` does: first straight from the
/// parsed values (`JSONValueDecoder`, which succeeds only where `JSONDecoder` gives the same value), and when that
/// declines, with `JSONDecoder` itself — so a value it cannot give and every error (a dead job's reason) are
/// `JSONDecoder`'s.
enum ArgumentsDecoding {
    /// `layout` (`JobArguments.layout`): `.singleHash` decodes `T` from the only element of `args` and refuses any
    /// other count; `.positional` decodes `T` from the whole array.
    static func decode<T: Decodable>(_ type: T.Type, from args: [JSONValue], layout: JobArgumentsLayout = .positional) throws -> T {
        let root = try layout.root(of: args)
        if let value = try? JSONValueDecoder().decode(T.self, from: root) { return value }
        let data = Data(root.serialized().utf8)
        do {
            return try JSONDecoder().decode(T.self, from: data)
        } catch let error as DecodingError where layout == .singleHash {
            // Paths name the place in `args` (`args[0].user_id`), as for positional arguments.
            throw error.inFirstArgument
        }
    }

    /// A one-line explanation of a decoding error: what was expected where.
    static func describe(_ error: any Error) -> String {
        guard let error = error as? DecodingError else { return "\(error)" }
        func path(_ codingPath: [any CodingKey]) -> String {
            let text = codingPath.map { $0.intValue.map { "[\($0)]" } ?? ".\($0.stringValue)" }.joined()
            return "args" + text
        }
        switch error {
        case .typeMismatch(let type, let context):
            return "\(path(context.codingPath)): expected \(type), \(context.debugDescription)"
        case .valueNotFound(let type, let context):
            return "\(path(context.codingPath)): missing \(type) value"
        case .keyNotFound(let key, let context):
            return "\(path(context.codingPath)): missing key \"\(key.stringValue)\""
        case .dataCorrupted(let context):
            return "\(path(context.codingPath)): \(context.debugDescription)"
        @unknown default:
            return "\(error)"
        }
    }
}

extension DecodingError {
    /// The same error with `[0]` in front of its coding path (a `.singleHash` type decodes from `args[0]`).
    var inFirstArgument: DecodingError {
        struct First: CodingKey {
            var stringValue: String { "0" }
            var intValue: Int? { 0 }
            init() {}
            init?(stringValue: String) { nil }
            init?(intValue: Int) { nil }
        }
        func moved(_ context: Context) -> Context {
            Context(codingPath: [First()] + context.codingPath, debugDescription: context.debugDescription,
                    underlyingError: context.underlyingError)
        }
        switch self {
        case .typeMismatch(let type, let context): return .typeMismatch(type, moved(context))
        case .valueNotFound(let type, let context): return .valueNotFound(type, moved(context))
        case .keyNotFound(let key, let context): return .keyNotFound(key, moved(context))
        case .dataCorrupted(let context): return .dataCorrupted(moved(context))
        @unknown default: return self
        }
    }
}
