import Foundation
import WorkersHTTP

/// A response header value from a provider or a proxy (Apple, Google, Nominatim, the subscription service):
/// `RetryAfter(headerValue:)` (delay-seconds or an HTTP-date in its three forms), `delay(from:)`,
/// `HTTPResponseClass` for 429 and 503, `HTTPResponse.retryAfter`, and `FormEncoding.decode` of the same text.
///
/// Contract checked: a delay is a finite, non-negative number of seconds that converts to whole seconds and to
/// milliseconds as an `Int` (what `JobError.retryAfter`'s message and the call limiter's hold do with it).
/// The clock is fixed (2026-11-27T00:00:00Z) so a run depends on the input alone.
public enum HTTPHeaderHarness {
    static let now = Date(timeIntervalSince1970: 1_795_737_600)

    public static func run(_ data: [UInt8]) {
        let value = String(decoding: data, as: UTF8.self)
        if let parsed = RetryAfter(headerValue: value) {
            check(parsed.delay(from: now), "RetryAfter.delay(from:)")
            check(parsed.delay(from: Date(timeIntervalSince1970: 0)), "RetryAfter.delay(from: epoch)")
        }
        let headers = HTTPHeaders([("Retry-After", value)])
        for status in [429, 503] {
            let triage = HTTPResponseClass(status: status, headers: headers, now: now)
            FuzzSink.keep(triage.isRetryable)
            if let delay = triage.retryAfter { check(delay, "HTTPResponseClass(\(status)).retryAfter") }
        }
        let response = HTTPResponse(status: 429, headers: headers, body: Data())
        if let parsed = response.retryAfter { check(parsed.delay(from: now), "HTTPResponse.retryAfter") }
        FuzzSink.keep(FormEncoding.decode(value))
    }

    static func check(_ delay: TimeInterval, _ what: String) {
        guard delay.isFinite, delay >= 0 else { FuzzHarness.violated("\(what) is \(delay)") }
        FuzzSink.keep(Int(delay))         // Job.swift: "retry after \(Int(seconds)) s"; JobRunner's log line
        FuzzSink.keep(Int(delay * 1000))  // CallLimiter: the hold in milliseconds
    }
}
