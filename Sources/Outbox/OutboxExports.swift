// The names a service using the `Outbox` library product writes in its own code (docs/outbox.md, "From Swift"): the
// job it enqueues and the PostgreSQL connection (and pool) it enqueues on. Queue and Storage are not products, so
// the product re-exports these declarations alone, not the modules.
@_exported import struct Queue.NewJob
@_exported import enum Queue.EnqueueError
@_exported import class Storage.PostgresConnection
@_exported import class Storage.PostgresPool
// The runtime's schema (job_outbox, workers_enqueue, …): `WorkersSchema.migrate(url:)` (docs/embedding.md).
@_exported import enum Storage.WorkersSchema
// What `PostgresLedgerLookup` answers (`WorkersClient.status(jid:ledger:)` takes it, docs/writing-jobs.md "What became
// of my job").
@_exported import protocol Queue.JobLedgerLookup
@_exported import struct Queue.LedgerRow
