// The names a service using the `WorkersSubjectKeys` library product meets in this product's own signatures (the
// sealer's job and arguments, the pools it is given): WorkersQueue and WorkersStorage are not products, so the product
// re-exports these declarations alone (`scripts/public-api` fails on a public signature naming a type not exported).
@_exported import enum WorkersQueue.JSONValue
@_exported import protocol WorkersQueue.JobArguments
@_exported import struct WorkersQueue.NewJob
@_exported import class WorkersQueue.RedisPool
@_exported import class WorkersStorage.PostgresConnection
@_exported import class WorkersStorage.PostgresPool
@_exported import enum WorkersQueue.EnqueueError
@_exported import struct WorkersQueue.JSONObject
@_exported import struct WorkersQueue.JSONParseError
@_exported import enum WorkersQueue.JobArgumentsLayout
@_exported import class WorkersQueue.RedisConnection
@_exported import struct WorkersQueue.RedisEndpoint
@_exported import enum WorkersQueue.RedisError
@_exported import protocol WorkersStorage.PostgresBindable
@_exported import struct WorkersStorage.PostgresConnectionOptions
@_exported import struct WorkersStorage.PostgresPoolConfiguration
@_exported import struct WorkersStorage.PostgresRow
@_exported import struct WorkersStorage.PostgresRows
@_exported import protocol WorkersQueue.RedisArgument
@_exported import enum WorkersQueue.RedisReply
@_exported import struct WorkersQueue.RedisTLSSettings
@_exported import struct WorkersStorage.PostgresDay
@_exported import protocol WorkersStorage.PostgresDecodable
