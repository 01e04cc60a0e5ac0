import Foundation
import WorkersQueue

/// A member of `retry`, `schedule`, `dead` or a queue list as the admin API reads it (`JobRecord`), read-only:
/// every accessor, the filters, and the `error_backtrace` decoder (base64 + the project's own zlib inflater).
/// The first byte picks the state, the next 8 the ZSET score's bits; the rest is the member's bytes.
public enum AdminRecordHarness {
    public static func run(_ data: [UInt8]) {
        var input = FuzzInput(data)
        let state = JobState.allCases[Int(input.byte()) % JobState.allCases.count]
        let score = Double(bitPattern: UInt64(bitPattern: input.int64()))
        let raw = input.rest()
        let record = JobRecord(state: state, raw: raw, score: score,
                               listQueue: state == .enqueued ? "default" : nil,
                               work: state == .busy ? BusyWork(identity: "h:1:n", thread: "t", runAt: score) : nil)
        FuzzSink.keep(record.rawText)
        FuzzSink.keep(record.jid)
        FuzzSink.keep(record.className)
        FuzzSink.keep(record.displayClass)
        FuzzSink.keep(record.args)
        FuzzSink.keep(record.retryCount)
        FuzzSink.keep(record.errorClass)
        FuzzSink.keep(record.errorMessage)
        FuzzSink.keep(record.enqueuedAt)
        FuzzSink.keep(record.createdAt)
        FuzzSink.keep(record.lastFailureAt)
        FuzzSink.keep(record.location)
        FuzzSink.keep(record.invalidReason)
        FuzzSink.keep(JobFilter(queue: "default", className: "Noop", grep: "Noop").matches(record))
        if let payload = record.payload { FuzzSink.keep(try? Backtrace.lines(of: payload)) }
        if let value = record.item?["error_backtrace"] { FuzzSink.keep(try? Backtrace.decode(value)) }
    }
}

/// A dashboard or `workerctl jobs` listing request: the request target (`/jobs/dead?page=2&size=25`, or just the
/// query) read as the dashboard reads it (`Int(page)`, default 1; size 25 unless given), then `PageRequest`,
/// its `offset` and a page's `pageCount` — the arithmetic a GET triggers (review M2).
public enum AdminPagingHarness {
    public static func run(_ data: [UInt8]) {
        let target = String(decoding: data, as: UTF8.self)
        let query = target.firstIndex(of: "?").map { target[target.index(after: $0)...] } ?? target[...]
        var number = 1
        var size = 25
        for pair in query.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard parts.count == 2 else { continue }
            switch parts[0] {
            case "page": number = Int(parts[1]) ?? 1
            case "size", "per_page": size = Int(parts[1]) ?? 25
            default: break
            }
        }
        guard let request = try? PageRequest(number: number, size: size) else { return }
        FuzzSink.keep(request.offset)
        for total in [0, 1, 1_000_000] {
            FuzzSink.keep(Page<JobRecord>(items: [], request: request, total: total).pageCount)
        }
    }
}

/// Compressed bytes as an `error_backtrace` carries them once base64 is undone: the project's own inflater
/// (`Inflate.zlib`, and `Inflate.raw` on the same bytes), with a small output limit so a bomb stays fast.
/// Contract checked: the output never exceeds the limit asked for.
public enum InflateHarness {
    static let limit = 1 << 16

    public static func run(_ data: [UInt8]) {
        // (Not a loop over `[Inflate.zlib, Inflate.raw]`: an array of typed-throws function values crashes
        // swift-frontend 6.3.1 in SILGen.)
        check(try? Inflate.zlib(data, maxOutput: limit))
        check(try? Inflate.raw(data, maxOutput: limit))
    }

    static func check(_ output: [UInt8]?) {
        guard let output, output.count > limit else { return }
        FuzzHarness.violated("inflated \(output.count) bytes, over the limit \(limit)")
    }
}
