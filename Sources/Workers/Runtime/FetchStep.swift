/// The fetcher's modes: which round trip one pass of `Fetcher.loop` makes once it holds its slots.
///
/// Thread rules: a value, chosen and used by the fetcher thread within one pass.
///
/// Invariant: `fetchThenWait` is chosen only with room for at least one fetched job plus the wait's job (`held ≥ 2`),
/// and never while the queue was last seen paused (a paused queue would have a job taken and given back on every
/// pass), nor while the Redis is full; the plain `fetch` checks for a pause before it waits, and does not wait on a
/// full Redis.
enum FetchStep: Equatable {
    /// One queue served, not last seen paused: the fetch, the paused check and a `BLMOVE` wait for the next job in
    /// one round trip (`Fetcher.fetchThenWait`, `ReliableQueue.fetchThenWait`).
    case fetchThenWait(queue: String)
    /// A batched fetch in queue order (`Fetcher.fetch`, `ReliableQueue.fetch`). With one queue, one that brought
    /// nothing goes on to the paused probe and then, unpaused, a blocking fetch; with several, an idle back-off.
    case fetch

    /// `single`: the one queue served, nil with several; `pausedSeen`: it was last seen paused; `held`: the slots
    /// this pass reserved; `redisFull`: the Redis is at `maxmemory` (`RedisRoom`), which refuses `BLMOVE`.
    init(single: String?, pausedSeen: Bool, held: Int, redisFull: Bool = false) {
        if let single, !pausedSeen, held >= 2, !redisFull {
            self = .fetchThenWait(queue: single)
        } else {
            self = .fetch
        }
    }
}
