import WorkersQueue

/// A job payload as a producer may push it (`LPUSH queue:NAME <bytes>`, an outbox row, a Ruby or Python client):
/// parse, every typed field accessor, the unique policy the payload asks for, and re-serialization.
///
/// Besides "never traps", it checks the contracts `Bounded` states for numbers read from a payload, by doing the
/// arithmetic the runtime does with each value:
/// * `retry_count` / `interrupted_count`: `count + 2` (JobRunner's attempt number) must not overflow, and the
///   value must be at most `Bounded.maxCount`;
/// * `unique_for`: `UniquePolicy.requested(by:)` gives at most `Bounded.maxIntervalSeconds`, so the lock TTL in
///   milliseconds (`seconds * 1000`, rounded up) is an `Int` and a `PEXPIREAT` Redis accepts;
/// * times (`created_at`, `enqueued_at`, `failed_at`, `retried_at`): unknown (nil) or within
///   `0...Bounded.maxEpochSeconds`, so a latency in whole seconds or days is an `Int`.
/// * re-serialization: the serialized payload parses again and serializes to the same text.
public enum PayloadHarness {
    public static func run(_ data: [UInt8]) {
        guard let payload = try? JobPayload(parsing: data) else { return }
        exerciseAccessors(payload)
        checkCounters(payload)
        checkUniquePolicy(payload)
        checkTimes(payload)
        checkRoundTrip(payload)
    }

    static func exerciseAccessors(_ payload: JobPayload) {
        FuzzSink.keep(payload.className)
        FuzzSink.keep(payload.args)
        FuzzSink.keep(payload.jid)
        FuzzSink.keep(payload.queue)
        FuzzSink.keep(payload.displayClass)
        FuzzSink.keep(payload.retryQueue)
        FuzzSink.keep(payload.allowsDead)
        FuzzSink.keep(payload.errorMessage)
        FuzzSink.keep(payload.errorClass)
        FuzzSink.keep(payload.timestampUnit)
        FuzzSink.keep(payload.retryFor)
        switch payload.retry {
        case .limit(let n): FuzzSink.keep(n < 25)  // compared with the retry count (RetryWindow)
        case .unspecified, .enabled, .disabled: break
        }
        for key in ["created_at", "enqueued_at", "failed_at", "retried_at"] {
            FuzzSink.keep(TimestampUnit.of(payload.fields[key]))
        }
    }

    static func checkCounters(_ payload: JobPayload) {
        if let count = payload.retryCount {
            FuzzSink.keep(count + 2)  // JobRunner: the attempt number, `(retryCount ?? -1) + 2`
            guard count <= Bounded.maxCount else { FuzzHarness.violated("retryCount \(count) > Bounded.maxCount") }
        }
        let interrupted = payload.interruptedCount
        FuzzSink.keep(interrupted + 1)  // ReliableQueue's recovery: `interruptedCount + 1`
        guard interrupted <= Bounded.maxCount else {
            FuzzHarness.violated("interruptedCount \(interrupted) > Bounded.maxCount")
        }
    }

    static func checkUniquePolicy(_ payload: JobPayload) {
        guard let policy = UniquePolicy.requested(by: payload) else { return }
        guard policy.seconds > 0, policy.seconds <= Bounded.maxIntervalSeconds else {
            FuzzHarness.violated("unique_for \(policy.seconds) s outside 0...Bounded.maxIntervalSeconds")
        }
        FuzzSink.keep(Int((policy.seconds * 1000).rounded(.up)))  // UniqueLocks' TTL in milliseconds
        FuzzSink.keep(policy.fields(key: payload.fields["unique_key"]?.stringValue))
        FuzzSink.keep(UniqueLockKey(payload: payload, policy: policy).redisKey)
    }

    static func checkTimes(_ payload: JobPayload) {
        let times: [(String, Double?)] = [("createdAt", payload.createdAt), ("enqueuedAt", payload.enqueuedAt),
                                          ("failedAt", payload.failedAt), ("retriedAt", payload.retriedAt)]
        for (name, value) in times {
            guard let seconds = value else { continue }
            guard seconds.isFinite, seconds >= 0, seconds <= Bounded.maxEpochSeconds else {
                FuzzHarness.violated("\(name) \(seconds) is neither unknown nor within 0...Bounded.maxEpochSeconds")
            }
            FuzzSink.keep(Int(seconds / 86_400))  // a latency in days (the dashboard)
        }
    }

    static func checkRoundTrip(_ payload: JobPayload) {
        let text = payload.serialized()
        guard let again = try? JobPayload(parsing: Array(text.utf8)) else {
            FuzzHarness.violated("a serialized payload does not parse again")
        }
        guard again.serialized() == text else { FuzzHarness.violated("serialization is not stable across a round trip") }
    }
}
