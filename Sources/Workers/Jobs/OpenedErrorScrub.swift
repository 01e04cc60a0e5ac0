import Foundation
import WorkersQueue

/// The one-off scrub of error texts written before opened personal values were kept out of them (issue 50 point 1,
/// docs/jobs-privacy.md "Opened values"): `workerctl keys scrub-errors`. For every job in `retry` and `dead` whose
/// class declares personal fields (`types`) and whose entry has an `error_message` or `error_backtrace`:
/// - its envelopes open (`opener`): every opened value in those texts becomes `[field]`, as `OpenedValues` does for a
///   run today;
/// - they cannot be opened any more (`SubjectErased`, `UnreadableEnvelope`) and the texts are a run's own (not the
///   refusal's): the values cannot be told apart, so both texts are replaced by `blankedMessage` and no backtrace;
/// - the key store cannot be reached: the pass stops with that error (run it again later; what was rewritten stays).
/// The arguments stay as they are (sealed). Entries are replaced through `JobSetRewrite` (only if still there).
///
/// Thread rules: a value; any thread.
package struct OpenedErrorScrub: Sendable {
    let declarations: [String: (fields: Set<String>, subject: String?)]
    let opener: any PersonalArgumentsOpener
    let rewrite: JobSetRewrite

    /// The error text left in an entry whose opened values cannot be found any more.
    package static let blankedMessage = "[error text removed: it may quote personal values whose key is erased]"
    /// The error classes the opener itself writes: their texts never held a value.
    static let refusalClasses: Set<String> = ["SubjectErased", "UnreadableEnvelope", "PersonalDataInClear"]

    package init(types: [any JobArguments.Type], opener: any PersonalArgumentsOpener, pools: [RedisPool]) {
        var declarations: [String: (Set<String>, String?)] = [:]
        for type in types where !type.personalFields.isEmpty { declarations[type.className] = (type.personalFields, type.subjectField) }
        self.declarations = declarations
        self.opener = opener
        rewrite = JobSetRewrite(pools: pools)
    }

    package struct Report: Sendable, Equatable {
        /// Entries read in `retry` and `dead`.
        package var scanned = 0
        /// Entries whose opened values were replaced by `[field]`.
        package var scrubbed = 0
        /// Entries whose error texts were replaced by `blankedMessage` (their key is erased).
        package var blanked = 0
        /// Entries that moved (retried, deleted) before they could be replaced: run again to reach them.
        package var moved = 0
    }

    /// One pass; `dryRun`: counts what would change, writes nothing.
    package func run(dryRun: Bool) throws -> Report {
        var scrubbed = 0, blanked = 0
        let counts = try rewrite.rewrite(dryRun: dryRun) { payload -> JobPayload? in
            guard let declaration = declarations[payload.className] else { return nil }
            let message = payload.fields["error_message"]?.stringValue
            let backtrace = payload.fields["error_backtrace"]?.arrayValue
            guard message != nil || backtrace != nil else { return nil }
            var changed = payload
            do {
                let args = try opener.open(payload.args, className: payload.className, jid: payload.jid ?? "", fields: declaration.fields,
                                           subjectField: declaration.subject)
                let opened = OpenedValues(args: args, fields: declaration.fields)
                if let message { changed.fields["error_message"] = .string(opened.scrub(message)) }
                if let backtrace {
                    changed.fields["error_backtrace"] = .array(backtrace.map { $0.stringValue.map { .string(opened.scrub($0)) } ?? $0 })
                }
                guard changed.fields != payload.fields else { return nil }
                scrubbed += 1
            } catch is PersonalArgumentsRefusal {
                let errorClass = payload.fields["error_class"]?.stringValue ?? ""
                guard !Self.refusalClasses.contains(errorClass), message != Self.blankedMessage || backtrace != nil else { return nil }
                changed.fields["error_message"] = .string(Self.blankedMessage)
                changed.fields["error_backtrace"] = nil
                blanked += 1
            }
            return changed
        }
        return Report(scanned: counts.scanned, scrubbed: scrubbed, blanked: blanked, moved: counts.moved)
    }
}
