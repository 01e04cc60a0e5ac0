import Foundation
import Logging
import WorkersQueue

/// The personal values one run opened (the declared personal fields of its arguments, docs/jobs-privacy.md), and the
/// one way text leaves the run: every error text written to the job's entry (`error_message`, `error_backtrace`) and
/// every line logged through the run's logger go through `scrub`, which puts `[field]` in place of each opened value.
/// So a job that quotes its arguments in an error or a log line ("transaction 2000000099887766 is not in the
/// receipt") writes no opened value to Redis, its AOF, backups or the logs, whatever the job's code does.
///
/// Values shorter than 4 characters are not scrubbed (they would blank ordinary words); personal fields hold ids,
/// addresses, receipts and tokens. Pure value; any thread.
struct OpenedValues: Sendable {
    static let none = OpenedValues(pairs: [])
    /// The smallest value scrubbed.
    static let minimumLength = 4

    /// (field, value), longest value first (a value containing another is replaced whole).
    let pairs: [(field: String, value: String)]

    init(pairs: [(field: String, value: String)]) {
        self.pairs = pairs.filter { $0.value.count >= Self.minimumLength }.sorted { $0.value.count > $1.value.count }
    }

    /// The personal fields' values in `args` as the registry opened them (`layout`'s root object: a string as it is,
    /// a number or a boolean as its JSON text).
    init(args: [JSONValue], fields: Set<String>) {
        guard let object = args.first?.objectValue else { self.init(pairs: []); return }
        var pairs: [(String, String)] = []
        for field in fields.sorted() {
            switch object[field] {
            case .string(let text)?: pairs.append((field, text))
            case .int(let number)?: pairs.append((field, String(number)))
            case .double(let number)?: pairs.append((field, JSONValue.double(number).serialized()))
            default: break
            }
        }
        self.init(pairs: pairs)
    }

    var isEmpty: Bool { pairs.isEmpty }

    /// `text` with every opened value replaced by `[field]`.
    func scrub(_ text: String) -> String {
        guard !pairs.isEmpty else { return text }
        var result = text
        for (field, value) in pairs where result.contains(value) {
            result = result.replacingOccurrences(of: value, with: "[\(field)]")
        }
        return result
    }

    /// `settlement` with its payload's error texts scrubbed (the args stay as fetched: sealed).
    func scrub(_ settlement: Settlement) -> Settlement {
        guard !pairs.isEmpty else { return settlement }
        func scrubbed(_ json: String) -> String {
            guard var payload = try? JobPayload(parsing: json) else { return scrub(json) }
            if let message = payload.fields["error_message"]?.stringValue {
                payload.fields["error_message"] = .string(scrub(message))
            }
            if let lines = payload.fields["error_backtrace"]?.arrayValue {
                payload.fields["error_backtrace"] = .array(lines.map { $0.stringValue.map { .string(scrub($0)) } ?? $0 })
            }
            return payload.serialized()
        }
        switch settlement {
        case .retry(let payload, let at): return .retry(payload: scrubbed(payload), at: at)
        case .dead(let payload): return .dead(payload: scrubbed(payload))
        default: return settlement
        }
    }

    func scrub(_ result: RunResult) -> RunResult {
        guard !pairs.isEmpty, case .settled(let settlement, let counts) = result else { return result }
        return .settled(scrub(settlement), counts: counts)
    }

    /// `logger` whose every message and metadata value is scrubbed (`ScrubbingLogHandler`); `logger` itself when
    /// nothing was opened.
    func logger(_ logger: Logger) -> Logger {
        guard !pairs.isEmpty else { return logger }
        var scrubbing = logger
        scrubbing.handler = ScrubbingLogHandler(base: logger.handler, opened: self)
        return scrubbing
    }
}

/// A log handler that scrubs opened personal values from each line's message and metadata before `base` writes it.
struct ScrubbingLogHandler: LogHandler {
    var base: any LogHandler
    let opened: OpenedValues

    var logLevel: Logger.Level {
        get { base.logLevel }
        set { base.logLevel = newValue }
    }

    /// Metadata a job sets on its logger (`logger[metadataKey: "user_id"] = …`) is scrubbed as it is set.
    var metadata: Logger.Metadata {
        get { base.metadata }
        set { base.metadata = newValue.mapValues(scrub) }
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { base[metadataKey: key] }
        set { base[metadataKey: key] = newValue.map(scrub) }
    }

    func log(event: LogEvent) {
        var scrubbed = event
        scrubbed.message = "\(opened.scrub(event.message.description))"
        var metadata = event.metadata?.mapValues(scrub)
        if let error = event.error {  // an error's description may quote what it refused: it goes as scrubbed text
            scrubbed.error = nil
            if metadata?["error"] == nil { metadata = (metadata ?? [:]).merging(["error": .string(opened.scrub("\(error)"))]) { $1 } }
        }
        scrubbed.metadata = metadata
        base.log(event: scrubbed)
    }

    private func scrub(_ value: Logger.Metadata.Value) -> Logger.Metadata.Value {
        switch value {
        case .string(let text): return .string(opened.scrub(text))
        case .stringConvertible(let convertible): return .string(opened.scrub(convertible.description))
        case .array(let values): return .array(values.map(scrub))
        case .dictionary(let values): return .dictionary(values.mapValues(scrub))
        }
    }
}
