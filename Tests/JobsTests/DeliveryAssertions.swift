import Foundation
import WorkersAppJobs
import WorkersQueue
import Workers
import XCTest

/// Fails unless `delivery` is `.ack` (the job succeeded, or the ledger already held it).
func XCTAssertAck(_ delivery: @autoclosure () throws -> Delivery, _ message: String = "",
                  file: StaticString = #filePath, line: UInt = #line) {
    do {
        let value = try delivery()
        guard case .ack = value else { return XCTFail("expected ack, got \(value) \(message)", file: file, line: line) }
    } catch {
        XCTFail("delivery threw \(error) \(message)", file: file, line: line)
    }
}

/// The one place for assertions on how a failed delivery settled (a `Delivery` from `JobRunnerDriver` or
/// `SettlingWorker`, or thrown by `JobRunnerDriver.run`). Each names the exact failure it expects — dead or retry,
/// the error class, the message — and anything else (a SQL error, a decoding bug, another service's failure, the
/// wrong set) fails the assertion.
enum Failure {
    enum Destination: String { case dead, retry }

    /// `error_class` the runner writes for an error of `type`, as Ruby tools read it: the type's path without its
    /// Swift module, nested names joined with `::` (`Jobs.UnconfiguredJob.NotConfigured` →
    /// `UnconfiguredJob::NotConfigured`); `BadInput`, `PermanentFailure` and `RetryLater` stand for `JobError`'s
    /// cases. The one place in these tests that spells how a Swift error type reads in the error fields (stated
    /// here independently of the runtime's `ErrorClassName`, for the plain, non-generic types these tests use).
    static func className(of type: any Error.Type) -> String {
        String(reflecting: type).split(separator: ".").dropFirst().joined(separator: "::")
    }

    /// Settled in `set` with `errorClass`, a message starting with `prefix`, containing every `containing` and none
    /// of `lacking` (personal data that must not reach the error fields). Returns the failed payload (the one to
    /// deliver next, for a retry) when the assertion held.
    @discardableResult
    static func settled(_ error: any Error, in set: Destination, errorClass: String, messagePrefix prefix: String = "",
                        containing: [String] = [], lacking: [String] = [],
                        file: StaticString = #filePath, line: UInt = #line) -> JobPayload? {
        let expected = "\(set)(\(errorClass): \(prefix)…\(containing.map { " ⊃ '\($0)'" }.joined()))"
        guard let delivery = error as? Delivery else {
            XCTFail("expected \(expected), got the error \(error)", file: file, line: line)
            return nil
        }
        let inSet: Bool
        switch (delivery, set) {
        case (.dead, .dead), (.retry, .retry): inSet = true
        default: inSet = false
        }
        let message = delivery.errorMessage ?? ""
        guard inSet, delivery.errorClass == errorClass, message.hasPrefix(prefix),
              containing.allSatisfy({ message.contains($0) }) else {
            XCTFail("expected \(expected), got \(delivery)", file: file, line: line)
            return nil
        }
        for text in lacking where message.contains(text) {
            XCTFail("the error message carries '\(text)': \(message)", file: file, line: line)
        }
        return delivery.failedPayload
    }

    /// Dead at once (no retry) with `errorClass` and a message starting with `prefix`.
    static func dead(_ error: any Error, errorClass: String, messagePrefix prefix: String,
                     file: StaticString = #filePath, line: UInt = #line) {
        settled(error, in: .dead, errorClass: errorClass, messagePrefix: prefix, file: file, line: line)
    }

    /// In the retry set with `errorClass` and a message starting with `prefix`.
    static func retry(_ error: any Error, errorClass: String, messagePrefix prefix: String,
                      file: StaticString = #filePath, line: UInt = #line) {
        settled(error, in: .retry, errorClass: errorClass, messagePrefix: prefix, file: file, line: line)
    }

    /// Sent to `dead` with an `error_message` containing `text` (whatever the permanent error's class).
    static func isPermanent(_ error: any Error, containing text: String, file: StaticString = #filePath, line: UInt = #line) {
        guard let delivery = error as? Delivery, case .dead(let payload) = delivery else {
            return XCTFail("expected dead with '\(text)', got \(error)", file: file, line: line)
        }
        let why = payload.errorMessage ?? ""
        XCTAssertTrue(why.contains(text), "dead with '\(why)', which lacks '\(text)'", file: file, line: line)
    }

    /// Retried because the store could not answer now: error class `StoreUnavailable`, message
    /// "<service> temporarily unavailable: <reason>" with `reason` in it.
    static func isUnavailable(_ error: any Error, service: String, containing reason: String,
                              file: StaticString = #filePath, line: UInt = #line) {
        settled(error, in: .retry, errorClass: className(of: StoreUnavailable.self),
                messagePrefix: "\(service) temporarily unavailable: ", containing: [reason], file: file, line: line)
    }

    /// Retried after the provider's `Retry-After` (`JobError.retryAfter`, e.g. a 429): due `seconds` after the
    /// failure (measured from the failure's own timestamp, set with the due time, not from the test's clock).
    /// Returns the payload to deliver next.
    @discardableResult
    static func isRetryAfter(_ error: any Error, seconds: Double, file: StaticString = #filePath, line: UInt = #line)
        -> JobPayload? {
        guard let delay = retryAfterDelay(error, expected: "\(seconds) s", file: file, line: line) else { return nil }
        XCTAssertEqual(delay, seconds, accuracy: 0.01, "the retry is due after the Retry-After", file: file, line: line)
        return (error as? Delivery)?.failedPayload
    }

    /// Retried (`JobError.retryAfter`) no sooner than `seconds` after the failure.
    static func isRetryAfter(_ error: any Error, atLeast seconds: Double, file: StaticString = #filePath, line: UInt = #line) {
        guard let delay = retryAfterDelay(error, expected: "≥ \(seconds) s", file: file, line: line) else { return }
        XCTAssertGreaterThanOrEqual(delay, seconds, "the retry is deferred", file: file, line: line)
    }

    private static func retryAfterDelay(_ error: any Error, expected: String, file: StaticString, line: UInt) -> Double? {
        guard let delivery = error as? Delivery, case .retry(_, let delay) = delivery, delivery.errorClass == "RetryLater" else {
            XCTFail("expected a RetryLater retry after \(expected), got \(error)", file: file, line: line)
            return nil
        }
        return delay
    }
}
