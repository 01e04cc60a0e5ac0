import Foundation
import WorkersQueue
import Synchronization
import Workers

/// A no-op job that records its own pickup latency as an exact sample: at the start of `perform` it appends
/// `now - enqueued_at` (seconds) as one line to `<args[0]>/pickup.<pid>`, one write(2) per job. The Sidekiq
/// side of `bench/throughput.sh` does the same thing in the same place (bench/sidekiq_noop.rb, `PickupProbe`),
/// so both are read by one script (bench/percentiles.py) instead of our histogram next to their samples.
/// A job without `enqueued_at` (a scheduled one) records nothing.
///
/// A bench job: registered only with `--bench-jobs`. Any pool thread may run it; the file descriptors are
/// opened once per folder and shared under one lock (each line is written whole by one write).
public struct PickupProbeJob: Job {
    /// `[folder]`.
    public struct Arguments: SingleJobArgument, Equatable {
        public static let className = "PickupProbe"
        public let value: String
        public init(value: String) { self.value = value }
    }
    public init() {}

    public func perform(_ arguments: Arguments, context: JobContext) throws {
        let now = Clock.now()
        guard let enqueuedAt = context.payload.enqueuedAt else { return }
        try PickupSamples.record(now - enqueuedAt, folder: arguments.value)
    }
}

/// The pickup samples of the bench jobs (`PickupProbe`, `HttpProbe`): one line `seconds\n` per job appended to
/// `<folder>/pickup.<pid>`, one write(2) each, read by bench/percentiles.py.
///
/// Any pool thread: the file descriptors are opened once per folder and shared under one lock (each line is written
/// whole by one write).
enum PickupSamples {
    /// The folder's open sample file, by folder path (opened on first use, never closed: the process's life).
    private static let files = Mutex<[String: Int32]>([:])

    /// Appends one sample line. The lock covers only finding (or opening) the folder's file: the write is outside
    /// it — one `write` of a short line to a file opened `O_APPEND` lands whole at the end, whatever other threads
    /// write — so 1,000 threads recording at once do not queue behind each other's system call (they did: 14 % of
    /// the worker's CPU samples under `perf` in bench/http-bound.sh).
    static func record(_ seconds: Double, folder: String) throws(SampleFileError) {
        try append(line: String(format: "%.6f\n", seconds), folder: folder, file: "pickup")
    }

    /// Appends `line` whole to `<folder>/<file>.<pid>` (opened on first use, `O_APPEND`): the one way the bench jobs
    /// record something outside Redis and PostgreSQL (`RunLogProbe` too).
    static func append(line text: String, folder: String, file: String) throws(SampleFileError) {
        let line = Array(text.utf8)
        let key = folder + "\u{0}" + file
        let fd = try files.withLock { files throws(SampleFileError) -> Int32 in
            if let open = files[key] { return open }
            let path = "\(folder)/\(file).\(getpid())"
            let fd = Foundation.open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o644)
            guard fd >= 0 else { throw SampleFileError(path: path, errno: errno) }
            files[key] = fd
            return fd
        }
        _ = line.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    }

    /// The sample file could not be opened.
    public struct SampleFileError: Error, CustomStringConvertible {
        public let path: String
        public let errno: Int32
        public var description: String { "cannot open \(path): \(String(cString: strerror(errno)))" }
    }
}
