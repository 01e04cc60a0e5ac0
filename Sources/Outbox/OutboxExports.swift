// The names a service using the `Outbox` library product writes in its own code (docs/outbox.md, "From Swift"): the
// job it enqueues and the PostgreSQL connection (and pool) it enqueues on. Queue and Storage are not products, so
// the product re-exports these declarations alone, not the modules.
@_exported import struct WorkersQueue.NewJob
@_exported import enum WorkersQueue.EnqueueError
@_exported import class WorkersStorage.PostgresConnection
@_exported import class WorkersStorage.PostgresPool
// The runtime's schema (job_outbox, workers_enqueue, …): `WorkersSchema.migrate(url:)` (docs/embedding.md).
@_exported import enum WorkersStorage.WorkersSchema
// Types this product's own public signatures name, so an adopter can name them too (scripts/public-api fails on a
// signature naming a type of ours the product does not export: issue 53).
@_exported import protocol WorkersQueue.EnqueueMiddleware
@_exported import struct WorkersQueue.JSONObject
@_exported import enum WorkersQueue.JSONValue
@_exported import protocol WorkersQueue.JobArguments
@_exported import class WorkersQueue.RedisConnection
@_exported import enum WorkersQueue.RedisError
@_exported import struct WorkersQueue.ShardMap
@_exported import typealias WorkersStorage.Migration
@_exported import struct WorkersStorage.MigrationStatus
@_exported import protocol WorkersStorage.PostgresBindable
@_exported import struct WorkersStorage.PostgresConnectionOptions
@_exported import struct WorkersStorage.PostgresPoolConfiguration
@_exported import struct WorkersStorage.PostgresRow
@_exported import struct WorkersStorage.PostgresRows
@_exported import struct WorkersQueue.JSONParseError
@_exported import enum WorkersQueue.JobArgumentsLayout
@_exported import protocol WorkersQueue.RedisArgument
@_exported import struct WorkersQueue.RedisEndpoint
@_exported import enum WorkersQueue.RedisReply
@_exported import enum WorkersQueue.ShardMapError
@_exported import struct WorkersStorage.PostgresDay
@_exported import protocol WorkersStorage.PostgresDecodable
@_exported import struct WorkersQueue.RedisTLSSettings
// What `PostgresLedgerLookup` answers (`WorkersClient.status(jid:ledger:)` takes it, docs/writing-jobs.md "What became
// of my job").
@_exported import protocol WorkersQueue.JobLedgerLookup
@_exported import struct WorkersQueue.LedgerRow
