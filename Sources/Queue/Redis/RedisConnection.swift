import CWorkersHiredis
import Foundation

/// One connection to Redis: plain TCP over hiredis' blocking API, or TLS (`rediss://`) through `RedisTLSLink`
/// (OpenSSL, with hiredis's reply reader). Everything above the link is the same for both.
///
/// Thread rule: a connection is used by **one thread at a time** (hiredis contexts are not
/// thread-safe). Every thread that connects or sends blocks SIGPIPE for itself (once): a server that drops the link
/// under a write is an `.io` error, never the end of the process. Share connections between threads only through `RedisPool`, which hands each
/// one out exclusively. That invariant is why the class is `@unchecked Sendable`.
///
/// A broken link (I/O error, timeout) closes the context; the next command reconnects once,
/// selects the database and authenticates again. Commands are never retried silently: the
/// failing command throws `RedisError.io` and the caller decides.
///
/// With a Sentinel endpoint (`redis+sentinel://`), every connect asks the Sentinels for the
/// current master and checks its `ROLE` (`SentinelTarget`); a `READONLY` (or `NOREPLICAS`) reply (we were
/// talking to a demoted master) closes the link, so the next command reconnects to the new master. The
/// failover logic lives here only: callers see the same errors as when a plain server restarts.
public final class RedisConnection: @unchecked Sendable {
    public let endpoint: RedisEndpoint
    /// The server this connection talks to, `host:port/db` (with Sentinels: which master, as last resolved).
    public private(set) var serverAddress: String
    /// Socket read/write timeout for ordinary commands (connecting waits at most 5 s of it).
    public let commandTimeout: Duration
    private var link: Link?
    private var loadedScripts: Set<String> = []
    /// How many round trips (`pipeline` calls that sent commands) this connection has made: what a caller that
    /// batches its commands can be checked against.
    public private(set) var roundTrips = 0
    /// The RESP bytes of the command being queued (reused: one connection, one thread at a time).
    private var requestBuffer: [UInt8] = []
    /// The server's key in `ConnectThrottle` (which server, not which login).
    private let throttleKey: String
    /// True from a connect until the first reply on that link: a link that breaks before it was answered is a
    /// failed attempt (a server that accepts and hangs up), one that breaks later is not.
    private var awaitingFirstReply = false

    public init(endpoint: RedisEndpoint, commandTimeout: Duration = .seconds(10)) throws(RedisError) {
        self.endpoint = endpoint
        self.commandTimeout = commandTimeout
        self.serverAddress = endpoint.description
        self.throttleKey = endpoint.throttleKey
        try connect()
    }

    public convenience init(url: String, commandTimeout: Duration = .seconds(10)) throws(RedisError) {
        try self.init(endpoint: RedisEndpoint(url: url), commandTimeout: commandTimeout)
    }

    /// The open link: hiredis's own context (plain TCP), or a TLS session feeding hiredis's reader.
    private enum Link {
        case plain(UnsafeMutablePointer<redisContext>)
        case tls(RedisTLSLink)
    }

    deinit { if case .plain(let context) = link { redisFree(context) } }

    public var isConnected: Bool { link != nil }

    /// Drops the connection (the next command reconnects).
    public func close() {
        if case .plain(let context) = link { redisFree(context) }
        link = nil
        awaitingFirstReply = false
        loadedScripts.removeAll()
    }

    /// Closes the context when the server has hung up on an idle connection (`CLIENT KILL`,
    /// `timeout`, a restart), so that the next command opens a fresh link instead of failing.
    /// Returns true if it did.
    ///
    /// Only meaningful between commands: the blocking API reads every reply it asked for, so an
    /// idle socket that is readable holds either end-of-file or bytes nobody asked for, and the
    /// link is unusable either way. No command is sent, so this never runs anything twice. A
    /// link that breaks in the middle of a command is not covered: that command throws `.io`.
    @discardableResult
    public func closeIfPeerHungUp() -> Bool {
        switch link {
        case nil:
            return false
        case .plain(let context):
            var probe = pollfd(fd: context.pointee.fd, events: Int16(POLLIN), revents: 0)
            guard poll(&probe, 1, 0) > 0, probe.revents & Int16(POLLIN | POLLHUP | POLLERR | POLLNVAL) != 0 else {
                return false
            }
        case .tls(let tls):
            guard tls.peerHungUp() else { return false }
        }
        close()
        return true
    }

    /// Opens the link, through `ConnectThrottle`: an attempt to a server that failed lately waits for its turn (this
    /// throws at once meanwhile), and every attempt that gets no reply counts as a failure there.
    private func connect() throws(RedisError) {
        workers_block_sigpipe_on_this_thread()
        close()
        try ConnectThrottle.shared.admit(throttleKey, address: serverAddress)
        do throws(RedisError) {
            try openLink()
        } catch {
            ConnectThrottle.shared.failed(throttleKey, reason: Self.reason(of: error))
            throw error
        }
    }

    private func openLink() throws(RedisError) {
        var server = endpoint
        if let sentinel = endpoint.sentinel {
            let master = try sentinel.masterAddress(tls: endpoint.tls)
            server = endpoint.master(host: master.host, port: master.port)
            serverAddress = "\(endpoint.description) (master \(server.description))"
        }
        // Read before dialling: a password file that cannot be read fails the attempt without touching the server.
        let password = try endpoint.currentPassword(address: serverAddress)
        if let tls = endpoint.tls {
            link = .tls(try RedisTLSLink.open(host: server.host, port: server.port, settings: tls, address: serverAddress,
                                              connectTimeout: min(commandTimeout, .seconds(5)), commandTimeout: commandTimeout))
        } else {
            let tv = Self.timeval(min(commandTimeout, .seconds(5)))
            guard let ctx = redisConnectWithTimeout(server.host, Int32(server.port), tv) else {
                throw .connectionFailed(address: serverAddress, reason: "out of memory")
            }
            if ctx.pointee.err != 0 {
                let reason = Self.errorString(ctx)
                redisFree(ctx)
                throw .connectionFailed(address: serverAddress, reason: reason)
            }
            redisSetTimeout(ctx, Self.timeval(commandTimeout))
            redisEnableKeepAlive(ctx)
            link = .plain(ctx)
        }
        // The handshake's replies are not counted here: a failed handshake fails the attempt once, in `connect`. A
        // server that failed lately gets a PING when nothing else is asked, so that only an answer clears it.
        let recovering = ConnectThrottle.shared.failures(throttleKey) > 0
        let handshakes = password != nil || endpoint.database != 0 || endpoint.sentinel != nil || recovering
        do throws(RedisError) {
            if recovering && password == nil && endpoint.database == 0 && endpoint.sentinel == nil {
                try send(["PING"]).checked()
            }
            if let password {
                if let user = endpoint.username {
                    try send(["AUTH", user, password]).checked()
                } else {
                    try send(["AUTH", password]).checked()
                }
            }
            if endpoint.database != 0 { try send(["SELECT", endpoint.database]).checked() }
            if endpoint.sentinel != nil {
                // The Sentinel client spec's step 3: a Sentinel may still name a demoted master.
                let role = try send(["ROLE"]).checked().array?.first?.string
                guard role == "master" else {
                    throw RedisError.unexpectedReply("the server a Sentinel named is a \(role ?? "?"), not the master")
                }
            }
        } catch {
            close()
            throw .connectionFailed(address: serverAddress, reason: error.description)
        }
        if handshakes { ConnectThrottle.shared.answered(throttleKey) } else { awaitingFirstReply = true }
    }

    /// The reason an error gives, for `ConnectThrottle`'s refusals.
    private static func reason(of error: RedisError) -> String {
        switch error {
        case .connectionFailed(_, let reason), .io(_, let reason): return reason
        default: return error.description
        }
    }

    /// `duration` as a `timeval`, clamped into 0...1e9 s (a negative or huge `Duration` never traps).
    private static func timeval(_ duration: Duration) -> Glibc.timeval {
        guard duration > .zero else { return Glibc.timeval(tv_sec: 0, tv_usec: 0) }
        let parts = duration.components
        guard parts.seconds < 1_000_000_000 else { return Glibc.timeval(tv_sec: 1_000_000_000, tv_usec: 0) }
        return Glibc.timeval(tv_sec: Int(parts.seconds), tv_usec: Int(parts.attoseconds / 1_000_000_000_000))
    }

    private static func errorString(_ ctx: UnsafeMutablePointer<redisContext>) -> String {
        withUnsafePointer(to: ctx.pointee.errstr) { pointer in
            pointer.withMemoryRebound(to: CChar.self, capacity: 128) { String(cString: $0) }
        }
    }

    // MARK: Commands

    /// Sends one command and waits for its reply. An error reply is returned as `.error`, not
    /// thrown; call `.checked()` to throw it.
    @discardableResult
    public func send(_ arguments: [any RedisArgument]) throws(RedisError) -> RedisReply {
        try pipeline([arguments])[0]
    }

    /// Sends one command and throws if Redis answered with an error.
    @discardableResult
    public func command(_ arguments: any RedisArgument...) throws(RedisError) -> RedisReply {
        try send(arguments).checked()
    }

    /// Every key matching `pattern`, by `SCAN` in steps of `count` (never `KEYS`: each step is short, so Redis
    /// keeps serving others). A key may appear twice (SCAN's guarantee); keys created or deleted meanwhile may or
    /// may not be listed.
    public func scanKeys(matching pattern: String, count: Int = 1000) throws(RedisError) -> [String] {
        var cursor = "0"
        var keys: [String] = []
        repeat {
            let reply = try command("SCAN", cursor, "MATCH", pattern, "COUNT", count)
            guard let parts = reply.array, parts.count == 2, let next = parts[0].string else {
                throw .unexpectedReply("SCAN returned \(reply)")
            }
            cursor = next
            keys += parts[1].strings
        } while cursor != "0"
        return keys
    }

    /// Sends all commands in one round trip and returns their replies in order.
    public func pipeline(_ commands: [[any RedisArgument]]) throws(RedisError) -> [RedisReply] {
        var replies: [RedisReply] = []
        replies.reserveCapacity(commands.count)
        try pipeline(commands) { _, reply in replies.append(reply) }
        return replies
    }

    /// Sends all commands in one round trip and hands each reply to `body` (with its command's index) as it is read,
    /// in order: a caller can act on the first replies before a later one that blocks (`BLMOVE`) arrives. `body`
    /// runs on this thread and must not use this connection (its later replies are still unread).
    public func pipeline(_ commands: [[any RedisArgument]], eachReply body: (Int, RedisReply) -> Void) throws(RedisError) {
        if commands.isEmpty { return }
        // A write to a link the server dropped fails with EPIPE instead of ending the process (CHiredis's shim).
        workers_block_sigpipe_on_this_thread()
        if link == nil { try connect() }
        guard let link else { throw .io(address: serverAddress, reason: "not connected") }
        for arguments in commands {
            requestBuffer.removeAll(keepingCapacity: true)
            RESP.appendCommand(arguments, to: &requestBuffer)
            switch link {
            case .plain(let ctx):
                let status = requestBuffer.withUnsafeBufferPointer { bytes in
                    bytes.withMemoryRebound(to: CChar.self) { redisAppendFormattedCommand(ctx, $0.baseAddress, $0.count) }
                }
                if status != REDIS_OK { throw failIO(reason: Self.reason(ctx)) }
            case .tls(let tls):
                requestBuffer.withUnsafeBufferPointer { tls.append($0) }
            }
        }
        // A very large command (a bulk enqueue) must not keep its buffer for the connection's lifetime.
        if requestBuffer.capacity > 1 << 20 { requestBuffer = [] }
        roundTrips += 1
        var refused = false
        for index in commands.indices {
            var raw: UnsafeMutableRawPointer?
            switch link {
            case .plain(let ctx):
                if redisGetReply(ctx, &raw) != REDIS_OK || raw == nil { throw failIO(reason: Self.reason(ctx)) }
            case .tls(let tls):
                do throws(RedisError) { raw = try tls.nextReply(address: serverAddress) } catch {
                    throw failIO(reason: Self.reason(of: error))
                }
            }
            if awaitingFirstReply {
                awaitingFirstReply = false
                ConnectThrottle.shared.answered(throttleKey)
            }
            let reply = Self.convert(raw!.assumingMemoryBound(to: redisReply.self))
            freeReplyObject(raw)
            if reply.isWriteRefusal { refused = true }
            body(index, reply)
        }
        // A `READONLY` / `NOREPLICAS` reply: this server is a replica now (a failover demoted it) or a
        // master cut off from its replicas. Drop the link so the next command reconnects — with
        // Sentinels, to whichever server is the master now.
        if refused { close() }
    }

    /// Runs `commands` inside MULTI/EXEC in one round trip and returns EXEC's replies.
    public func transaction(_ commands: [[any RedisArgument]]) throws(RedisError) -> [RedisReply] {
        guard let results = try transactionUnlessWatchedKeysMoved(commands) else {
            throw .unexpectedReply("EXEC returned no results (transaction aborted)")
        }
        return results
    }

    /// Runs `commands` inside MULTI/EXEC in one round trip and returns EXEC's replies, or nil when a key this
    /// connection `WATCH`es was written since (then none of them ran). EXEC ends every watch either way.
    package func transactionUnlessWatchedKeysMoved(_ commands: [[any RedisArgument]]) throws(RedisError) -> [RedisReply]? {
        let replies = try pipeline([["MULTI"]] + commands + [["EXEC"]])
        for reply in replies.dropLast() { try reply.checked() }
        switch try replies[replies.count - 1].checked() {
        case .array(let results): return results
        case .null: return nil
        case let other: throw .unexpectedReply("EXEC returned \(other)")
        }
    }

    /// Runs a Lua script by its SHA, loading it on first use and again after `NOSCRIPT`
    /// (for example after the server restarted).
    package func evaluate(_ script: RedisScript, keys: [any RedisArgument] = [],
                         arguments: [any RedisArgument] = []) throws(RedisError) -> RedisReply {
        try evaluate(script, calls: [(keys, arguments)])[0].checked()
    }

    /// Runs `script` once per call, all in one round trip, and returns the replies in order; an error reply is
    /// returned as `.error` (that call failed, the others ran). Loads the script first when this connection has not
    /// (in the same round trip); calls answered `NOSCRIPT` (a `SCRIPT FLUSH` or a restart since) are sent again,
    /// once, after `SCRIPT LOAD`, in their order. If the script vanished in the middle of the pipeline, the calls
    /// after it ran before the resent ones.
    package func evaluate(_ script: RedisScript,
                         calls: [(keys: [any RedisArgument], arguments: [any RedisArgument])]) throws(RedisError) -> [RedisReply] {
        if calls.isEmpty { return [] }
        let commands = calls.map { call -> [any RedisArgument] in (["EVALSHA", script.sha1] as [any RedisArgument]) + script.keyArguments(call.keys) + call.arguments }
        var replies: [RedisReply]
        var resend = Array(commands.indices)
        if loadedScripts.contains(script.sha1) {
            replies = try pipeline(commands)
            resend = replies.indices.filter { replies[$0].isNoScript }
            if resend.isEmpty { return replies }
            loadedScripts.remove(script.sha1)
        } else {
            replies = Array(repeating: .null, count: commands.count)
        }
        let loaded = try pipeline([["SCRIPT", "LOAD", script.source]] + resend.map { commands[$0] })
        try loaded[0].checked()
        loadedScripts.insert(script.sha1)
        for (index, reply) in zip(resend, loaded.dropFirst()) { replies[index] = reply }
        return replies
    }

    /// Why hiredis's context failed.
    private static func reason(_ ctx: UnsafeMutablePointer<redisContext>) -> String {
        ctx.pointee.err != 0 ? errorString(ctx) : "no reply"
    }

    private func failIO(reason: String) -> RedisError {
        workers_consume_pending_sigpipe()
        if awaitingFirstReply { ConnectThrottle.shared.failed(throttleKey, reason: reason) }
        close()
        return .io(address: serverAddress, reason: reason)
    }

    private static func convert(_ reply: UnsafeMutablePointer<redisReply>) -> RedisReply {
        let r = reply.pointee
        switch r.type {
        case REDIS_REPLY_STRING:
            return .bulk(Array(UnsafeRawBufferPointer(start: r.str, count: Int(r.len))))
        case REDIS_REPLY_STATUS:
            return .status(String(decoding: UnsafeRawBufferPointer(start: r.str, count: Int(r.len)), as: UTF8.self))
        case REDIS_REPLY_ERROR:
            return .error(String(decoding: UnsafeRawBufferPointer(start: r.str, count: Int(r.len)), as: UTF8.self))
        case REDIS_REPLY_INTEGER:
            return .integer(r.integer)
        case REDIS_REPLY_ARRAY:
            var elements: [RedisReply] = []
            elements.reserveCapacity(Int(r.elements))
            for i in 0..<Int(r.elements) {
                if let element = r.element[i] { elements.append(convert(element)) } else { elements.append(.null) }
            }
            return .array(elements)
        default:
            return .null
        }
    }
}
