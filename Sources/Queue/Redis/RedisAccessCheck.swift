/// What a worker checks about its Redis user before it takes a job: that it may load and run scripts (every
/// fetch, settlement and sweep is one). An ACL user without `@scripting` then stops the start with Redis's own
/// `NOPERM` words ("no permissions to run the 'script|load' command", `RedisError.isPermissionRefusal`) instead of
/// failing at its first fetch. Commands it does not exercise are named the same way when first refused.
package enum RedisAccessCheck {
    static let probe = RedisScript("return 1")

    /// Loads and runs a script that touches nothing. Throws the refusal (or any link error) as it came.
    package static func verify(_ connection: RedisConnection) throws(RedisError) {
        try connection.evaluate(probe).checked()
    }
}
