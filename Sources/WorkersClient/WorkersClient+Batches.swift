import WorkersQueue

extension WorkersClient {
    /// Creates a batch and pushes its jobs in one atomic step (`Batches.create`, docs/batches.md), on
    /// the shard of its queues (`JobClient.createBatch`: `BatchError.spansShards` when they are on
    /// several).
    @discardableResult
    public func createBatch(_ batch: NewBatch, bid: String = Batches.newBid()) async throws -> CreatedBatch {
        let jobs = jobs
        return try await threads.run { try jobs.createBatch(batch, bid: bid) }
    }

    /// The newest `limit` batches of every shard together, newest first, each with its shard
    /// (`workerctl batches ls`).
    public func batches(limit: Int = 100) async throws -> [OnShard<BatchSummary>] {
        BatchAdmin.newest(try await withEachShard { try BatchAdmin.list($0, limit: limit) }, limit: limit)
    }

    /// One batch with its failed and dead jids, looked for on every shard, or nil (`workerctl batches show`).
    public func batch(bid: String) async throws -> OnShard<BatchDetail>? {
        try await withEachShard { try BatchAdmin.detail($0, bid: bid) }.lazy
            .compactMap { found in found.value.map { OnShard(shard: found.shard, value: $0) } }.first
    }
}
