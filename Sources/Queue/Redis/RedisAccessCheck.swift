/// What a worker checks about its Redis user before it takes a job: that it may load and run scripts (every
/// fetch, settlement and sweep is one). An ACL user without `@scripting` then stops the start with Redis's own
/// `NOPERM` words ("no permissions to run the 'script|load' command", `RedisError.isPermissionRefusal`) instead of
/// failing at its first fetch. Commands it does not exercise are named the same way when first refused.
package enum RedisAccessCheck {
    static let probe = RedisScript("return 1")

    /// The ACL rules a Redis user of the fleet needs (workers, scheduler, relay, `workerctl`, the dashboard): every
    /// key and channel, and these categories and commands. The NOPERM message quotes it; docs/deploy.md shows it; the
    /// tests' TLS server gives exactly this to its `worker` user, so each test run checks it is enough.
    package static let fleetPermissions =
        "~* &* +@read +@write +@keyspace +@list +@hash +@set +@sortedset +@string +@scripting +@transaction +@blocking +@connection +info +role"

    /// Loads and runs a script that touches nothing. Throws the refusal (or any link error) as it came.
    package static func verify(_ connection: RedisConnection) throws(RedisError) {
        try connection.evaluate(probe).checked()
    }
}
