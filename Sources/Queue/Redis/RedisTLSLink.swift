import CWorkersHiredis
import CWorkersOpenSSL
import Foundation
import Synchronization

/// How a `rediss://` link checks the server it talks to, and which client certificate it shows.
///
/// Parsed from the URL's query (`RedisURLOptions`): `ca_file`, `cert_file`, `key_file`, `server_name`, `insecure`.
/// Defaults are the safe ones: the system's trusted roots, the host name of the URL checked against the certificate
/// (its IP address when the URL names one), TLS 1.2 or later. Immutable, `Sendable`.
public struct RedisTLSSettings: Sendable, Hashable {
    /// PEM file of the certificate authorities to trust instead of the system's roots (a private CA, a managed
    /// service's bundle). nil: the system roots (`/etc/ssl/certs`, OpenSSL's default paths).
    public var caFile: String?
    /// PEM certificate (chain) to show when the server asks for one (`tls-auth-clients yes`); nil: none.
    public var certificateFile: String?
    /// PEM private key of `certificateFile`; nil: the key is in `certificateFile` too.
    public var keyFile: String?
    /// The name the server's certificate must carry (and the SNI sent), when it is not the host the link dials: a
    /// master a Sentinel named by IP address, a tunnel to `localhost`. nil: the dialled host.
    public var serverName: String?
    /// False only for the explicit `?insecure` opt-out: any certificate is accepted (the link is encrypted, not
    /// authenticated: whoever sits on the path reads and changes every job). `RedisEndpoint.warnings` says so.
    public var verifiesPeer: Bool

    public init(caFile: String? = nil, certificateFile: String? = nil, keyFile: String? = nil,
                serverName: String? = nil, verifiesPeer: Bool = true) {
        self.caFile = caFile
        self.certificateFile = certificateFile
        self.keyFile = keyFile
        self.serverName = serverName
        self.verifiesPeer = verifiesPeer
    }
}

/// One TLS connection to Redis: a TCP socket, an OpenSSL session over it, and hiredis's reply reader fed with what
/// the session decrypts. The same RESP bytes `RedisConnection` hands hiredis's blocking context on a plain link go
/// through `SSL_write`; replies come out of the same hiredis parser as `redisReply` objects.
///
/// Why not a hiredis context: hiredis 0.14 (Debian 12) reads and writes its socket itself (`read`/`write`, no hooks;
/// TLS arrived in hiredis 1.0). Why not a socket pair and a pump thread: one thread and two copies per link for
/// nothing; here the thread that sends a command does its own encryption (docs/architecture.md, "Redis over TLS").
///
/// Thread rule: one thread at a time, like the `RedisConnection` that owns it (OpenSSL sessions are not
/// thread-safe). The socket is non-blocking; every wait is a `poll` bounded by `commandTimeout` (per wait, as
/// `SO_RCVTIMEO` bounds each `read` of a plain link).
final class RedisTLSLink {
    private let fd: Int32
    private let ssl: OpaquePointer
    private let reader: UnsafeMutablePointer<redisReader>
    private let commandTimeout: Duration
    /// Commands appended and not yet written (the next `nextReply` writes them first, as `redisGetReply` does).
    private var outgoing: [UInt8] = []
    private var scratch = [UInt8](repeating: 0, count: 16 * 1024)

    private init(fd: Int32, ssl: OpaquePointer, commandTimeout: Duration) {
        self.fd = fd
        self.ssl = ssl
        self.commandTimeout = commandTimeout
        self.reader = redisReaderCreate()
    }

    deinit {
        // One close_notify, without waiting for the server's (the socket is non-blocking).
        ERR_clear_error()
        _ = SSL_shutdown(ssl)
        SSL_free(ssl)
        Glibc.close(fd)
        redisReaderFree(reader)
    }

    /// Connects to `host:port` within `connectTimeout` and completes the TLS handshake, verifying the server's
    /// certificate as `settings` say. Throws `.connectionFailed` naming the reason (refused, timeout, the certificate
    /// check that failed) — never the login, which is sent only after this returns.
    static func open(host: String, port: Int, settings: RedisTLSSettings, address: String,
                     connectTimeout: Duration, commandTimeout: Duration) throws(RedisError) -> RedisTLSLink {
        let context = try RedisTLSContexts.shared.context(for: settings, address: address)
        let fd = try TCPDial.connect(host: host, port: port, timeout: connectTimeout, address: address)
        guard let ssl = SSL_new(context) else {
            Glibc.close(fd)
            throw .connectionFailed(address: address, reason: "TLS: " + OpenSSLErrors.drain(or: "SSL_new failed"))
        }
        let link = RedisTLSLink(fd: fd, ssl: ssl, commandTimeout: commandTimeout)
        // SIGPIPE from OpenSSL's writes: blocked on every thread that talks to Redis (RedisConnection, CHiredis's shim).
        SSL_set_fd(ssl, fd)
        let name = settings.serverName ?? host
        let isAddress = TCPDial.isIPAddress(name)
        // SNI carries host names only (RFC 6066 §3: "Literal IPv4 and IPv6 addresses are not permitted").
        if !isAddress { _ = workers_ssl_set_sni(ssl, name) }
        if settings.verifiesPeer {
            SSL_set_verify(ssl, SSL_VERIFY_PEER, nil)
            let nameSet = isAddress ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name) : SSL_set1_host(ssl, name)
            guard nameSet == 1 else {
                throw .connectionFailed(address: address, reason: "TLS: cannot check the certificate against '\(name)'")
            }
        } else {
            SSL_set_verify(ssl, SSL_VERIFY_NONE, nil)
        }
        let deadline = ContinuousClock.now + connectTimeout
        while true {
            ERR_clear_error()
            let result = SSL_connect(ssl)
            if result == 1 { break }
            let error = SSL_get_error(ssl, result)
            let waitFor: Int16
            switch error {
            case SSL_ERROR_WANT_READ: waitFor = Int16(POLLIN)
            case SSL_ERROR_WANT_WRITE: waitFor = Int16(POLLOUT)
            default:
                throw .connectionFailed(address: address, reason: link.handshakeFailure(error: error, checkedName: name))
            }
            let remaining = deadline - ContinuousClock.now
            guard remaining > .zero, TCPDial.wait(fd, for: waitFor, upTo: remaining) else {
                throw .connectionFailed(address: address, reason: "TLS handshake timed out (does the server speak TLS on this port?)")
            }
        }
        return link
    }

    /// Why the handshake failed, in words: the certificate check's verdict when there is one ("hostname mismatch",
    /// "self-signed certificate", "unable to get local issuer certificate"), else OpenSSL's error queue.
    private func handshakeFailure(error: Int32, checkedName: String) -> String {
        let verdict = SSL_get_verify_result(ssl)
        if verdict != X509_V_OK {
            let words = String(cString: X509_verify_cert_error_string(verdict))
            let name = verdict == X509_V_ERR_HOSTNAME_MISMATCH || verdict == X509_V_ERR_IP_ADDRESS_MISMATCH
                ? " (the certificate does not name '\(checkedName)')" : ""
            ERR_clear_error()
            return "TLS: the server's certificate was refused: \(words)\(name)"
        }
        if error == SSL_ERROR_SYSCALL || error == SSL_ERROR_ZERO_RETURN {
            let queued = OpenSSLErrors.drain(or: "")
            return "TLS handshake failed: " + (queued.isEmpty ? "the server closed the connection (does it speak TLS on this port?)" : queued)
        }
        return "TLS handshake failed: " + OpenSSLErrors.drain(or: "error \(error)")
    }

    /// Queues one command's RESP bytes (written by the next `nextReply`).
    func append(_ bytes: UnsafeBufferPointer<UInt8>) {
        outgoing.append(contentsOf: bytes)
    }

    /// Writes whatever is queued, then reads until hiredis's reader yields one reply: a `redisReply` the caller
    /// frees with `freeReplyObject`. Throws `.io` on a broken link, a timeout or a protocol error; the link is
    /// unusable after any throw.
    func nextReply(address: String) throws(RedisError) -> UnsafeMutableRawPointer {
        try flush(address: address)
        while true {
            var reply: UnsafeMutableRawPointer?
            guard redisReaderGetReply(reader, &reply) == REDIS_OK else {
                throw .io(address: address, reason: "protocol error in the reply")
            }
            if let reply { return reply }
            try readSome(address: address)
        }
    }

    private func flush(address: String) throws(RedisError) {
        var written = 0
        defer {
            if written == outgoing.count { outgoing.removeAll(keepingCapacity: outgoing.capacity <= 1 << 20) }
        }
        while written < outgoing.count {
            ERR_clear_error()
            let count = Int32(clamping: outgoing.count - written)
            let result = outgoing.withUnsafeBytes { SSL_write(ssl, $0.baseAddress! + written, count) }
            if result > 0 { written += Int(result); continue }
            try waitFor(SSL_get_error(ssl, result), address: address)
        }
    }

    private func readSome(address: String) throws(RedisError) {
        while true {
            ERR_clear_error()
            let result = scratch.withUnsafeMutableBytes { SSL_read(ssl, $0.baseAddress, Int32($0.count)) }
            if result > 0 {
                let fed = scratch.withUnsafeBytes {
                    redisReaderFeed(reader, $0.baseAddress!.assumingMemoryBound(to: CChar.self), Int(result))
                }
                guard fed == REDIS_OK else { throw .io(address: address, reason: "protocol error in the reply") }
                return
            }
            try waitFor(SSL_get_error(ssl, result), address: address)
        }
    }

    /// Waits for what OpenSSL asked for (`WANT_READ` / `WANT_WRITE`) up to `commandTimeout`, or throws the error.
    private func waitFor(_ error: Int32, address: String) throws(RedisError) {
        switch error {
        case SSL_ERROR_WANT_READ, SSL_ERROR_WANT_WRITE:
            let events = Int16(error == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT)
            // The same words hiredis gives for a timed-out read of a plain link (EAGAIN from `SO_RCVTIMEO`).
            guard TCPDial.wait(fd, for: events, upTo: commandTimeout) else {
                throw .io(address: address, reason: "Resource temporarily unavailable")
            }
        case SSL_ERROR_ZERO_RETURN:
            throw .io(address: address, reason: "Server closed the connection")
        case SSL_ERROR_SYSCALL:
            let queued = OpenSSLErrors.drain(or: "")
            let reason = !queued.isEmpty ? queued : errno != 0 ? String(cString: strerror(errno)) : "Server closed the connection"
            throw .io(address: address, reason: reason)
        default:
            throw .io(address: address, reason: "TLS: " + OpenSSLErrors.drain(or: "error \(error)"))
        }
    }

    /// True when the server hung up on this idle link or sent application bytes nobody asked for (the link is
    /// unusable either way). TLS records that carry no data (TLS 1.3 session tickets, sent after the handshake)
    /// are consumed and do not count. Only meaningful between commands.
    func peerHungUp() -> Bool {
        if SSL_pending(ssl) > 0 { return true }
        var probe = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&probe, 1, 0) > 0 else { return false }
        if probe.revents & Int16(POLLHUP | POLLERR | POLLNVAL) != 0 { return true }
        var byte: UInt8 = 0
        ERR_clear_error()
        let result = SSL_peek(ssl, &byte, 1)
        if result > 0 { return true }
        let error = SSL_get_error(ssl, result)
        ERR_clear_error()
        return error != SSL_ERROR_WANT_READ
    }
}

/// The `SSL_CTX` of each `RedisTLSSettings`: trusted roots, client certificate and protocol floor, loaded once and
/// shared by every link with those settings (an `SSL_CTX` is safe to share between threads once configured). A
/// context is built again when a file it read has changed (a rotated CA or client certificate), so a reconnect
/// picks the new one up without a restart. Any thread.
final class RedisTLSContexts: Sendable {
    static let shared = RedisTLSContexts()

    private struct Entry: @unchecked Sendable {
        let context: OpaquePointer
        let fileStamps: [String: Date]
    }
    private let entries = Mutex<[RedisTLSSettings: Entry]>([:])

    func context(for settings: RedisTLSSettings, address: String) throws(RedisError) -> OpaquePointer {
        let stamps = Self.fileStamps(settings)
        if let entry = entries.withLock({ $0[settings] }), entry.fileStamps == stamps { return entry.context }
        let context = try Self.makeContext(settings, address: address)
        let replaced = entries.withLock { entries -> OpaquePointer? in
            let old = entries[settings]?.context
            entries[settings] = Entry(context: context, fileStamps: stamps)
            return old
        }
        // Links made from the old context hold their own reference (SSL_new counts it), so this only drops ours.
        if let replaced { SSL_CTX_free(replaced) }
        return context
    }

    private static func fileStamps(_ settings: RedisTLSSettings) -> [String: Date] {
        var stamps: [String: Date] = [:]
        for path in [settings.caFile, settings.certificateFile, settings.keyFile].compactMap({ $0 }) {
            stamps[path] = (try? FileManager.default.attributesOfItem(atPath: path))?[.modificationDate] as? Date ?? .distantPast
        }
        return stamps
    }

    private static func makeContext(_ settings: RedisTLSSettings, address: String) throws(RedisError) -> OpaquePointer {
        ERR_clear_error()
        guard let context = SSL_CTX_new(TLS_client_method()) else {
            throw .connectionFailed(address: address, reason: "TLS: " + OpenSSLErrors.drain(or: "SSL_CTX_new failed"))
        }
        func fail(_ what: String) -> RedisError {
            SSL_CTX_free(context)
            return .connectionFailed(address: address, reason: "TLS: \(what): " + OpenSSLErrors.drain(or: "failed"))
        }
        _ = workers_ssl_ctx_set_min_tls12(context)
        _ = workers_ssl_ctx_set_nonblocking_modes(context)
        if let caFile = settings.caFile {
            guard SSL_CTX_load_verify_locations(context, caFile, nil) == 1 else {
                throw fail("cannot read the CA file \(caFile)")
            }
        } else if SSL_CTX_set_default_verify_paths(context) != 1 {
            throw fail("cannot load the system's trusted certificates")
        }
        if let certificateFile = settings.certificateFile {
            guard SSL_CTX_use_certificate_chain_file(context, certificateFile) == 1 else {
                throw fail("cannot read the client certificate \(certificateFile)")
            }
            let keyFile = settings.keyFile ?? certificateFile
            guard SSL_CTX_use_PrivateKey_file(context, keyFile, SSL_FILETYPE_PEM) == 1 else {
                throw fail("cannot use the client key \(keyFile) with the certificate \(certificateFile)")
            }
            guard SSL_CTX_check_private_key(context) == 1 else {
                throw fail("the client key \(keyFile) does not match the certificate \(certificateFile)")
            }
        }
        return context
    }
}

/// OpenSSL's per-thread error queue as text.
enum OpenSSLErrors {
    /// Every queued error's reason (`certificate verify failed`, `wrong version number`), oldest first, and the
    /// queue emptied; `fallback` when it was empty. The reasons are OpenSSL's fixed words: no data of a link.
    static func drain(or fallback: String) -> String {
        var reasons: [String] = []
        var code = ERR_get_error()
        while code != 0 {
            if let reason = ERR_reason_error_string(code) { reasons.append(String(cString: reason)) }
            code = ERR_get_error()
        }
        return reasons.isEmpty ? fallback : reasons.joined(separator: "; ")
    }
}

/// A non-blocking TCP connect with a deadline, for the links hiredis does not open itself (TLS).
enum TCPDial {
    /// A connected, non-blocking socket to `host:port` (each address `getaddrinfo` gives, in order, until one
    /// answers), with `TCP_NODELAY` and keepalive as hiredis sets them on a plain link.
    static func connect(host: String, port: Int, timeout: Duration, address: String) throws(RedisError) -> Int32 {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(host, String(port), &hints, &list)
        guard status == 0, let first = list else {
            throw .connectionFailed(address: address, reason: String(cString: gai_strerror(status)))
        }
        defer { freeaddrinfo(list) }
        let deadline = ContinuousClock.now + timeout
        var lastReason = "no address"
        var entry: UnsafeMutablePointer<addrinfo>? = first
        while let candidate = entry {
            entry = candidate.pointee.ai_next
            let fd = socket(candidate.pointee.ai_family, candidate.pointee.ai_socktype | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue),
                            candidate.pointee.ai_protocol)
            if fd < 0 { lastReason = String(cString: strerror(errno)); continue }
            if Glibc.connect(fd, candidate.pointee.ai_addr, candidate.pointee.ai_addrlen) != 0 {
                guard errno == EINPROGRESS else { lastReason = String(cString: strerror(errno)); Glibc.close(fd); continue }
                let remaining = deadline - ContinuousClock.now
                guard remaining > .zero, wait(fd, for: Int16(POLLOUT), upTo: remaining) else {
                    Glibc.close(fd)
                    lastReason = "Connection timed out"
                    continue
                }
                var socketError: Int32 = 0
                var length = socklen_t(MemoryLayout<Int32>.size)
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &socketError, &length)
                guard socketError == 0 else { lastReason = String(cString: strerror(socketError)); Glibc.close(fd); continue }
            }
            var on: Int32 = 1
            setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &on, socklen_t(MemoryLayout<Int32>.size))
            setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, socklen_t(MemoryLayout<Int32>.size))
            // hiredis's redisKeepAlive(c, REDIS_KEEPALIVE_INTERVAL = 15): idle 15 s, probes every 5 s, 3 of them.
            var idle: Int32 = 15, interval: Int32 = 5, count: Int32 = 3
            setsockopt(fd, Int32(IPPROTO_TCP), TCP_KEEPIDLE, &idle, socklen_t(MemoryLayout<Int32>.size))
            setsockopt(fd, Int32(IPPROTO_TCP), TCP_KEEPINTVL, &interval, socklen_t(MemoryLayout<Int32>.size))
            setsockopt(fd, Int32(IPPROTO_TCP), TCP_KEEPCNT, &count, socklen_t(MemoryLayout<Int32>.size))
            return fd
        }
        throw .connectionFailed(address: address, reason: lastReason)
    }

    /// Waits until `fd` is ready for `events` (or has an error or hang-up to report), at most `limit`. False on timeout.
    static func wait(_ fd: Int32, for events: Int16, upTo limit: Duration) -> Bool {
        // At most a day per wait (a larger limit would overflow the milliseconds below; no command waits that long).
        let deadline = ContinuousClock.now + min(limit, .seconds(86_400))
        while true {
            let remaining = deadline - ContinuousClock.now
            let components = max(remaining, .zero).components
            let milliseconds = Int32(clamping: components.seconds * 1000 + components.attoseconds / 1_000_000_000_000_000 + 1)
            var probe = pollfd(fd: fd, events: events, revents: 0)
            let ready = poll(&probe, 1, remaining > .zero ? milliseconds : 0)
            if ready > 0 { return true }
            if ready == 0 || errno != EINTR { return false }
        }
    }

    /// True for an IPv4 or IPv6 literal (which a certificate names as an IP address, not a DNS name).
    static func isIPAddress(_ text: String) -> Bool {
        var v4 = in_addr(), v6 = in6_addr()
        return inet_pton(AF_INET, text, &v4) == 1 || inet_pton(AF_INET6, text, &v6) == 1
    }
}
