// The names a job author writes next to `Job` (docs/writing-jobs.md), re-exported by the `Workers` product so that
// `import Workers` is enough to write, register and run a job: its arguments' contract and helpers, the payload and
// JSON values a job or a middleware reads, the uniqueness and limit policies it declares, and the PostgreSQL
// connection its `context.transaction` hands it. Queue and Storage are not products: these declarations alone are
// re-exported, not the modules (the whole enqueue and admin API is the `WorkersClient` product's).
@_exported import protocol Queue.JobArguments
@_exported import enum Queue.JobArgumentsLayout
@_exported import protocol Queue.NoJobArguments
@_exported import protocol Queue.SingleJobArgument
@_exported import struct Queue.JobPayload
@_exported import enum Queue.JSONValue
@_exported import struct Queue.JSONObject
@_exported import struct Queue.UniquePolicy
@_exported import enum Queue.UniqueUntil
@_exported import struct Queue.NewJob
@_exported import enum Queue.EnqueueError
@_exported import struct Queue.RedisEndpoint
@_exported import class Queue.RedisPool
@_exported import class Storage.PostgresConnection
// The runtime's own schema (docs/embedding.md, "With or without PostgreSQL"): applied by `WorkersSchema.migrate(url:)`,
// required by `WorkerProcess.start` with a database (`WorkersSchemaBehind`). Its values are named
// `WorkersSchema.Migration` and `WorkersSchema.Status`: no top-level `Migration` joins an adopter's namespace (Fluent
// has a `Migration` protocol).
@_exported import enum Storage.WorkersSchema
@_exported import struct Storage.WorkersSchemaBehind
// The tracing switch (docs/tracing.md): a service turns the runtime's spans on with its own tracer
// (`JobTracing.bootstrap(_:)`, or `enableWithBootstrappedTracer()` after bootstrapping swift-otel itself).
@_exported import enum Telemetry.JobTracing
