import ArgumentParser
import Dispatch
import Foundation
import WorkersQueue

struct TopCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "top",
        abstract: "A live dashboard: throughput, queues and latency, busy workers, failures, recent errors.",
        discussion: """
            Refreshes every --interval seconds on the terminal's alternate screen; press q (or \
            Ctrl-C) to quit; the terminal is restored on q, SIGINT and SIGTERM. When stdout is \
            not a terminal (or with --once) it prints one frame and exits; --json prints one \
            snapshot as JSON.
            """
    )

    @OptionGroup var connection: ConnectionOptions
    @OptionGroup var output: OutputOptions
    @Option(help: "Seconds between refreshes.") var interval: Double = 1
    @Flag(help: "Print one frame and exit.") var once = false

    mutating func validate() throws {
        guard interval.isFinite, interval >= 0.1, interval <= 3600 else {
            throw ValidationError("--interval must be within 0.1...3600 seconds")
        }
    }

    func run() throws {
        try adminCall {
            let map = try connection.shardMap()
            // Several shards (docs/sharding.md): one section per shard, each headed by its name.
            let shards: [(name: String?, redis: RedisConnection)] = map.isSingle ? [(nil, try connection.connect())]
                : try map.shards.map { ($0.name, try connection.connect(shard: $0)) }
            if output.json {
                if shards.count == 1 { return printJSON(AdminJSON.dashboard(try DashboardSnapshot.load(shards[0].redis), throughput: nil)) }
                return printJSON(.object(["shards": .array(try shards.map { shard in
                    AdminJSON.sharded(AdminJSON.dashboard(try DashboardSnapshot.load(shard.redis), throughput: nil),
                                      shard: shard.name ?? ShardMap.defaultName)
                })]))
            }
            if once || isatty(1) != 1 {
                var lines: [String] = []
                for shard in shards {
                    lines += DashboardView.lines(try DashboardSnapshot.load(shard.redis), throughput: nil,
                                                 address: DashboardView.address(shard.name, shard.redis), width: 160, error: nil)
                }
                return print(lines.joined(separator: "\n"))
            }
            LiveDashboard(shards: shards, interval: interval).run()
        }
    }
}

/// Renders a snapshot as text lines (no escape sequences), at most `width` characters each.
enum DashboardView {
    /// `host:port/db`, or `shard NAME host:port/db` with several shards.
    static func address(_ shard: String?, _ redis: RedisConnection) -> String {
        shard.map { "shard \($0) \(redis.endpoint.description)" } ?? redis.endpoint.description
    }

    static func lines(_ snapshot: DashboardSnapshot?, throughput: Double?, address: String, width: Int,
                      error: String?) -> [String] {
        var out: [String] = []
        out.append("workerctl top — redis \(address) — \(Format.time(snapshot?.time ?? Clock.now())) UTC — q to quit")
        if let error { out.append("! \(error) (retrying)") }
        guard let snapshot else { return out.map { Format.cut($0, width) } }
        let stats = snapshot.stats
        let rate = throughput.map { String(format: "%.1f jobs/s", $0) } ?? "…"
        out.append("")
        out.append("Throughput \(rate)   Processed \(stats.processed) (today \(stats.processedToday))   Failed \(stats.failed) (today \(stats.failedToday))")
        out.append("Enqueued \(stats.enqueued)   Scheduled \(stats.scheduled)   Retry \(stats.retries)   Dead \(stats.dead)   Processes \(stats.processes)   Busy \(stats.busy)   Redis \(stats.redis.version) \(stats.redis.usedMemoryHuman)")
        out.append("")
        if stats.queues.isEmpty { out.append("no queues") } else { out += QueuesCommand.table(stats.queues).lines() }
        out.append("")
        out.append("BUSY (\(snapshot.busy.count))")
        if !snapshot.busy.isEmpty {
            var table = TextTable(["PROCESS", "THREAD", "QUEUE", "CLASS", "JID", "RUNNING"])
            table.maxCellWidth = 40
            for job in snapshot.busy.prefix(10) {
                table.add([job.work?.identity ?? "?", job.work?.thread ?? "?", job.queue, job.displayClass ?? "?",
                           job.jid ?? "-", Format.duration(snapshot.time - (job.work?.runAt ?? snapshot.time))])
            }
            out += table.lines()
            if snapshot.busy.count > 10 { out.append("… \(snapshot.busy.count - 10) more") }
        }
        out.append("")
        out.append("RECENT ERRORS")
        if snapshot.recentFailures.isEmpty { out.append("none") } else {
            var table = TextTable(["WHEN", "SET", "CLASS", "JID", "ERROR"])
            table.maxCellWidth = 60
            for job in snapshot.recentFailures {
                table.add([Format.relative(DashboardSnapshot.failureTime(job), now: snapshot.time), job.state.rawValue,
                           job.displayClass ?? "?", job.jid ?? "-",
                           "\(job.errorClass ?? "?"): \(job.errorMessage ?? job.invalidReason ?? "")"])
            }
            out += table.lines()
        }
        return out.map { Format.cut($0, width) }
    }
}

/// The full-screen loop. Invariant: once `run` has switched the terminal to the alternate screen
/// and non-canonical mode, every way out (q, SIGINT, SIGTERM, end of run) restores it.
struct LiveDashboard {
    /// One per shard (name nil without sharding), drawn one below the other.
    let shards: [(name: String?, redis: RedisConnection)]
    let interval: Double

    func run() {
        let terminal = TerminalMode()
        let quitPipe = SignalPipe(signals: [SIGINT, SIGTERM])
        terminal.enter()
        defer { terminal.leave() }

        var previous = [(time: Double, processed: Int)?](repeating: nil, count: shards.count)
        var last = [DashboardSnapshot?](repeating: nil, count: shards.count)
        while true {
            let size = TerminalMode.size()
            var lines: [String] = []
            for (index, shard) in shards.enumerated() {
                var errorText: String?
                var throughput: Double?
                do {
                    let snapshot = try DashboardSnapshot.load(shard.redis)
                    if let before = previous[index], snapshot.time > before.time {
                        throughput = max(0, Double(snapshot.stats.processed - before.processed) / (snapshot.time - before.time))
                    }
                    previous[index] = (snapshot.time, snapshot.stats.processed)
                    last[index] = snapshot
                } catch {
                    errorText = "\(error)"
                }
                lines += DashboardView.lines(last[index], throughput: throughput, address: DashboardView.address(shard.name, shard.redis),
                                             width: size.columns, error: errorText)
            }
            terminal.draw(Array(lines.prefix(size.rows)))
            if waitForQuit(seconds: interval, quitPipe: quitPipe) { return }
        }
    }

    /// Waits up to `seconds` for `q`/`Q`/Ctrl-C on stdin or a signal; true means quit.
    private func waitForQuit(seconds: Double, quitPipe: SignalPipe) -> Bool {
        let deadline = Date(timeIntervalSinceNow: seconds)
        var watchStdin = isatty(0) == 1
        while true {
            let remaining = deadline.timeIntervalSinceNow
            if remaining <= 0 { return false }
            var fds = [pollfd(fd: quitPipe.readEnd, events: Int16(POLLIN), revents: 0),
                       pollfd(fd: watchStdin ? 0 : -1, events: Int16(POLLIN), revents: 0)]
            let ready = poll(&fds, nfds_t(fds.count), Int32(max(1, remaining * 1000)))
            if ready <= 0 { continue }
            if fds[0].revents != 0 { return true }
            if fds[1].revents != 0 {
                var buffer = [UInt8](repeating: 0, count: 64)
                let count = read(0, &buffer, buffer.count)
                if count <= 0 { watchStdin = false; continue }
                if buffer[0..<count].contains(where: { $0 == UInt8(ascii: "q") || $0 == UInt8(ascii: "Q") || $0 == 3 }) {
                    return true
                }
            }
        }
    }
}

/// Non-canonical, no-echo input and the alternate screen with a hidden cursor; `leave` puts
/// back exactly what `enter` changed.
final class TerminalMode {
    private var original = termios()
    private var savedInput = false

    func enter() {
        if isatty(0) == 1, tcgetattr(0, &original) == 0 {
            savedInput = true
            var raw = original
            raw.c_lflag &= ~tcflag_t(ICANON | ECHO)
            tcsetattr(0, TCSANOW, &raw)
        }
        write("\u{1B}[?1049h\u{1B}[?25l\u{1B}[H\u{1B}[2J")
    }

    func leave() {
        write("\u{1B}[?25h\u{1B}[?1049l")
        if savedInput { tcsetattr(0, TCSANOW, &original) }
    }

    /// Redraws from the top-left, clearing each line's tail and everything below.
    func draw(_ lines: [String]) {
        var frame = "\u{1B}[H"
        for line in lines { frame += DisplayText.neutralised(line, keeping: []) + "\u{1B}[K\r\n" }
        frame += "\u{1B}[J"
        write(frame)
    }

    private func write(_ text: String) { TerminalControl.write(text, to: 1) }

    static func size() -> (rows: Int, columns: Int) {
        var size = winsize()
        if ioctl(1, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0, size.ws_row > 0 {
            return (Int(size.ws_row), Int(size.ws_col))
        }
        return (24, 80)
    }
}

/// Turns signals into a readable byte on a pipe (the signals themselves are ignored), so the
/// main loop can `poll` for them next to stdin and leave through its normal, restoring path.
final class SignalPipe {
    let readEnd: Int32
    private let writeEnd: Int32
    private var sources: [any DispatchSourceSignal] = []

    init(signals: [Int32]) {
        var fds: [Int32] = [-1, -1]
        _ = pipe(&fds)
        readEnd = fds[0]
        writeEnd = fds[1]
        for number in signals {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            let fd = writeEnd
            source.setEventHandler {
                var byte = UInt8(truncatingIfNeeded: number)
                _ = Glibc.write(fd, &byte, 1)
            }
            source.resume()
            sources.append(source)
        }
    }
}
