/// The Redis keys of the limiters (docs/limiters.md):
/// - `limits` HASH: limit name → `LimitSpec.encoded`, written by every worker at start (declarations).
/// - `limit:<name>` or `limit:<name>:<key>`: one limiter instance. A ZSET for `concurrent` (member = lease
///   token, score = lease expiry in ms of Redis time); a HASH for `window` (`window` index, `count`) and
///   `bucket` (`tokens`, `at` ms). Every instance key carries a PEXPIRE, so idle limiters disappear.
package enum LimitKeys {
    public static let declared = "limits"

    /// The instance key for `name` and the key derived from a job's arguments (nil or empty: one global limiter).
    public static func instance(name: String, key: String?) -> String {
        guard let key, !key.isEmpty else { return "limit:\(name)" }
        return "limit:\(name):\(key)"
    }
}
