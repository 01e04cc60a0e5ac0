import Foundation
import Synchronization

/// A minimal HTTP/1.1 endpoint for scrapes and probes: `GET /metrics` (Prometheus text),
/// `GET /healthz` (liveness: the process itself) and `GET /readyz` (readiness: its dependencies,
/// JSON; 404 when no readiness check was given). Every connection is closed after its response.
/// Binds to `host` (an IPv4 address, default loopback; `0.0.0.0` for every interface).
///
/// A slow or hostile client cannot stall the probes (review M6):
/// - one poll thread (`metrics`) accepts and reads every connection at once (non-blocking, up to
///   `maxConnections`; past that the oldest waiting one is dropped); each request head must be complete within
///   `requestDeadline` of its accept, else the connection is closed. A client trickling one byte at a time holds
///   a slot for at most that long and never delays another request.
/// - `/healthz` (and 404/405) is answered on the poll thread as soon as its head is read (a few hundred bytes:
///   the write fits the socket buffer).
/// - `/metrics` and `/readyz`, which read Redis or PostgreSQL, each go to a serving thread of their own
///   (`metrics-serve`, `readyz-serve`) through a queue of at most `maxQueuedScrapes`; when it is full the answer is
///   503 at once. A slow scrape never delays a readiness probe (issue 51 point 5), nor the other way round.
/// - every write has `SO_SNDTIMEO` (`sendTimeout`) and the whole answer a deadline (`responseDeadline`); writes use
///   `MSG_NOSIGNAL` (a reset never raises SIGPIPE).
///
/// Threads: `health` is called on the poll thread only; `metrics` on `metrics-serve` only and `readiness` on
/// `readyz-serve` only (so each may keep one connection of its own without a lock). `pending` belongs to the poll
/// thread; `queued` and `stopping` are guarded by `condition`. `stop` from any thread, any number of times.
package final class MetricsServer: @unchecked Sendable {
    public let port: Int
    private let listener: Int32
    private let metrics: @Sendable () -> String
    private let health: @Sendable () -> (ok: Bool, detail: String)
    private let readiness: (@Sendable () -> (ok: Bool, json: String))?

    /// How long a client has, from its accept, to send the whole request head.
    public static let requestDeadline: Duration = .seconds(2)
    /// `SO_SNDTIMEO` of every answer's socket, and the deadline of a whole answer.
    static let sendTimeoutSeconds = 2
    static let responseDeadline: Duration = .seconds(10)
    /// Connections being read at once; a new one past this drops the oldest.
    public static let maxConnections = 64
    /// `/metrics` (or `/readyz`) requests waiting for their serving thread; past this: 503.
    public static let maxQueuedScrapes = 4
    /// The largest request head read (a scrape's is a few hundred bytes).
    static let maxRequestBytes = 16_384

    private let condition = NSCondition()
    /// Per path (`/metrics`, `/readyz`), the connections waiting for that path's serving thread.
    private var queued: [String: [Int32]] = [:]
    private var stopping = false
    /// A pipe the poll thread also polls: `stop` writes a byte to wake it (`wake[0]` read end, `wake[1]` write end).
    private let wake: [Int32]
    private let stopRequested = Atomic<Bool>(false)
    private let pollExited = DispatchSemaphore(value: 0)

    public enum StartError: Error, CustomStringConvertible {
        case bind(host: String, port: Int, reason: String)
        public var description: String {
            switch self {
            case .bind(let host, let port, let reason): return "cannot listen on \(host):\(port): \(reason)"
            }
        }
    }

    /// Binds and starts serving. `port` 0 picks a free port (read it back from `port`).
    /// `/healthz` and `/readyz` answer 200 when their closure says ok, else 503.
    public init(host: String = "127.0.0.1", port: Int, metrics: @escaping @Sendable () -> String,
                health: @escaping @Sendable () -> (ok: Bool, detail: String),
                readiness: (@Sendable () -> (ok: Bool, json: String))? = nil) throws {
        self.metrics = metrics
        self.health = health
        self.readiness = readiness
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw StartError.bind(host: host, port: port, reason: String(cString: strerror(errno))) }
        var yes: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        guard inet_pton(AF_INET, host, &address.sin_addr) == 1 else {
            close(fd)
            throw StartError.bind(host: host, port: port, reason: "not an IPv4 address")
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(fd, 16) == 0 else {
            let reason = String(cString: strerror(errno))
            close(fd)
            throw StartError.bind(host: host, port: port, reason: reason)
        }
        var actual = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &actual) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        var wake: [Int32] = [-1, -1]
        guard pipe(&wake) == 0 else {
            let reason = String(cString: strerror(errno))
            close(fd)
            throw StartError.bind(host: host, port: port, reason: reason)
        }
        self.wake = wake
        self.port = Int(UInt16(bigEndian: actual.sin_port))
        self.listener = fd
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        let thread = Thread { [self] in pollLoop() }
        thread.name = "metrics"
        thread.start()
        for (path, name) in [("/metrics", "metrics-serve"), ("/readyz", "readyz-serve")] where path == "/metrics" || readiness != nil {
            let serving = Thread { [self] in serveLoop(path: path) }
            serving.name = name
            serving.start()
        }
    }

    /// A connection whose request head is being read.
    private struct Pending {
        let fd: Int32
        let deadline: ContinuousClock.Instant
        var bytes: [UInt8] = []
    }

    /// Stops serving: the poll thread closes the connections it is reading and returns, then the listening socket
    /// is closed (the port is free when this returns); the serving thread finishes the answer it is writing, if any,
    /// closes the scrapes still queued and returns. Idempotent.
    public func stop() {
        guard !stopRequested.exchange(true, ordering: .acquiringAndReleasing) else { return }
        var byte: UInt8 = 1
        _ = write(wake[1], &byte, 1)
        pollExited.wait()
        close(listener)
        close(wake[0])
        close(wake[1])
        condition.lock()
        stopping = true
        condition.broadcast()
        condition.unlock()
    }

    private func pollLoop() {
        defer { pollExited.signal() }
        let clock = ContinuousClock()
        var pending: [Pending] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            var fds = [pollfd(fd: listener, events: Int16(POLLIN), revents: 0)]
                + pending.map { pollfd(fd: $0.fd, events: Int16(POLLIN), revents: 0) }
                + [pollfd(fd: wake[0], events: Int16(POLLIN), revents: 0)]
            let now = clock.now
            let timeout = pending.map { now.duration(to: $0.deadline) }.min().map { remaining -> Int32 in
                let milliseconds = remaining.components.seconds * 1000 + remaining.components.attoseconds / 1_000_000_000_000_000
                return Int32(clamping: max(0, milliseconds) + 1)
            } ?? -1
            if poll(&fds, nfds_t(fds.count), timeout) < 0 {
                if errno == EINTR { continue }
                return
            }
            if fds[fds.count - 1].revents != 0 {  // `stop`
                for connection in pending { close(connection.fd) }
                return
            }
            var kept: [Pending] = []
            for (index, var connection) in pending.enumerated() {
                if fds[index + 1].revents != 0 {
                    let count = recv(connection.fd, &buffer, buffer.count, 0)
                    if count == 0 || (count < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                        close(connection.fd)
                        continue
                    }
                    if count > 0 { connection.bytes.append(contentsOf: buffer[0..<count]) }
                    if connection.bytes.count >= Self.maxRequestBytes || Self.headComplete(connection.bytes) {
                        dispatch(connection.fd, request: connection.bytes)
                        continue
                    }
                }
                if clock.now >= connection.deadline {
                    close(connection.fd)  // too slow: the whole head did not arrive in time
                    continue
                }
                kept.append(connection)
            }
            pending = kept
            if fds[0].revents != 0 {
                while true {
                    let client = accept(listener, nil, nil)
                    if client < 0 { break }  // EAGAIN: none left (or a transient error: poll again)
                    _ = fcntl(client, F_SETFL, fcntl(client, F_GETFL) | O_NONBLOCK)
                    if pending.count >= Self.maxConnections { close(pending.removeFirst().fd) }
                    pending.append(Pending(fd: client, deadline: clock.now.advanced(by: Self.requestDeadline)))
                }
            }
        }
    }

    static func headComplete(_ bytes: [UInt8]) -> Bool {
        guard bytes.count >= 4 else { return false }
        var index = 0
        while index + 3 < bytes.count {
            if bytes[index] == 13, bytes[index + 1] == 10, bytes[index + 2] == 13, bytes[index + 3] == 10 { return true }
            index += 1
        }
        return false
    }

    /// Answers a complete request head: `/healthz`, 404 and 405 here; `/metrics` and `/readyz` by the serving
    /// thread (503 when its queue is full).
    private func dispatch(_ client: Int32, request: [UInt8]) {
        let line = String(decoding: request.prefix { $0 != 13 && $0 != 10 }, as: UTF8.self)
        let parts = line.split(separator: " ")
        let method = parts.first.map(String.init) ?? ""
        let path = parts.count > 1 ? String(parts[1].split(separator: "?").first ?? "") : ""
        if method == "GET", path == "/metrics" || (path == "/readyz" && readiness != nil) {
            condition.lock()
            let accepted = queued[path, default: []].count < Self.maxQueuedScrapes
            if accepted {
                queued[path, default: []].append(client)
                condition.broadcast()
            }
            condition.unlock()
            if !accepted {
                respond(client, status: "503 Service Unavailable", body: "busy: too many scrapes waiting\n")
                close(client)
            }
            return
        }
        switch (method, path) {
        case ("GET", "/healthz"):
            let state = health()
            respond(client, status: state.ok ? "200 OK" : "503 Service Unavailable", body: state.detail + "\n")
        case ("GET", _):
            respond(client, status: "404 Not Found", body: "not found\n")
        default:
            respond(client, status: "405 Method Not Allowed", body: "only GET\n")
        }
        close(client)
    }

    /// The serving thread of `path`: answers its queued connections in order until `stop`.
    private func serveLoop(path: String) {
        while true {
            condition.lock()
            while queued[path, default: []].isEmpty && !stopping { condition.wait() }
            if stopping {
                let left = queued[path] ?? []
                queued[path] = []
                condition.unlock()
                for fd in left { close(fd) }
                return
            }
            let fd = queued[path]!.removeFirst()
            condition.unlock()
            if path == "/metrics" {
                respond(fd, status: "200 OK", body: metrics(), contentType: "text/plain; version=0.0.4; charset=utf-8")
            } else if let readiness {
                let state = readiness()
                respond(fd, status: state.ok ? "200 OK" : "503 Service Unavailable", body: state.json + "\n",
                        contentType: "application/json")
            }
            close(fd)
        }
    }

    /// Writes the whole answer, blocking with `SO_SNDTIMEO` per write and `responseDeadline` in all; gives up on the
    /// first error or timeout (the caller closes the socket).
    private func respond(_ client: Int32, status: String, body: String, contentType: String = "text/plain; charset=utf-8") {
        _ = fcntl(client, F_SETFL, fcntl(client, F_GETFL) & ~O_NONBLOCK)
        var timeout = timeval(tv_sec: Self.sendTimeoutSeconds, tv_usec: 0)
        setsockopt(client, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let head = "HTTP/1.1 \(status)\r\nContent-Type: \(contentType)\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n"
        let bytes = Array((head + body).utf8)
        let clock = ContinuousClock()
        let deadline = clock.now.advanced(by: Self.responseDeadline)
        var offset = 0
        while offset < bytes.count, clock.now < deadline {
            let written = bytes[offset...].withUnsafeBufferPointer { send(client, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if written <= 0 { return }
            offset += written
        }
    }
}
