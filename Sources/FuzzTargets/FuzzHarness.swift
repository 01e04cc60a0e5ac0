/// Fuzz harnesses: one entry point per parser or computation that reads bytes from outside the process
/// (a job payload, an HTTP header, a URL, a cron expression, a schedule file, an admin record).
///
/// Contract of every harness's `run(_:)`: it returns for **any** input, quickly. Refusing the input (a thrown
/// error, a nil result) is fine and expected; a trap (overflow, a Double→Int conversion out of range, an index out
/// of range, a `precondition`) or a hang is a finding. A harness also checks a few properties the code promises
/// (a password never appears in an error message, a parsed cron expression fires at least once): a violated
/// property is reported with `FuzzHarness.violated(_:)`, which traps, so libFuzzer and the corpus replay see it
/// like any other crash.
///
/// Used by the `fuzz-harness` executable (libFuzzer entry point, or replay of files) and by the corpus replay
/// test (`Tests/FuzzTests`). docs/fuzzing.md.
public struct FuzzHarness: Sendable {
    /// The harness's name: the folder of its corpus under `Tests/FuzzCorpus/` and the value of `FUZZ_HARNESS`.
    public let name: String
    /// What it feeds its input to.
    public let summary: String
    public let run: @Sendable ([UInt8]) -> Void

    public init(name: String, summary: String, run: @escaping @Sendable ([UInt8]) -> Void) {
        self.name = name
        self.summary = summary
        self.run = run
    }

    /// Reports a broken property: traps with `message` (never with the input, which may be large or binary).
    public static func violated(_ message: String, file: StaticString = #fileID, line: UInt = #line) -> Never {
        fatalError("fuzz property violated: \(message)", file: file, line: line)
    }
}

/// Every harness, by name.
public enum FuzzHarnesses {
    public static let all: [FuzzHarness] = [
        FuzzHarness(name: "payload", summary: "JobPayload parse, typed field accessors, unique policy, re-serialization",
                    run: PayloadHarness.run),
        FuzzHarness(name: "http-headers", summary: "Retry-After (seconds and HTTP-date), delay(from:), response class, form decoding",
                    run: HTTPHeaderHarness.run),
        FuzzHarness(name: "redis-url", summary: "RedisEndpoint(url:) incl. redis+sentinel://, ShardMap; no password in errors",
                    run: RedisURLHarness.run),
        FuzzHarness(name: "postgres-url", summary: "PostgresURL.redacted: no password left in it",
                    run: PostgresURLHarness.run),
        FuzzHarness(name: "cron", summary: "CronExpression parse, next/previous fire times, ticks",
                    run: CronHarness.run),
        FuzzHarness(name: "schedule-file", summary: "ScheduleFile.parse(yaml:), each entry's ticks and arguments",
                    run: ScheduleFileHarness.run),
        FuzzHarness(name: "admin-record", summary: "JobRecord parse and accessors, filters, error_backtrace (base64 + inflate)",
                    run: AdminRecordHarness.run),
        FuzzHarness(name: "inflate", summary: "Inflate.zlib / Inflate.raw (error_backtrace's compression) on raw bytes",
                    run: InflateHarness.run),
        FuzzHarness(name: "settlement", summary: "a failed run's settlement (retry count, retry_for, backoff) and a dead process's recovery",
                    run: SettlementHarness.run),
        FuzzHarness(name: "admin-paging", summary: "a listing's request target (?page=&size=): PageRequest, offset, pageCount",
                    run: AdminPagingHarness.run),
    ]

    public static func named(_ name: String) -> FuzzHarness? { all.first { $0.name == name } }
}

/// Reads a fuzz input as a few parameters followed by a text: the harnesses that need numbers besides the text
/// take them from the front of the input, so one input file says everything the run depends on (deterministic).
struct FuzzInput {
    private var bytes: ArraySlice<UInt8>

    init(_ bytes: [UInt8]) { self.bytes = bytes[...] }

    /// The next byte, or 0 when the input is used up.
    mutating func byte() -> UInt8 { bytes.popFirst() ?? 0 }

    /// The next 8 bytes as a little-endian Int64 (missing bytes are 0).
    mutating func int64() -> Int64 {
        var value: UInt64 = 0
        for shift in stride(from: 0, to: 64, by: 8) { value |= UInt64(byte()) << UInt64(shift) }
        return Int64(bitPattern: value)
    }

    /// The rest of the input as text (invalid UTF-8 repaired, as a header or a file read as UTF-8 would be).
    mutating func text() -> String {
        defer { bytes = [] }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The rest of the input as bytes.
    mutating func rest() -> [UInt8] {
        defer { bytes = [] }
        return Array(bytes)
    }
}

/// Where a harness puts a value it computes only to exercise the code (`count + 2`, `Int(delay)`, an accessor).
///
/// In the optimized fuzz build the optimizer may drop a computation whose result is unused, and with it the trap
/// the harness is looking for (it did: `PageRequest.offset` for `page=4e17` did not trap under `-O`). Writing a
/// byte of every value to a global keeps each computation. Single-threaded use only (libFuzzer, the replayer).
enum FuzzSink {
    nonisolated(unsafe) static var total = 0

    @inline(never)
    static func keep<T>(_ value: T) {
        withUnsafeBytes(of: value) { total &+= Int($0.first ?? 0) }
    }
}
