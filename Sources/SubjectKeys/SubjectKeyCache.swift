import Crypto
import Foundation
import Queue
import Synchronization

/// Unwrapped data keys, kept for a while by the opener (by key id) and the sealer (by subject digest) so that a
/// person's jobs do not each cost a key-store round trip.
///
/// Invariants:
/// - **bounded**: at most `capacity` entries. An insert into a full cache first sweeps the expired entries, then, if
///   still full, drops the least recently used tenth (amortised: one sort per `capacity / 10` inserts);
/// - **short-lived**: an entry is served for at most `ttl` after it was inserted;
/// - **erasure-aware**: when `redis` is given, the fleet's erasure epoch (`SubjectKeyInvalidation`) is read at most
///   once per `epochCheckInterval`, and a changed or unreadable epoch drops every entry (an erased person's key is
///   not served for longer than that interval);
/// - **zeroed on release**: keys are held as `SymmetricKey`, whose bytes swift-crypto's `SecureBytes` clears
///   (`memset_s`) when the last reference goes.
///
/// Thread rules: any thread; one mutex, never held across a round trip (the epoch is read outside it).
package final class SubjectKeyCache: Sendable {
    package let capacity: Int
    package let ttl: Duration
    let redis: RedisPool?
    let epochCheckInterval: Duration
    let now: @Sendable () -> Date

    /// A cached key (`SymmetricKey` is an immutable value that is not marked `Sendable`).
    package struct Entry: @unchecked Sendable {
        package let keyID: String
        package let key: SymmetricKey
        let until: Date
        var lastUse: UInt64
    }

    private struct State {
        var entries: [String: Entry] = [:]
        var uses: UInt64 = 0
        var epoch: Int64?
        var checkedAt: Date?
    }
    private let state = Mutex(State())

    package init(capacity: Int, ttl: Duration, redis: RedisPool?, epochCheckInterval: Duration = .seconds(1),
                 now: @escaping @Sendable () -> Date = { Date() }) {
        self.capacity = max(1, capacity)
        self.ttl = ttl
        self.redis = redis
        self.epochCheckInterval = epochCheckInterval
        self.now = now
    }

    /// Entries right now (tests, benches).
    package var count: Int { state.withLock { $0.entries.count } }

    /// The entry for `name` if it is cached and not expired (an expired one is dropped). Reads the erasure epoch
    /// first when that is due.
    package func entry(_ name: String) -> Entry? {
        refreshEpochIfDue()
        let time = now()
        return state.withLock { state -> Entry? in
            guard var entry = state.entries[name] else { return nil }
            guard entry.until > time else {
                state.entries[name] = nil
                return nil
            }
            state.uses &+= 1
            entry.lastUse = state.uses
            state.entries[name] = entry
            return entry
        }
    }

    /// Caches `key` (of `keyID`) under `name` for `ttl`; nothing when `ttl` is zero or less.
    package func insert(_ name: String, keyID: String, key: SymmetricKey) {
        guard ttl > .zero else { return }
        let time = now()
        let until = time.addingTimeInterval(Self.seconds(ttl))
        state.withLock { state in
            if state.entries[name] == nil && state.entries.count >= capacity { Self.makeRoom(&state, capacity: capacity, time: time) }
            state.uses &+= 1
            state.entries[name] = Entry(keyID: keyID, key: key, until: until, lastUse: state.uses)
        }
    }

    /// Drops every entry (an erasure seen by this process).
    package func removeAll() { state.withLock { $0.entries.removeAll() } }

    /// Frees at least one slot: the expired entries, then the least recently used tenth.
    private static func makeRoom(_ state: inout State, capacity: Int, time: Date) {
        state.entries = state.entries.filter { $0.value.until > time }
        guard state.entries.count >= capacity else { return }
        let drop = max(1, capacity / 10)
        let oldest = state.entries.sorted { $0.value.lastUse < $1.value.lastUse }.prefix(drop).map(\.key)
        for name in oldest { state.entries[name] = nil }
    }

    private func refreshEpochIfDue() {
        guard let redis else { return }
        let time = now()
        let due = state.withLock { state -> Bool in
            if let checked = state.checkedAt, time.timeIntervalSince(checked) < Self.seconds(epochCheckInterval) { return false }
            state.checkedAt = time
            return true
        }
        guard due else { return }
        let epoch = try? SubjectKeyInvalidation.epoch(on: redis)
        state.withLock { state in
            if epoch == nil || epoch != state.epoch { state.entries.removeAll() }
            state.epoch = epoch
        }
    }

    private static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }
}
