import Crypto
import Foundation
import WorkersQueue
import Synchronization

/// Unwrapped data keys, kept for a while by the opener (by key id) and the sealer (by subject digest) so that a
/// person's jobs do not each cost a key-store round trip.
///
/// Invariants:
/// - **bounded**: at most `capacity` entries. An insert first drops the expired entries at the least recently used
///   end, then, when still full, the least recently used entry, in constant time per entry dropped and without
///   allocating (`LRUSlots`: a doubly linked list over slots that are reused). An expired entry elsewhere is dropped
///   when it is looked up, or when it reaches the cold end. Before, a full cache copied and sorted its
///   whole table to drop a tenth: about 1 MB of short-lived memory per eviction on a job thread, which glibc's
///   per-thread arenas kept (+10 MB of worker RSS after 1,000,000 persons, bench/subject_keys_scale.sh);
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
    }

    private struct State {
        var entries: LRUSlots<Entry>
        var epoch: Int64?
        var checkedAt: Date?
    }
    private let state: Mutex<State>

    package init(capacity: Int, ttl: Duration, redis: RedisPool?, epochCheckInterval: Duration = .seconds(1),
                 now: @escaping @Sendable () -> Date = { Date() }) {
        self.capacity = max(1, capacity)
        state = Mutex(State(entries: LRUSlots(capacity: max(1, capacity))))
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
            guard let entry = state.entries.use(name) else { return nil }
            guard entry.until > time else {
                state.entries.remove(name)
                return nil
            }
            return entry
        }
    }

    /// Caches `key` (of `keyID`) under `name` for `ttl`; nothing when `ttl` is zero or less.
    package func insert(_ name: String, keyID: String, key: SymmetricKey) {
        guard ttl > .zero else { return }
        let time = now()
        let until = time.addingTimeInterval(Self.seconds(ttl))
        state.withLock { state in
            state.entries.removeLeastRecentlyUsed { $0.until <= time }  // the expired ones at the cold end
            state.entries.insert(name, Entry(keyID: keyID, key: key, until: until))
        }
    }

    /// Drops every entry (an erasure seen by this process).
    package func removeAll() { state.withLock { $0.entries.removeAll() } }

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

/// A least-recently-used map of at most `capacity` entries: a doubly linked list threaded through slots that are
/// allocated as they are first needed and then reused, and a dictionary from name to slot (reserved once for
/// `capacity`). `use`, `insert` (which drops the least recently used entry when full) and `remove` are O(1) and
/// allocate nothing once the cache has been full. Not thread-safe: `SubjectKeyCache` holds it behind its mutex.
struct LRUSlots<Value> {
    private struct Slot {
        var name: String
        var value: Value?
        var previous: Int
        var next: Int
    }
    let capacity: Int
    private var slots: [Slot] = []
    private var index: [String: Int]
    private var free: [Int] = []
    /// Most recently used (-1: empty).
    private var head = -1
    /// Least recently used (-1: empty).
    private var tail = -1

    init(capacity: Int) {
        self.capacity = max(1, capacity)
        index = Dictionary(minimumCapacity: self.capacity)
    }

    var count: Int { index.count }

    /// The value of `name`, now the most recently used; nil when absent.
    mutating func use(_ name: String) -> Value? {
        guard let slot = index[name] else { return nil }
        moveToFront(slot)
        return slots[slot].value
    }

    /// Sets `name` to `value`, the most recently used; drops the least recently used entry first when full.
    mutating func insert(_ name: String, _ value: Value) {
        if let slot = index[name] {
            slots[slot].value = value
            moveToFront(slot)
            return
        }
        if index.count >= capacity, tail >= 0 { remove(slots[tail].name) }
        let slot: Int
        if let reused = free.popLast() {
            slot = reused
            slots[slot] = Slot(name: name, value: value, previous: -1, next: -1)
        } else {
            slot = slots.count
            slots.append(Slot(name: name, value: value, previous: -1, next: -1))
        }
        index[name] = slot
        linkAtFront(slot)
    }

    /// Removes least recently used entries while `expired` says so of the coldest one.
    mutating func removeLeastRecentlyUsed(while expired: (Value) -> Bool) {
        while tail >= 0, let value = slots[tail].value, expired(value) { remove(slots[tail].name) }
    }

    mutating func remove(_ name: String) {
        guard let slot = index.removeValue(forKey: name) else { return }
        unlink(slot)
        slots[slot].value = nil  // releases the key now (its bytes are zeroed with its last reference)
        slots[slot].name = ""
        free.append(slot)
    }

    mutating func removeAll() {
        for slot in index.values {
            slots[slot].value = nil
            slots[slot].name = ""
            free.append(slot)
        }
        index.removeAll(keepingCapacity: true)
        head = -1
        tail = -1
    }

    private mutating func moveToFront(_ slot: Int) {
        guard slot != head else { return }
        unlink(slot)
        linkAtFront(slot)
    }

    private mutating func linkAtFront(_ slot: Int) {
        slots[slot].previous = -1
        slots[slot].next = head
        if head >= 0 { slots[head].previous = slot }
        head = slot
        if tail < 0 { tail = slot }
    }

    private mutating func unlink(_ slot: Int) {
        let previous = slots[slot].previous, next = slots[slot].next
        if previous >= 0 { slots[previous].next = next } else { head = next }
        if next >= 0 { slots[next].previous = previous } else { tail = previous }
        slots[slot].previous = -1
        slots[slot].next = -1
    }
}
