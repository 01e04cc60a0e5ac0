/// How many entries one operator read may look at, and until when (review M5): a dashboard GET over a queue of
/// millions reads at most `maxEntries` of them, then stops and says so, instead of loading the whole queue.
///
/// One budget is shared by every scan one request makes (a search over five states, a jid looked up in every
/// queue): each scan takes from what the previous ones left. `nil` where a budget is optional means unlimited (the
/// `workerctl` commands, which an operator runs on purpose and which stream).
///
/// Invariant: `scanned <= maxEntries`; once `remaining` is 0 no scan reads another entry. Threading: used by one
/// thread at a time (the request's, on a `WorkersClient` thread); not locked.
public final class ScanBudget: @unchecked Sendable {
    /// The dashboard's budget per shard and request: 10,000 entries.
    public static let webEntries = 10_000

    public let maxEntries: Int
    /// No scan reads past this instant (nil: no deadline).
    public let deadline: ContinuousClock.Instant?
    /// Entries read so far (list elements, set members; a `ZSCAN` step counts as its `COUNT`).
    public private(set) var scanned = 0
    /// True once a scan stopped with entries left unread because the budget or the deadline ran out.
    public private(set) var exhausted = false

    public init(maxEntries: Int, deadline: ContinuousClock.Instant? = nil) {
        self.maxEntries = max(0, maxEntries)
        self.deadline = deadline
    }

    public var isPastDeadline: Bool { deadline.map { ContinuousClock.now >= $0 } ?? false }

    /// How many more entries a scan may read now (0 when spent or past the deadline).
    public var remaining: Int { isPastDeadline ? 0 : maxEntries - scanned }

    /// Counts `count` entries read (never past `maxEntries`).
    func consume(_ count: Int) { scanned = min(maxEntries, scanned + max(0, count)) }

    /// Records that a scan stopped early.
    func stop() { exhausted = true }
}

extension Optional where Wrapped == ScanBudget {
    /// `remaining` of a budget, `Int.max` without one.
    var remaining: Int { self?.remaining ?? Int.max }
}
