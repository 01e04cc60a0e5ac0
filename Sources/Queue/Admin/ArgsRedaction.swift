/// How a job's arguments (and its other fields) are shown to an operator — on the dashboard's pages and by
/// `workerctl jobs` (review M11). Store receipts, purchase tokens, signed transactions, e-mail addresses and
/// coordinates travel in job arguments; the logs only fingerprint them, and neither the pages nor the command
/// line show them in full.
///
/// - Default, for every class: inside the arguments and the payload's other fields, at any depth, the value of
///   every object key that `isSensitive` (compared without case, `_` and `-`: `purchase_token`, `purchaseToken`
///   and `Purchase-Token` are one key) is replaced by `"[redacted]"`.
/// - Per class, its declared personal fields (`JobArguments.personalFields`, the single-hash layout): each is shown as
///   `"[encrypted]"` when it holds an envelope and `"[redacted]"` when it arrived in clear (a foreign producer), whatever
///   its key's name (`user_id`, `transaction_id` are not sensitive words, but personal for that class).
/// - Per class, a hook (like Oban Web's `format_job_args`) rewrites the arguments first — for a class that takes a
///   secret positionally (`["user-1", "eyJhbGci…"]`) — and the default then applies to its result, so a hook can
///   hide more, never less.
///
/// Only what is shown changes: the job in Redis, and every action on it (retry, delete…), use its exact bytes.
/// Immutable; any thread.
public struct ArgsRedactor: Sendable {
    /// Rewrites one class's arguments for display.
    public typealias Hook = @Sendable (_ args: [JSONValue]) -> [JSONValue]

    /// What a hidden value is shown as.
    public static let placeholder = "[redacted]"
    /// What a declared personal field holding an envelope is shown as.
    public static let encryptedPlaceholder = "[encrypted]"

    /// Keys whose values are hidden wherever they occur (normalized: lower case, no `_` or `-`). From the domain
    /// jobs' arguments (Sources/Jobs: `receipt_data`, `purchase_token`, `signed_transaction`, the notifications'
    /// `signedPayload`) and the usual personal data.
    public static let sensitiveKeys: Set<String> = [
        "purchasetoken", "receiptdata", "receipt", "signedtransaction", "signedpayload", "signedrenewalinfo",
        "token", "accesstoken", "refreshtoken", "idtoken", "apikey", "secret", "password", "authorization",
        "email", "phone", "lat", "lon", "lng", "latitude", "longitude", "ip", "ipaddress",
    ]

    /// True for a key in `sensitiveKeys`, or one that ends in `token`, `secret` or `password` (after normalizing).
    public static func isSensitive(_ key: String) -> Bool {
        let normalized = String(key.lowercased().filter { $0 != "_" && $0 != "-" })
        if sensitiveKeys.contains(normalized) { return true }
        return normalized.hasSuffix("token") || normalized.hasSuffix("secret") || normalized.hasSuffix("password")
    }

    /// The default rule applied to one value, at any depth.
    public static func redactingSensitiveKeys(_ value: JSONValue) -> JSONValue {
        switch value {
        case .array(let items): return .array(items.map(redactingSensitiveKeys))
        case .object(let object):
            return .object(JSONObject(object.entries.map { entry in
                (entry.key, isSensitive(entry.key) ? .string(placeholder) : redactingSensitiveKeys(entry.value))
            }))
        default: return value
        }
    }

    private let hooks: [String: Hook]
    private let personalFields: [String: Set<String>]

    /// `hooks` by class name (the payload's `class`, or the display class: ActiveJob's `wrapped`); `personalFields`
    /// by class name too (`declaring(_:)` builds them from the argument types).
    public init(hooks: [String: Hook] = [:], personalFields: [String: Set<String>] = [:]) {
        self.hooks = hooks
        self.personalFields = personalFields.filter { !$0.value.isEmpty }
    }

    /// The default rule, each of `types`' declared personal fields hidden, and `hooks`.
    public static func declaring(_ types: [any JobArguments.Type], hooks: [String: Hook] = [:]) -> ArgsRedactor {
        var fields: [String: Set<String>] = [:]
        for type in types { fields[type.className, default: []].formUnion(type.personalFields) }
        return ArgsRedactor(hooks: hooks, personalFields: fields)
    }

    /// The default rule for every class, no hooks.
    public static let standard = ArgsRedactor()

    /// The record's arguments as shown: its class's hook, then the default rule. nil when it has none.
    public func args(of record: JobRecord) -> [JSONValue]? {
        guard let args = record.args else { return nil }
        let hook = record.className.flatMap { hooks[$0] } ?? record.displayClass.flatMap { hooks[$0] }
        var shown = hook?(args) ?? args
        if let fields = record.className.flatMap({ personalFields[$0] }) ?? record.displayClass.flatMap({ personalFields[$0] }),
           let first = shown.first, let object = first.objectValue {
            shown[0] = .object(JSONObject(object.entries.map { entry in
                guard fields.contains(entry.key) else { return entry }
                let sealed = entry.value.objectValue?["enc"] != nil
                return (entry.key, .string(sealed ? Self.encryptedPlaceholder : Self.placeholder))
            }))
        }
        return shown.map(Self.redactingSensitiveKeys)
    }

    /// The whole payload as shown: `args` as `args(of:)`, every other field by the default rule. nil when the
    /// entry is not a JSON object (then show nothing of it but that it is invalid).
    public func item(of record: JobRecord) -> JSONObject? {
        guard let item = record.item else { return nil }
        return JSONObject(item.entries.map { entry in
            if entry.key == "args", let args = args(of: record) { return (entry.key, .array(args)) }
            return (entry.key, Self.isSensitive(entry.key) ? .string(Self.placeholder) : Self.redactingSensitiveKeys(entry.value))
        })
    }

    /// Arguments stored as JSON text (an outbox row's `args`) as shown: the default rule applied, serialized; text
    /// that is not JSON is shown as its length only.
    public static func redactedText(ofArgsJSON text: String) -> String {
        guard let value = try? JSONValue.parse(text) else { return "(not JSON: \(text.utf8.count) bytes, not shown)" }
        return redactingSensitiveKeys(value).serialized()
    }

    /// The payload's text as shown: `item(of:)` serialized; for an entry that is not a JSON object, a note with its
    /// length only (its bytes may be anything, a secret included).
    public func text(of record: JobRecord) -> String {
        guard let item = item(of: record) else { return "(not a JSON object: \(record.raw.count) bytes, not shown)" }
        return JSONValue.object(item).serialized()
    }
}
