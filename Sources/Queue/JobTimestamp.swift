/// How a job payload writes its times (`created_at`, `enqueued_at`, `failed_at`, `retried_at`).
///
/// Sidekiq 6 and 7 write epoch seconds as JSON floats (`1795330293.4722`); Sidekiq 8 writes epoch
/// milliseconds as JSON integers (`1795330293472`): sidekiq 8.0.0 Changes.md, "The `created_at`,
/// `enqueued_at`, `failed_at` and `retried_at` attributes are now stored as epoch milliseconds", and
/// `time_from_timestamp` / `calculate_latency` in sidekiq v8.1.7 lib/sidekiq/api.rb, which tell the two
/// apart by JSON type alone (Float = seconds, Integer = milliseconds). See docs/sidekiq-compat.md.
public enum TimestampUnit: Sendable, Equatable {
    /// Epoch seconds as a JSON float (Sidekiq ≤ 7, and everything this project writes for itself).
    case seconds
    /// Epoch milliseconds as a JSON integer (Sidekiq 8).
    case milliseconds

    /// The unit of one timestamp value, or nil if it is not a number.
    ///
    /// A float is seconds and an integer milliseconds, as in Sidekiq 8, except that an integer below
    /// 10¹¹ is read as whole seconds: 10¹¹ ms is March 1973, before any job, while 10¹¹ s is the
    /// year 5138, so a client that writes integer seconds (`int(time.time())`) is not read as 1970.
    public static func of(_ value: JSONValue?) -> TimestampUnit? {
        switch value {
        case .double?: return .seconds
        case .int(let n)?: return n.magnitude < 100_000_000_000 ? .seconds : .milliseconds
        default: return nil
        }
    }

    /// The unit a payload writes its times in: that of `created_at`, else `enqueued_at`, else
    /// `failed_at`; seconds when it has none of them (Sidekiq 6 and 7 readers then read it).
    public static func of(payload fields: JSONObject) -> TimestampUnit {
        for key in ["created_at", "enqueued_at", "failed_at"] {
            if let unit = of(fields[key]) { return unit }
        }
        return .seconds
    }

    /// Epoch seconds from one timestamp value in either form; nil if it is not a number.
    public static func seconds(_ value: JSONValue?) -> Double? {
        // One switch on the value (the same rule as `of(_:)`): the two-step form (unit, then the value again) made
        // Swift 6.3's release optimizer crash in JobRecord's getters ("Found ownership error", CopyPropagation).
        switch value {
        case .double(let seconds)?: return seconds
        case .int(let n)?: return n.magnitude < 100_000_000_000 ? Double(n) : Double(n) / 1000
        default: return nil
        }
    }

    /// `seconds` written in this unit: a float, or whole milliseconds as an integer (Sidekiq 8's
    /// `Process.clock_gettime(CLOCK_REALTIME, :millisecond)` truncates, and so does this).
    public func value(_ seconds: Double) -> JSONValue {
        switch self {
        case .seconds: return .double(seconds)
        case .milliseconds: return .int(Int64((seconds * 1000).rounded(.down)))
        }
    }
}

extension JobPayload {
    /// The unit this payload writes its times in (`TimestampUnit.of(payload:)`).
    public var timestampUnit: TimestampUnit { TimestampUnit.of(payload: fields) }

    /// Sets a time field in the payload's own unit, so a Sidekiq 8 job keeps integer milliseconds
    /// and a Sidekiq 6/7 job float seconds.
    public mutating func setTimestamp(_ key: String, _ seconds: Double) {
        fields[key] = timestampUnit.value(seconds)
    }
}
