import Foundation
import WorkersAppJobs
import WorkersQueue

/// The `--json` shapes, in one place so they stay stable (documented in docs/workerctl.md).
/// Every key is always present; values that do not apply are `null`.
enum AdminJSON {
    static func number(_ value: Double?) -> JSONValue { value.map { .double($0) } ?? .null }
    static func string(_ value: String?) -> JSONValue { value.map { .string($0) } ?? .null }
    static func int(_ value: Int?) -> JSONValue { value.map { .int(Int64($0)) } ?? .null }

    /// One job in a listing.
    static func summary(_ record: JobRecord) -> JSONValue {
        .object([
            "jid": string(record.jid),
            "state": .string(record.state.rawValue),
            "queue": .string(record.queue),
            "class": string(record.className),
            "display_class": string(record.displayClass),
            "args": DomainJobs.argsRedactor.args(of: record).map { .array($0) } ?? .null,
            "score": number(record.score),
            "at": Format.iso(record.score),
            "created_at": number(record.createdAt),
            "enqueued_at": number(record.enqueuedAt),
            "retry_count": record.retryCount.map { .int($0) } ?? .null,
            "error_class": string(record.errorClass),
            "error_message": string(record.errorMessage),
            "failed_at": number(record.failedAt),
            "retried_at": number(record.retriedAt),
            "process": string(record.work?.identity),
            "thread": string(record.work?.thread),
            "run_at": number(record.work?.runAt),
            "valid": .bool(record.payload != nil),
            "invalid_reason": string(record.invalidReason),
        ])
    }

    /// `jobs show`: the summary plus the whole record, its text and the decoded backtrace — args, payload and
    /// raw with secrets and personal data redacted (`ArgsRedactor`, review M11).
    static func detail(_ record: JobRecord) -> JSONValue {
        guard case .object(var object) = summary(record) else { return .null }
        object["payload"] = DomainJobs.argsRedactor.item(of: record).map { .object($0) } ?? .null
        object["raw"] = .string(DomainJobs.argsRedactor.text(of: record))
        let backtrace = decodedBacktrace(record)
        object["error_backtrace"] = backtrace.lines.map { .array($0.map { .string($0) }) } ?? .null
        object["backtrace_error"] = string(backtrace.error)
        return .object(object)
    }

    static func decodedBacktrace(_ record: JobRecord) -> (lines: [String]?, error: String?) {
        guard let value = record.item?["error_backtrace"], !value.isNull else { return (nil, nil) }
        do { return (try Backtrace.decode(value), nil) } catch { return (nil, error.description) }
    }

    static func page(_ page: Page<JobRecord>, extra: JSONObject) -> JSONValue {
        var object = extra
        object["page"] = .int(Int64(page.request.number))
        object["per_page"] = .int(Int64(page.request.size))
        object["total"] = .int(Int64(page.total))
        object["pages"] = .int(Int64(page.pageCount))
        object["jobs"] = .array(page.items.map(summary))
        return .object(object)
    }

    static func filter(_ filter: JobFilter) -> JSONValue {
        .object(["queue": string(filter.queue), "class": string(filter.className), "grep": string(filter.grep)])
    }

    static func queue(_ queue: QueueSummary) -> JSONValue {
        .object(["name": .string(queue.name), "size": .int(Int64(queue.size)), "latency": queue.latency.map { .double($0) } ?? .null,
                 "paused": .bool(queue.paused)])
    }

    /// `queue(_:)` plus `"shard"` (only printed when several shards are configured).
    static func queue(_ queue: QueueSummary, shard: String) -> JSONValue { sharded(Self.queue(queue), shard: shard) }

    /// `object` with a `"shard"` field, when `shard` is not nil: the one way every list command marks
    /// which shard an item came from (only when several shards are configured, docs/sharding.md).
    static func sharded(_ object: JSONValue, shard: String?) -> JSONValue {
        guard let shard, case .object(var fields) = object else { return object }
        fields["shard"] = .string(shard)
        return .object(fields)
    }

    /// One class's metrics; a percentile in the slowest bucket is `null` with `"…_slow": true`.
    static func classMetrics(_ summary: ClassMetricsSummary) -> JSONValue {
        func bound(_ ms: Double?) -> JSONValue { ms.flatMap { $0.isFinite ? .int(Int64($0)) : nil } ?? .null }
        return .object(["class": .string(summary.className), "runs": .int(Int64(summary.runs)),
                        "failed": .int(Int64(summary.failed)), "total_ms": int(summary.totalMilliseconds),
                        "p50_ms": bound(summary.p50Milliseconds), "p95_ms": bound(summary.p95Milliseconds),
                        "p50_slow": .bool(summary.p50Milliseconds == .infinity),
                        "p95_slow": .bool(summary.p95Milliseconds == .infinity)])
    }

    static func stats(_ stats: Stats) -> JSONValue {
        .object([
            "processed": .int(Int64(stats.processed)),
            "failed": .int(Int64(stats.failed)),
            "today": .object(["date": .string(stats.day), "processed": .int(Int64(stats.processedToday)),
                              "failed": .int(Int64(stats.failedToday))]),
            "enqueued": .int(Int64(stats.enqueued)),
            "scheduled": .int(Int64(stats.scheduled)),
            "retry": .int(Int64(stats.retries)),
            "dead": .int(Int64(stats.dead)),
            "processes": .int(Int64(stats.processes)),
            "busy": .int(Int64(stats.busy)),
            "queues": .array(stats.queues.map(queue)),
            "redis": .object([
                "version": .string(stats.redis.version),
                "used_memory": .int(Int64(stats.redis.usedMemory)),
                "used_memory_human": .string(stats.redis.usedMemoryHuman),
                "connected_clients": .int(Int64(stats.redis.connectedClients)),
                "uptime_in_seconds": int(stats.redis.uptimeSeconds),
            ]),
        ])
    }

    static func process(_ entry: ProcessEntry) -> JSONValue {
        .object([
            "identity": .string(entry.identity),
            "hostname": .string(entry.hostname),
            "pid": .int(Int64(entry.pid)),
            "tag": .string(entry.tag),
            "concurrency": .int(Int64(entry.concurrency)),
            "busy": .int(Int64(entry.busy)),
            "started_at": .double(entry.startedAt),
            "beat": .double(entry.beat),
            "quiet": .bool(entry.quiet),
            "queues": .array(entry.queues.map { .string($0) }),
            "labels": entry.info["labels"] ?? .array([]),
            "rss_kb": .int(Int64(entry.rssKilobytes)),
            "rtt_us": int(entry.rttMicroseconds),
        ])
    }

    static func bulk(action: JobAction, state: JobState, filter: JobFilter, result: BulkResult) -> JSONValue {
        .object(["action": .string(action.rawValue), "state": .string(state.rawValue), "filter": self.filter(filter),
                 "matched": .int(Int64(result.matched)), "done": .int(Int64(result.done)),
                 "gone": .int(Int64(result.gone)), "invalid": .int(Int64(result.invalid))])
    }

    static func dashboard(_ snapshot: DashboardSnapshot, throughput: Double?) -> JSONValue {
        .object([
            "time": .double(snapshot.time),
            "throughput": number(throughput),
            "stats": stats(snapshot.stats),
            "busy": .array(snapshot.busy.map(summary)),
            "recent_failures": .array(snapshot.recentFailures.map(summary)),
        ])
    }
}
