import Foundation

/// Where a job can be, as the operator sees it. The sorted-set states map to Sidekiq's
/// `ScheduledSet`, `RetrySet` and `DeadSet`; `enqueued` is a `queue:NAME` list; `busy` is a job
/// a live process is running (its `IDENTITY:workers` hash).
public enum JobState: String, CaseIterable, Sendable, CustomStringConvertible {
    case enqueued, scheduled, retry, dead, busy

    /// The ZSET key of a sorted-set state, nil for `enqueued` and `busy`.
    public var setKey: String? {
        switch self {
        case .scheduled: return Keys.schedule
        case .retry: return Keys.retry
        case .dead: return Keys.dead
        case .enqueued, .busy: return nil
        }
    }

    public var description: String { rawValue }

    /// Accepts the state names and Sidekiq's key names (`schedule`, `queue`, `morgue`…).
    public init?(name: String) {
        switch name.lowercased() {
        case "enqueued", "queued", "queue", "pending": self = .enqueued
        case "scheduled", "schedule": self = .scheduled
        case "retry", "retries": self = .retry
        case "dead", "morgue": self = .dead
        case "busy", "running", "active": self = .busy
        default: return nil
        }
    }
}

/// A job in progress on a process, from its workers hash (wire doc §10.1).
public struct BusyWork: Sendable, Equatable {
    /// The process identity (`HOST:PID:NONCE`).
    public var identity: String
    /// The thread id (the field of the workers hash).
    public var thread: String
    /// Integer epoch seconds when the job started.
    public var runAt: Double

    public init(identity: String, thread: String, runAt: Double) {
        self.identity = identity
        self.thread = thread
        self.runAt = runAt
    }
}

/// One job found in Redis.
///
/// Invariant: `raw` holds the member's exact bytes as stored (list element or ZSET member),
/// so removing it with `LREM`/`ZREM` removes exactly this entry. `item` is the parsed JSON object
/// (nil when the bytes are not a JSON object, which Ruby also keeps in `dead`), and `payload` is
/// set only when the object is a valid job (`class` string, `args` array).
public struct JobRecord: Sendable {
    public let state: JobState
    public let raw: [UInt8]
    public let item: JSONObject?
    public let payload: JobPayload?
    /// Why the entry is not a valid job, when it is not.
    public let invalidReason: String?
    /// The ZSET score (run time, next attempt or death time); nil for lists and busy jobs.
    public let score: Double?
    /// For `enqueued`, the list it is in; otherwise the payload's `queue` (Sidekiq's default
    /// `default` when missing).
    public let queue: String
    /// For `busy`, who runs it.
    public let work: BusyWork?

    public init(state: JobState, raw: [UInt8], score: Double? = nil, listQueue: String? = nil, work: BusyWork? = nil) {
        self.state = state
        self.raw = raw
        self.score = score
        self.work = work
        var item: JSONObject?
        var payload: JobPayload?
        var reason: String?
        if let text = UTF8Text.validated(raw) {
            do {
                let value = try JSONValue.parse(text)
                item = value.objectValue
                do { payload = try JobPayload(validating: value) } catch { reason = error.description }
            } catch {
                reason = PayloadError.unparseable(error).description
            }
        } else {
            reason = PayloadError.notUTF8.description
        }
        self.item = item
        self.payload = payload
        self.invalidReason = reason
        self.queue = listQueue ?? item?["queue"]?.stringValue ?? "default"
    }

    public var rawText: String { String(decoding: raw, as: UTF8.self) }
    public var jid: String? { item?["jid"]?.stringValue }
    public var className: String? { item?["class"]?.stringValue }
    /// ActiveJob's `wrapped` or `display_class` when present (like `JobRecord#display_class`).
    public var displayClass: String? { payload?.displayClass ?? className }
    public var args: [JSONValue]? { item?["args"]?.arrayValue }
    public var retryCount: Int64? { item?["retry_count"]?.intValue }
    public var errorClass: String? { item?["error_class"]?.stringValue }
    public var errorMessage: String? { item?["error_message"]?.stringValue }
    /// Times in epoch seconds, from float seconds or Sidekiq 8's integer milliseconds (`TimestampUnit`); nil when
    /// absent or not a time (`Bounded.epochSeconds`: not finite, before 1970, after 9999), so a producer's
    /// `"enqueued_at":1e300` reads as unknown, never as a number a reader could trap on.
    public var enqueuedAt: Double? { time("enqueued_at") }
    public var createdAt: Double? { time("created_at") }
    public var failedAt: Double? { time("failed_at") }
    public var retriedAt: Double? { time("retried_at") }

    private func time(_ field: String) -> Double? {
        guard let value = item?[field] else { return nil }
        return Bounded.epochSeconds(TimestampUnit.seconds(value))
    }
    /// When it last failed: `retried_at`, else `failed_at`.
    public var lastFailureAt: Double? { retriedAt ?? failedAt }

    /// Where it is, for messages: `retry`, `queue default`, `busy on HOST:PID:NONCE`.
    public var location: String {
        switch state {
        case .enqueued: return "queue \(queue)"
        case .busy: return "busy on \(work?.identity ?? "?")"
        default: return state.rawValue
        }
    }
}

/// Which jobs a listing or bulk action covers. An empty filter matches everything.
public struct JobFilter: Sendable, Equatable {
    /// Only jobs of this queue (`queue` field, or the list for enqueued jobs).
    public var queue: String?
    /// Only jobs whose `class` or display class (ActiveJob's `wrapped`) is exactly this.
    public var className: String?
    /// Only jobs whose raw JSON text contains this (case-sensitive substring, like Ruby's
    /// `JobSet#scan` which matches `*TEXT*`).
    public var grep: String?

    public init(queue: String? = nil, className: String? = nil, grep: String? = nil) {
        self.queue = queue
        self.className = className
        self.grep = grep
    }

    public var isEmpty: Bool { queue == nil && className == nil && grep == nil }

    public func matches(_ record: JobRecord) -> Bool {
        if let queue, record.queue != queue { return false }
        if let className, record.className != className && record.displayClass != className { return false }
        if let grep, !grep.isEmpty, !ByteSearch.contains(record.raw, Array(grep.utf8)) { return false }
        return true
    }
}

/// A page request: `number` from 1, `size` entries per page.
///
/// Invariant: `1 <= number <= maxNumber` and `1 <= size <= maxSize`, so `offset` and `lastIndex` are at most
/// about 10^9 and no arithmetic on them can overflow (a page number read from a URL goes through
/// `Bounded.int(parsing:in: 1...maxNumber)` first).
public struct PageRequest: Sendable, Equatable {
    public let number: Int
    public let size: Int

    public static let maxSize = 1000
    /// The highest page number served (10^6): far past any real listing, far below overflow.
    public static let maxNumber = 1_000_000

    /// Throws `AdminError.invalidArgument` unless `1 <= number <= 1000000` and `1 <= size <= 1000`.
    public init(number: Int = 1, size: Int = 25) throws(AdminError) {
        guard (1...Self.maxNumber).contains(number) else {
            throw .invalidArgument("page must be within 1...\(Self.maxNumber), got \(number)")
        }
        guard (1...Self.maxSize).contains(size) else {
            throw .invalidArgument("page size must be within 1...\(Self.maxSize), got \(size)")
        }
        self.number = number
        self.size = size
    }

    /// Index of the page's first entry. Saturates instead of trapping (it cannot overflow given the invariant).
    public var offset: Int {
        let (product, overflow) = (number - 1).multipliedReportingOverflow(by: size)
        return overflow ? Int.max : product
    }

    /// Index of the page's last entry (`offset + size - 1`), saturating.
    public var lastIndex: Int {
        let (sum, overflow) = offset.addingReportingOverflow(size - 1)
        return overflow ? Int.max : sum
    }
}

/// One page of a listing and the total number of matching entries.
public struct Page<Element: Sendable>: Sendable {
    public var items: [Element]
    public var request: PageRequest
    /// Matching entries; of those scanned when `scanned` is set.
    public var total: Int
    /// For a filtered listing: how many entries were read to find the matches, and how many there were in all.
    /// `scanned < available` when a `ScanBudget` stopped the scan (`isPartial`).
    public var scanned: Int?
    public var available: Int?

    public init(items: [Element], request: PageRequest, total: Int, scanned: Int? = nil, available: Int? = nil) {
        self.items = items
        self.request = request
        self.total = total
        self.scanned = scanned
        self.available = available
    }

    public var pageCount: Int { total == 0 ? 0 : (total + request.size - 1) / request.size }

    /// True when the scan stopped before reading every entry (a `ScanBudget` ran out): `total` counts the matches
    /// among the first `scanned` of `available`.
    public var isPartial: Bool {
        guard let scanned, let available else { return false }
        return scanned < available
    }
}

extension Page where Element == JobRecord {
    /// The requested page of the records `scan` yields that match `filter`, with the number of matches among
    /// them (the whole scan is read to count them; a `ScanBudget` given to `scan` bounds it). Only the page's
    /// records are kept, never every match. `available`: the entries the scan could have read.
    static func filtered(_ request: PageRequest, filter: JobFilter, available: Int? = nil,
                         scan: ((JobRecord) -> Void) throws(RedisError) -> Void) throws(RedisError) -> Page {
        var items: [JobRecord] = []
        var total = 0
        var scanned = 0
        try scan { record in
            scanned += 1
            guard filter.matches(record) else { return }
            if total >= request.offset && items.count < request.size { items.append(record) }
            total += 1
        }
        return Page(items: items, request: request, total: total, scanned: scanned, available: available.map { max($0, scanned) })
    }
}

/// Substring search on bytes (job members need not be valid UTF-8).
enum ByteSearch {
    static func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
        if needle.isEmpty { return true }
        if needle.count > haystack.count { return false }
        let first = needle[0]
        var index = 0
        let last = haystack.count - needle.count
        while index <= last {
            if haystack[index] == first {
                var match = true
                var k = 1
                while k < needle.count {
                    if haystack[index + k] != needle[k] { match = false; break }
                    k += 1
                }
                if match { return true }
            }
            index += 1
        }
        return false
    }
}
