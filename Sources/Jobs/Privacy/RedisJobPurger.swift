import Foundation
import WorkersQueue
import Workers

/// Finds and removes the job payloads that name one person, wherever a job can sit in our Redis job state: the
/// places and the removal are Queue's (`JobPurge`, Queue/Admin); this type supplies the predicate.
///
/// A job names the person when a string anywhere in its `args` (any depth) contains the user id or, when
/// given, the e-mail address, in any letter case, as a whole token (a mail job may carry only the address, e.g.
/// `"Alice <ALICE@example.org>"`). The sorted sets are prefiltered on the server with a case-insensitive glob of each
/// needle (an address JSON might escape is scanned without the filter). A live process's in-flight list is left
/// alone (its jobs are running: see docs/jobs-privacy.md).
/// Thread-safe: borrows connections from the pools per call.
public struct RedisJobPurger: Sendable {
    /// One pool per shard (index 0 the default shard); one element without sharding.
    public let pools: [RedisPool]
    public var pool: RedisPool { pools[0] }

    public init(pool: RedisPool) { self.pools = [pool] }

    /// Purges on every shard of `shards`.
    package init(shards: ShardPools) { self.pools = shards.pools }

    package typealias Report = JobPurge.Report

    /// Removes every job of a dead process's in-flight list, the scheduled, retry and dead sets, and the
    /// queues whose `args` contain `userID` or `email` (any case).
    package func purge(userID: UUID, email: String? = nil) throws -> Report {
        let needles = Self.needles(userID: userID, email: email)
        return try JobPurge(pools: pools).purge(prefilters: Self.matchPatterns(for: needles)) {
            Self.arguments($0.args, containAnyOf: needles)
        }
    }

    /// ZSCAN patterns that together prefilter every member holding one of `needles`: one case-insensitive
    /// glob per needle, or the single pattern `*` when a needle holds a character JSON may write escaped
    /// (non-ASCII, `"`, `\`, `/`, control characters), so the text in Redis may not equal the needle.
    static func matchPatterns(for needles: [String]) -> [String] {
        let escapable = needles.contains { needle in
            needle.unicodeScalars.contains { !$0.isASCII || $0.value < 0x20 || "\"\\/".unicodeScalars.contains($0) }
        }
        if escapable { return ["*"] }
        return needles.map { "*" + caseInsensitiveGlob($0) + "*" }
    }

    /// `request_id`s (lowercased) of `AccountDeletionJob`s that are scheduled, waiting for a retry,
    /// enqueued, or running (in a working list). Dead jobs do not count as pending.
    public func pendingDeletionRequestIDs() throws -> Set<String> {
        var ids: Set<String> = []
        try JobPurge(pools: pools).forEachPending(prefilter: "*" + AccountDeletionJob.className + "*") { payload in
            guard payload.className == AccountDeletionJob.className,
                  let request = payload.args.first?.objectValue?["request_id"]?.stringValue else { return }
            ids.insert(request.lowercased())
        }
        return ids
    }

    // MARK: - Matching

    /// What names the person (lowercase): the user id, and the address when given. `OutboxJobPurger` looks for
    /// the same needles in `job_outbox`, so both places agree on which jobs name the user.
    static func needles(userID: UUID, email: String?) -> [String] {
        var needles = [userID.uuidString.lowercased()]
        if let email = email?.trimmingCharacters(in: .whitespacesAndNewlines).lowercased(), !email.isEmpty {
            needles.append(email)
        }
        return needles
    }

    /// True when `member` parses as a job payload whose `args` hold `id` (lowercase uuid) as a string value,
    /// at any depth, in any letter case.
    static func arguments(of member: [UInt8], contain id: String) -> Bool {
        arguments(of: member, containAnyOf: [id])
    }

    /// True when `member` parses as a job payload with a string in `args`, at any depth, that contains one
    /// of `needles` (lowercase) in any letter case, as a whole token: the characters around it are not
    /// letters, digits or `. _ % + -`, so `bob@example.org` does not match `jimbob@example.org`.
    static func arguments(of member: [UInt8], containAnyOf needles: [String]) -> Bool {
        guard let payload = try? JobPayload(parsing: member) else { return false }
        return arguments(payload.args, containAnyOf: needles)
    }

    /// The same test on parsed `args`.
    static func arguments(_ args: [JSONValue], containAnyOf needles: [String]) -> Bool {
        args.contains { contains($0, needles) }
    }

    private static func contains(_ value: JSONValue, _ needles: [String]) -> Bool {
        switch value {
        case .string(let s):
            let lowered = s.lowercased()
            return needles.contains { containsToken(lowered, $0) }
        case .array(let items): return items.contains { contains($0, needles) }
        case .object(let object): return object.contains { contains($0.value, needles) }
        default: return false
        }
    }

    static func containsToken(_ text: String, _ needle: String) -> Bool {
        func isTokenCharacter(_ ch: Character) -> Bool { ch.isLetter || ch.isNumber || "._%+-".contains(ch) }
        var searchRange = text.startIndex..<text.endIndex
        while let found = text.range(of: needle, range: searchRange) {
            let clearBefore = found.lowerBound == text.startIndex || !isTokenCharacter(text[text.index(before: found.lowerBound)])
            let clearAfter = found.upperBound == text.endIndex || !isTokenCharacter(text[found.upperBound])
            if clearBefore && clearAfter { return true }
            searchRange = text.index(after: found.lowerBound)..<text.endIndex
        }
        return false
    }

    /// A Redis glob matching `text` in any letter case (`ab-1` → `[aA][bB]-1`); the glob metacharacters
    /// `* ? [ ] \` are escaped with a backslash.
    static func caseInsensitiveGlob(_ text: String) -> String {
        text.map { ch in
            if "*?[]\\".contains(ch) { return "\\" + String(ch) }
            let lower = ch.lowercased(), upper = ch.uppercased()
            return lower == upper ? String(ch) : "[\(lower)\(upper)]"
        }.joined()
    }
}
