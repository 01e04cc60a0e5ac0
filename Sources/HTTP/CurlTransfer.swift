import CWorkersCurl
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Per-transfer state reached from libcurl callbacks through `Unmanaged.passUnretained`.
///
/// Thread rules: created, used by callbacks and read back on the one thread that runs `curl_easy_perform`;
/// the caller keeps it alive with `withExtendedLifetime` for the whole transfer. Never shared.
/// `package`: the Mail module's `SMTPSender` drives its transfers with it too.
package final class CurlTransferState {
    var body = Data()
    var headers = HTTPHeaders()
    let maxBodyBytes: Int
    var bodyTooLarge = false
    let cancellation: HTTPCancellation?
    var wasCancelled = false
    /// Upload source (SMTP message), consumed by the read callback.
    package var upload = Data()
    var uploadOffset = 0
    /// libcurl's error buffer (CURL_ERROR_SIZE bytes), valid while this object lives.
    let errorBuffer: UnsafeMutablePointer<CChar>

    package init(maxBodyBytes: Int = Int.max, cancellation: HTTPCancellation? = nil) {
        self.maxBodyBytes = maxBodyBytes
        self.cancellation = cancellation
        errorBuffer = .allocate(capacity: Int(CURL_ERROR_SIZE) + 1)
        errorBuffer.initialize(repeating: 0, count: Int(CURL_ERROR_SIZE) + 1)
    }

    deinit { errorBuffer.deallocate() }

    var errorMessage: String { String(cString: errorBuffer) }

    var opaque: UnsafeMutableRawPointer { Unmanaged.passUnretained(self).toOpaque() }

    static func from(_ p: UnsafeMutableRawPointer?) -> CurlTransferState {
        Unmanaged<CurlTransferState>.fromOpaque(p!).takeUnretainedValue()
    }

    /// Installs the write, header, read and (when a cancellation is set) progress callbacks on `h`.
    /// `h` must not outlive `self` with these options set: reset the handle after the transfer.
    package func install(on h: UnsafeMutableRawPointer, readsUpload: Bool = false) {
        _ = ccurl_setopt_ptr(h, CURLOPT_ERRORBUFFER, errorBuffer)
        _ = ccurl_setopt_datacb(h, CURLOPT_WRITEFUNCTION) { ptr, size, n, ud in
            let state = CurlTransferState.from(ud)
            let count = size * n
            guard let ptr, count > 0 else { return count }
            if state.body.count + count > state.maxBodyBytes {
                state.bodyTooLarge = true
                return 0  // CURLE_WRITE_ERROR
            }
            ptr.withMemoryRebound(to: UInt8.self, capacity: count) { state.body.append($0, count: count) }
            return count
        }
        _ = ccurl_setopt_ptr(h, CURLOPT_WRITEDATA, opaque)
        _ = ccurl_setopt_datacb(h, CURLOPT_HEADERFUNCTION) { ptr, size, n, ud in
            let state = CurlTransferState.from(ud)
            let count = size * n
            guard let ptr, count > 0 else { return count }
            ptr.withMemoryRebound(to: UInt8.self, capacity: count) {
                state.headerLine(UnsafeBufferPointer(start: $0, count: count))
            }
            return count
        }
        _ = ccurl_setopt_ptr(h, CURLOPT_HEADERDATA, opaque)
        if readsUpload {
            _ = ccurl_setopt_datacb(h, CURLOPT_READFUNCTION) { ptr, size, n, ud in
                let state = CurlTransferState.from(ud)
                let room = size * n
                let left = state.upload.count - state.uploadOffset
                let count = min(room, left)
                guard let ptr, count > 0 else { return 0 }
                state.upload.withUnsafeBytes { raw in
                    let src = raw.baseAddress!.advanced(by: state.uploadOffset)
                    UnsafeMutableRawPointer(ptr).copyMemory(from: src, byteCount: count)
                }
                state.uploadOffset += count
                return count
            }
            _ = ccurl_setopt_ptr(h, CURLOPT_READDATA, opaque)
        }
        if cancellation != nil {
            _ = ccurl_setopt_long(h, CURLOPT_NOPROGRESS, 0)
            _ = ccurl_setopt_xferinfocb(h, CURLOPT_XFERINFOFUNCTION) { ud, _, _, _, _ in
                let state = CurlTransferState.from(ud)
                if state.cancellation?.isCancelled == true {
                    state.wasCancelled = true
                    return 1
                }
                return 0
            }
            _ = ccurl_setopt_ptr(h, CURLOPT_XFERINFODATA, opaque)
        }
    }

    /// One header line from libcurl (status line, field, or the blank end line), as its bytes.
    /// A new status line starts a new header block (after 100 Continue or a followed redirect). The line's CR/LF
    /// and the optional whitespace around a field's name and value (SP and HTAB, RFC 9110 §5.6.3) are cut on the
    /// bytes, and only name and value become strings: Foundation's `trimmingCharacters` on each line cost a tenth of
    /// a worker's CPU at 1,000 calls in flight (issue 38, `perf` of bench/http-bound.sh).
    func headerLine(_ bytes: UnsafeBufferPointer<UInt8>) {
        let line = Self.trimmed(bytes[...]) { $0 == 13 || $0 == 10 }
        if line.starts(with: "HTTP/".utf8) {
            headers = HTTPHeaders()
            return
        }
        guard let colon = line.firstIndex(of: UInt8(ascii: ":")) else { return }
        let isWhitespace: (UInt8) -> Bool = { $0 == 32 || $0 == 9 }
        let name = Self.trimmed(line[..<colon], where: isWhitespace)
        let value = Self.trimmed(line[(colon + 1)...], where: isWhitespace)
        headers.add(name: String(decoding: name, as: UTF8.self), value: String(decoding: value, as: UTF8.self))
    }

    /// `bytes` without the leading and trailing bytes `cut` matches.
    private static func trimmed(_ bytes: Slice<UnsafeBufferPointer<UInt8>>,
                                where cut: (UInt8) -> Bool) -> Slice<UnsafeBufferPointer<UInt8>> {
        var start = bytes.startIndex, end = bytes.endIndex
        while start < end, cut(bytes[start]) { start += 1 }
        while end > start, cut(bytes[end - 1]) { end -= 1 }
        return bytes[start..<end]
    }
}

/// Mapping of `CURLcode`s to our error categories, shared by HTTP and SMTP (the Mail module: `package`).
package enum CurlFailure {
    case invalidURL, timeout, connectionRefused, connectionFailed, tls, transport, cancelled, tooLarge,
         loginDenied, internalError

    package static func classify(_ code: CURLcode, handle: UnsafeMutableRawPointer, state: CurlTransferState) -> CurlFailure {
        if state.wasCancelled || code == CURLE_ABORTED_BY_CALLBACK { return .cancelled }
        if state.bodyTooLarge { return .tooLarge }
        switch code {
        case CURLE_URL_MALFORMAT, CURLE_UNSUPPORTED_PROTOCOL:
            return .invalidURL
        case CURLE_OPERATION_TIMEDOUT:
            return .timeout
        case CURLE_COULDNT_CONNECT:
            var err = 0
            _ = ccurl_getinfo_long(handle, CURLINFO_OS_ERRNO, &err)
            if err == Int(ECONNREFUSED) || state.errorMessage.contains("Connection refused") { return .connectionRefused }
            return .connectionFailed
        case CURLE_COULDNT_RESOLVE_HOST, CURLE_COULDNT_RESOLVE_PROXY:
            return .connectionFailed
        case CURLE_SSL_CONNECT_ERROR, CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CERTPROBLEM, CURLE_SSL_CIPHER,
             CURLE_SSL_CACERT_BADFILE, CURLE_SSL_ISSUER_ERROR, CURLE_SSL_PINNEDPUBKEYNOTMATCH, CURLE_SSL_CRL_BADFILE,
             CURLE_SSL_ENGINE_NOTFOUND, CURLE_SSL_ENGINE_SETFAILED, CURLE_SSL_ENGINE_INITFAILED,
             CURLE_SSL_INVALIDCERTSTATUS, CURLE_USE_SSL_FAILED, CURLE_SSL_SHUTDOWN_FAILED:
            return .tls
        case CURLE_SEND_ERROR, CURLE_RECV_ERROR, CURLE_GOT_NOTHING, CURLE_PARTIAL_FILE, CURLE_HTTP2,
             CURLE_HTTP2_STREAM, CURLE_HTTP3, CURLE_WEIRD_SERVER_REPLY, CURLE_READ_ERROR, CURLE_WRITE_ERROR,
             CURLE_UPLOAD_FAILED:
            return .transport
        case CURLE_LOGIN_DENIED, CURLE_AUTH_ERROR:
            return .loginDenied
        default:
            return .internalError
        }
    }

    /// libcurl's message for `code`: the error buffer when filled, else `curl_easy_strerror`.
    package static func message(_ code: CURLcode, state: CurlTransferState) -> String {
        let buffer = state.errorMessage
        return buffer.isEmpty ? String(cString: curl_easy_strerror(code)) : buffer
    }
}
