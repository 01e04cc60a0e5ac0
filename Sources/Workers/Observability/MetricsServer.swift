import Foundation

/// A minimal HTTP/1.1 endpoint for scrapes and probes: `GET /metrics` (Prometheus text),
/// `GET /healthz` (liveness: the process itself) and `GET /readyz` (readiness: its dependencies,
/// JSON; 404 when no readiness check was given).
///
/// One accept thread serves requests one at a time (scrapes are rare and small); every
/// connection is closed after its response. Binds to `host` (an IPv4 address, default loopback;
/// `0.0.0.0` for every interface). The closures are called on the accept thread only.
public final class MetricsServer: @unchecked Sendable {
    public let port: Int
    private let listener: Int32
    private let metrics: @Sendable () -> String
    private let health: @Sendable () -> (ok: Bool, detail: String)
    private let readiness: (@Sendable () -> (ok: Bool, json: String))?

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
        self.port = Int(UInt16(bigEndian: actual.sin_port))
        self.listener = fd
        let thread = Thread { [self] in acceptLoop() }
        thread.name = "metrics"
        thread.start()
    }

    private func acceptLoop() {
        while true {
            let client = accept(listener, nil, nil)
            if client < 0 {
                if errno == EINTR { continue }
                return
            }
            serve(client)
            close(client)
        }
    }

    private func serve(_ client: Int32) {
        var timeout = timeval(tv_sec: 2, tv_usec: 0)
        setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var buffer = [UInt8](repeating: 0, count: 4096)
        var request = [UInt8]()
        while request.count < 16_384 {
            let count = read(client, &buffer, buffer.count)
            if count <= 0 { break }
            request.append(contentsOf: buffer[0..<count])
            if request.count >= 4, request.suffix(4) == [13, 10, 13, 10] { break }
        }
        let line = String(decoding: request.prefix { $0 != 13 && $0 != 10 }, as: UTF8.self)
        let parts = line.split(separator: " ")
        let path = parts.count > 1 ? String(parts[1].split(separator: "?").first ?? "") : ""
        let status: String
        let body: String
        var contentType = "text/plain; charset=utf-8"
        switch (parts.first, path) {
        case ("GET"?, "/metrics"):
            status = "200 OK"
            body = metrics()
            contentType = "text/plain; version=0.0.4; charset=utf-8"
        case ("GET"?, "/healthz"):
            let state = health()
            status = state.ok ? "200 OK" : "503 Service Unavailable"
            body = state.detail + "\n"
        case ("GET"?, "/readyz") where readiness != nil:
            let state = readiness!()
            status = state.ok ? "200 OK" : "503 Service Unavailable"
            body = state.json + "\n"
            contentType = "application/json"
        case ("GET"?, _):
            status = "404 Not Found"
            body = "not found\n"
        default:
            status = "405 Method Not Allowed"
            body = "only GET\n"
        }
        let head = "HTTP/1.1 \(status)\r\nContent-Type: \(contentType)\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n"
        let bytes = Array((head + body).utf8)
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBufferPointer { write(client, $0.baseAddress, $0.count) }
            if written <= 0 { return }
            offset += written
        }
    }
}
