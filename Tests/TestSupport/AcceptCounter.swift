import Foundation

/// A "Redis that is down" as its clients see it, counted from the server side: a loopback listener that accepts
/// every connection and closes it at once, recording when each arrived. A client's connect succeeds and its first
/// command reads end-of-file, the same as a server that dies with each connection; every attempt is counted, which a
/// refused port cannot do.
///
/// Thread rules: its own thread accepts; `count`, `counts(perSecond:)` and `stop` from any thread.
public final class AcceptCounter: @unchecked Sendable {
    public let port: Int
    private let fd: Int32
    private let lock = NSLock()
    private var arrivals: [Double] = []
    private var stopped = false
    private let done = DispatchSemaphore(value: 0)

    public struct BindFailed: Error, CustomStringConvertible {
        public let port: Int
        public let errno: Int32
        public var description: String { "cannot listen on 127.0.0.1:\(port): errno \(errno)" }
    }

    /// Listens on 127.0.0.1:`port` (SO_REUSEADDR, so a port a server just left can be taken at once).
    public init(port: Int) throws {
        self.port = port
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        addr.sin_port = in_port_t(UInt16(port).bigEndian)
        let bound = withUnsafePointer(to: &addr) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
        guard bound, listen(fd, 128) == 0 else {
            let code = errno
            close(fd)
            throw BindFailed(port: port, errno: code)
        }
        let thread = Thread { [self] in acceptLoop() }
        thread.name = "accept-counter"
        thread.start()
    }

    private func acceptLoop() {
        defer { done.signal() }
        while !lock.withLock({ stopped }) {
            var probe = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&probe, 1, 50) > 0 else { continue }
            let client = accept(fd, nil, nil)
            guard client >= 0 else { continue }
            let now = Date().timeIntervalSince1970
            lock.withLock { arrivals.append(now) }
            close(client)
        }
    }

    /// Connections accepted so far.
    public var count: Int { lock.withLock { arrivals.count } }

    /// Connections accepted since `start` (seconds since 1970).
    public func count(since start: Double) -> Int { lock.withLock { arrivals.filter { $0 >= start }.count } }

    /// The most connections accepted within any one second-long window starting at an arrival.
    public var busiestSecond: Int {
        let times = lock.withLock { arrivals }
        var best = 0
        var low = 0
        for high in times.indices {
            while times[high] - times[low] >= 1 { low += 1 }
            best = max(best, high - low + 1)
        }
        return best
    }

    /// Stops accepting and closes the listener (the port is free again when this returns).
    public func stop() {
        let first = lock.withLock { () -> Bool in
            defer { stopped = true }
            return !stopped
        }
        guard first else { return }
        done.wait()
        close(fd)
    }

    deinit { stop() }
}
