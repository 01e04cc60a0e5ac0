import WorkersStorage
import Workers

/// The jobs and tables of the benchmarks, the chaos run and the exactly-once tests — kept out of
/// production: nothing here is registered or created unless asked for explicitly
/// (`workerctl worker|run --bench-jobs`, `workerctl migrate --bench-tables`, or a test's setup).
public enum BenchJobs {
    /// Registers `ProbeInsert`, `BatchProbe`, `PickupProbe`, `HttpProbe` and `RunLogProbe`.
    public static func register(into registry: inout JobRegistry) {
        registry.register(ProbeInsertJob())
        registry.register(BatchProbeJob())
        registry.register(PickupProbeJob())
        registry.register(HttpProbeJob())
        registry.register(RunLogProbeJob())
    }

    /// Registers the async bench jobs, `AsyncNoop` and `AsyncPickupProbe` (`workerctl worker|run --bench-jobs`): apart
    /// from `register(into:)`, since a process with async jobs refuses a sync-only `JobMiddleware`.
    public static func registerAsync(into registry: inout JobRegistry) {
        registry.register(AsyncNoopJob())
        registry.register(AsyncPickupProbeJob())
    }

    /// Registers `SealedProbe`, whose arguments are personal: only on a worker that has the key store (a KEK
    /// configured), never by `register(into:)` — a registry declaring personal arguments refuses to start without it.
    public static func registerSealedProbe(into registry: inout JobRegistry) {
        registry.register(SealedProbeJob())
    }

    /// The built-in smoke-test jobs plus the bench jobs: what a bench or test worker runs.
    public static func registry() -> JobRegistry {
        var registry = JobRegistry.builtins()
        register(into: &registry)
        return registry
    }
}

/// The bench/test-only schema: `probe_rows`, which `ProbeInsert` writes.
///
/// Not a versioned migration: it is never part of `workerctl migrate` on a production database.
/// `create` is idempotent (`IF NOT EXISTS`), so the bench scripts and the tests call it on every run.
/// (Until this split, the table came from the production migration 0003_probe, now retired:
/// see `Migration.retired`.)
public enum BenchSchema {
    /// Deliberately no unique key on jid: a job applied twice shows up as two rows.
    public static let sql = """
        CREATE TABLE IF NOT EXISTS probe_rows (
            id          bigserial PRIMARY KEY,
            jid         text NOT NULL,
            note        text NOT NULL DEFAULT '',
            inserted_at timestamptz NOT NULL DEFAULT clock_timestamp()
        );
        CREATE INDEX IF NOT EXISTS probe_rows_jid_idx ON probe_rows (jid);
        """

    public static func create(on connection: PostgresConnection) throws {
        try connection.executeScript(sql)
    }

    public static func create(pool: PostgresPool) throws {
        try pool.withConnection { try create(on: $0) }
    }
}
