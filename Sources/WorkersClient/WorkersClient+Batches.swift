import Queue

extension WorkersClient {
    /// Creates a batch and pushes its jobs in one atomic step (`Batches.create`, docs/batches.md).
    @discardableResult
    public func createBatch(_ batch: NewBatch, bid: String = Batches.newBid()) async throws -> CreatedBatch {
        try await withConnection { try Batches.create($0, batch, bid: bid) }
    }

    /// The newest batches, newest first (`workerctl batches ls`).
    public func batches(limit: Int = 100) async throws -> [BatchSummary] {
        try await withConnection { try BatchAdmin.list($0, limit: limit) }
    }

    /// One batch with its failed and dead jids, or nil (`workerctl batches show`).
    public func batch(bid: String) async throws -> BatchDetail? {
        try await withConnection { try BatchAdmin.detail($0, bid: bid) }
    }
}
