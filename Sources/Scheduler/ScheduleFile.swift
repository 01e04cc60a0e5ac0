import Foundation
import WorkersQueue
import Yams

/// One thing wrong with one entry of a schedule file.
///
/// `description` reads like `entry 'nightly': cron: minute: 61 is out of range 0-59`.
public struct ScheduleProblem: Error, Sendable, Equatable, CustomStringConvertible {
    /// A reason without its context, thrown by helpers that do not know the entry.
    public struct Reason: Error, Sendable, Equatable {
        public let text: String
        public init(_ text: String) { self.text = text }
    }

    /// The entry's name, or `#N` (1-based position) when it has no usable name, or `file`.
    public let entry: String
    /// The YAML key concerned, if any.
    public let field: String?
    public let reason: String

    public init(entry: String, field: String?, reason: String) {
        self.entry = entry
        self.field = field
        self.reason = reason
    }

    public var description: String {
        let subject = entry == "file" ? "file" : entry.hasPrefix("#") ? "entry \(entry)" : "entry '\(entry)'"
        return field.map { "\(subject): \($0): \(reason)" } ?? "\(subject): \(reason)"
    }
}

/// A schedule file that was refused, with every problem found (not just the first).
public struct ScheduleFileError: Error, Sendable, Equatable, CustomStringConvertible {
    public let path: String
    public let problems: [ScheduleProblem]

    public var description: String {
        "\(path): invalid schedule (\(problems.count) problem\(problems.count == 1 ? "" : "s")):\n"
            + problems.map { "  - \($0)" }.joined(separator: "\n")
    }
}

/// The parsed `config/schedule.yaml`: a YAML list of entries.
///
/// ```yaml
/// - name: ad_revenue.nightly          # unique, [A-Za-z0-9_.-]+
///   cron: "15 0 * * *"                # 5 or 6 fields, or a macro (quote it: `*` starts a YAML alias)
///   class: AdRevenueAggregationJob    # `klass` is accepted too (sidekiq-cron's spelling)
///   queue: default                    # default: default
///   args: []                          # a YAML list, converted to JSON values; default []
///   timezone: Europe/Berlin           # an IANA name; default UTC
///   enabled: true                     # default true
///   catch_up: all                     # skip (default) | latest | all
///   catch_up_window: 7d               # s/m/h/d/w; default for `all` 24h, for `latest` unlimited
///   pass_tick: date_minus_1           # none (default) | date | date_minus_N | time — see `TickArgument`
///   description: free text
/// ```
///
/// Invariant: names are unique; every entry passed `ScheduleEntry.init`'s checks. Unknown keys are
/// refused (a typo such as `catchup` must not silently mean "skip").
public struct ScheduleFile: Sendable {
    public let entries: [ScheduleEntry]

    public init(entries: [ScheduleEntry]) { self.entries = entries }

    public func entry(named name: String) -> ScheduleEntry? { entries.first { $0.name == name } }

    /// Reads and parses the file at `path`.
    public static func load(path: String) throws(ScheduleFileError) -> ScheduleFile {
        let text: String
        do {
            text = try String(contentsOfFile: path, encoding: .utf8)
        } catch {
            throw ScheduleFileError(path: path, problems: [.init(entry: "file", field: nil, reason: "cannot read: \(error.localizedDescription)")])
        }
        return try parse(yaml: text, path: path)
    }

    /// Parses schedule YAML; `path` only labels the errors.
    public static func parse(yaml: String, path: String = "<schedule>") throws(ScheduleFileError) -> ScheduleFile {
        func refuse(_ problems: [ScheduleProblem]) -> ScheduleFileError { ScheduleFileError(path: path, problems: problems) }
        let root: Node?
        do {
            root = try Yams.compose(yaml: yaml)
        } catch {
            throw refuse([.init(entry: "file", field: nil, reason: "not valid YAML: \(error)")])
        }
        guard let root else { return ScheduleFile(entries: []) }
        guard case .sequence(let items) = root else {
            throw refuse([.init(entry: "file", field: nil, reason: "must be a YAML list of entries, not \(kind(root))")])
        }

        var entries: [ScheduleEntry] = []
        var problems: [ScheduleProblem] = []
        var positions: [String: Int] = [:]
        for (index, item) in items.enumerated() {
            switch EntryReader(node: item, position: index + 1).read() {
            case .success(let entry):
                if let first = positions[entry.name] {
                    problems.append(.init(entry: entry.name, field: "name", reason: "duplicate name (entries #\(first) and #\(index + 1))"))
                } else {
                    positions[entry.name] = index + 1
                    entries.append(entry)
                }
            case .failure(let entryProblems):
                problems += entryProblems.problems
            }
        }
        guard problems.isEmpty else { throw refuse(problems) }
        return ScheduleFile(entries: entries)
    }
}

/// Whether a scalar's resolved tag is `name` (a quoted scalar is always a string).
private func isTagged(_ node: Node, _ name: Tag.Name) -> Bool {
    if case .scalar = node { return node.tag.description == name.rawValue }
    return false
}

private func kind(_ node: Node) -> String {
    switch node {
    case .scalar: return isTagged(node, .null) ? "null" : "a scalar"
    case .mapping: return "a mapping"
    case .sequence: return "a list"
    }
}

/// Reads one list item into a `ScheduleEntry`, collecting every problem of that item.
private struct EntryReader {
    struct Problems: Error { var problems: [ScheduleProblem] }

    static let knownKeys: Set<String> = ["name", "cron", "class", "klass", "queue", "args", "timezone", "enabled",
                                         "catch_up", "catch_up_window", "pass_tick", "description"]

    let node: Node
    let position: Int

    func read() -> Result<ScheduleEntry, Problems> {
        var problems: [ScheduleProblem] = []
        guard case .mapping(let mapping) = node else {
            return .failure(Problems(problems: [.init(entry: "#\(position)", field: nil, reason: "must be a mapping, not \(kind(node))")]))
        }
        var fields: [String: Node] = [:]
        for (key, value) in mapping {
            guard case .scalar(let keyScalar) = key else {
                problems.append(.init(entry: "#\(position)", field: nil, reason: "keys must be plain strings"))
                continue
            }
            fields[keyScalar.string] = value
        }
        let rawName = fields["name"]?.scalar?.string
        let label = rawName.flatMap { ScheduleEntry.isValidName($0) ? $0 : nil } ?? "#\(position)"
        func fail(_ field: String?, _ reason: String) { problems.append(.init(entry: label, field: field, reason: reason)) }

        for key in fields.keys.sorted() where !Self.knownKeys.contains(key) {
            fail(key, "unknown key (known: \(Self.knownKeys.sorted().joined(separator: ", ")))")
        }

        func string(_ key: String, required: Bool = false) -> String? {
            guard let node = fields[key] else {
                if required { fail(key, "is required") }
                return nil
            }
            guard case .scalar(let scalar) = node, !isTagged(node, .null) else {
                fail(key, "must be a string, not \(kind(node))")
                return nil
            }
            return scalar.string
        }

        let name = string("name", required: true)
        if let name, !ScheduleEntry.isValidName(name) {
            fail("name", "'\(name)' must be non-empty and use only letters, digits, '_', '.' and '-'")
        }

        var cron: CronExpression?
        if let text = string("cron", required: true) {
            do { cron = try CronExpression(text) } catch { fail("cron", "'\(text)': \(error)") }
        }

        if fields["class"] != nil, fields["klass"] != nil { fail("class", "give either class or klass, not both") }
        let className = fields["class"] != nil ? string("class") : fields["klass"] != nil ? string("klass") : string("class", required: true)

        let queue = string("queue") ?? "default"

        var args: [JSONValue] = []
        if let node = fields["args"] {
            if case .sequence(let items) = node {
                for item in items {
                    do { args.append(try jsonValue(item)) } catch { fail("args", error.text) }
                }
            } else if isTagged(node, .null) {
                args = []
            } else {
                fail("args", "must be a YAML list, not \(kind(node))")
            }
        }

        var timeZone = TimeZone(identifier: "UTC")!
        if let identifier = string("timezone") {
            if let zone = TimeZone(identifier: identifier) { timeZone = zone } else { fail("timezone", "unknown time zone '\(identifier)' (use an IANA name such as Europe/Berlin)") }
        }

        var enabled = true
        if let node = fields["enabled"] {
            if isTagged(node, .bool), let value = node.bool { enabled = value } else { fail("enabled", "must be true or false") }
        }

        var catchUp = CatchUpPolicy.skip
        var mode: CatchUpPolicy.Mode? = .skip
        if let text = string("catch_up") {
            mode = CatchUpPolicy.Mode(rawValue: text)
            if mode == nil { fail("catch_up", "'\(text)' is not one of skip, latest, all") }
        }
        var window: TimeInterval?
        var windowValid = true
        if let text = string("catch_up_window") {
            window = DurationText.parse(text)
            if window == nil {
                windowValid = false
                fail("catch_up_window", "'\(text)' is not a duration like 90m, 6h, 7d or 1h30m")
            }
        }
        if let mode, windowValid {
            do { catchUp = try CatchUpPolicy(mode: mode, window: window) } catch { fail("catch_up_window", error.text) }
        }

        var tickArgument = TickArgument.none
        if let text = string("pass_tick") {
            if let value = TickArgument(yaml: text) { tickArgument = value } else { fail("pass_tick", "'\(text)' is not one of none, date, date_minus_N, time") }
        }

        let description = string("description")

        guard problems.isEmpty, let name, let cron, let className else { return .failure(Problems(problems: problems)) }
        do {
            return .success(try ScheduleEntry(name: name, cron: cron, className: className, queue: queue, args: args,
                                              timeZone: timeZone, enabled: enabled, catchUp: catchUp,
                                              tickArgument: tickArgument, description: description))
        } catch {
            return .failure(Problems(problems: [error]))
        }
    }

    /// YAML → JSON: scalars by their resolved tag (null, bool, int, float, else string — so a
    /// quoted "42" stays a string and a date stays its text), mappings keep their key order.
    func jsonValue(_ node: Node) throws(ScheduleProblem.Reason) -> JSONValue {
        switch node {
        case .scalar(let scalar):
            switch node.tag.description {
            case Tag.Name.null.rawValue: return .null
            case Tag.Name.bool.rawValue: if let b = node.bool { return .bool(b) }
            case Tag.Name.int.rawValue:
                if let i = node.int { return .int(Int64(i)) }
                throw .init("'\(scalar.string)' does not fit a 64-bit integer")
            case Tag.Name.float.rawValue:
                if let d = node.float {
                    guard d.isFinite else { throw .init("'\(scalar.string)' is not a finite number (JSON has no infinity or NaN)") }
                    return .double(d)
                }
            default: break
            }
            return .string(scalar.string)
        case .sequence(let items):
            var array: [JSONValue] = []
            for item in items { array.append(try jsonValue(item)) }
            return .array(array)
        case .mapping(let mapping):
            var object = JSONObject()
            for (key, value) in mapping {
                guard case .scalar(let keyScalar) = key else { throw .init("object keys must be strings") }
                object[keyScalar.string] = try jsonValue(value)
            }
            return .object(object)
        }
    }
}
