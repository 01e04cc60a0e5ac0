// The names a job author writes next to `Job` (docs/writing-jobs.md), re-exported by the `Workers` product so that
// `import Workers` is enough to write, register and run a job: its arguments' contract and helpers, the payload and
// JSON values a job or a middleware reads, the uniqueness and limit policies it declares, and the PostgreSQL
// connection its `context.transaction` hands it. Queue and Storage are not products: these declarations alone are
// re-exported, not the modules (the whole enqueue and admin API is the `WorkersClient` product's).
@_exported import protocol WorkersQueue.JobArguments
@_exported import enum WorkersQueue.JobArgumentsLayout
@_exported import protocol WorkersQueue.NoJobArguments
@_exported import protocol WorkersQueue.SingleJobArgument
@_exported import struct WorkersQueue.JobPayload
@_exported import enum WorkersQueue.JSONValue
@_exported import struct WorkersQueue.JSONObject
@_exported import struct WorkersQueue.UniquePolicy
@_exported import enum WorkersQueue.UniqueUntil
@_exported import struct WorkersQueue.NewJob
@_exported import enum WorkersQueue.EnqueueError
@_exported import struct WorkersQueue.RedisEndpoint
@_exported import class WorkersQueue.RedisPool
@_exported import class WorkersStorage.PostgresConnection
// The runtime's own schema (docs/embedding.md, "With or without PostgreSQL"): applied by `WorkersSchema.migrate(url:)`,
// required by `WorkerProcess.start` with a database (`WorkersSchemaBehind`). Its values are named
// `WorkersSchema.Migration` and `WorkersSchema.Status`: no top-level `Migration` joins an adopter's namespace (Fluent
// has a `Migration` protocol).
@_exported import enum WorkersStorage.WorkersSchema
@_exported import struct WorkersStorage.WorkersSchemaBehind
// The tracing switch (docs/tracing.md): a service turns the runtime's spans on with its own tracer
// (`JobTracing.bootstrap(_:)`, or `enableWithBootstrappedTracer()` after bootstrapping swift-otel itself).
@_exported import enum WorkersTelemetry.JobTracing
// Types this product's own public signatures name, so an adopter can name them too (scripts/public-api fails on a
// signature naming a type of ours the product does not export: issue 53).
@_exported import struct WorkersQueue.DeadSetLimits
@_exported import struct WorkersQueue.JSONParseError
@_exported import struct WorkersQueue.LimitSpec
@_exported import enum WorkersQueue.PayloadError
@_exported import protocol WorkersQueue.PersonalArgumentsOpener
@_exported import class WorkersQueue.RedisConnection
@_exported import enum WorkersQueue.RedisError
@_exported import struct WorkersQueue.RedisTLSSettings
@_exported import enum WorkersQueue.RetrySetting
@_exported import struct WorkersQueue.ShardMap
@_exported import enum WorkersQueue.TimestampUnit
@_exported import struct WorkersStorage.JobLedger
@_exported import enum WorkersStorage.LedgerOutcome
@_exported import typealias WorkersStorage.Migration
@_exported import struct WorkersStorage.MigrationStatus
@_exported import protocol WorkersStorage.PostgresBindable
@_exported import struct WorkersStorage.PostgresConnectionOptions
@_exported import class WorkersStorage.PostgresPool
@_exported import struct WorkersStorage.PostgresRow
@_exported import struct WorkersStorage.PostgresRows
@_exported import struct WorkersBoundary.BoundaryError
@_exported import protocol WorkersQueue.RedisArgument
@_exported import enum WorkersQueue.RedisReply
@_exported import enum WorkersQueue.ShardMapError
@_exported import struct WorkersStorage.PostgresDay
@_exported import protocol WorkersStorage.PostgresDecodable
@_exported import struct WorkersStorage.PostgresPoolConfiguration
