import Foundation

/// How one in-flight list's plain acknowledgements come off its tail: the stretch from the tail to the newest
/// acknowledged entry found there is cut off (`LTRIM`) and the entries of it that stay are pushed back in their order
/// (`RPUSH`), so that the list ends exactly as after one `LREM list -1 raw` per acknowledged job — for two commands
/// instead of one a job, and none of them carrying an acknowledged payload. Pure: no I/O, any thread.
///
/// Invariant (`plan`): identical bytes may be in flight twice, so a raw acknowledged c times matches its c nearest
/// occurrences to the tail, as c `LREM -1`s would remove them; an acknowledged job not matched in the region read
/// (`leftovers`) is further from the tail than every matched entry of the same bytes, so an `LREM -1` after the cut
/// removes what it would have removed before it. `SettleRemovalTests` holds the list and counts to that.
package struct TailCut: Sendable, Equatable {
    /// How many entries to cut off the tail (`LTRIM list 0 -(length + 1)`).
    package let length: Int
    /// The entries of that stretch that stay, in list order (the one nearest the head first): pushed back with `RPUSH`.
    package let kept: [[UInt8]]
    /// How many acknowledged jobs the stretch holds (each is settled and counted once).
    package let found: Int
    /// Indices (into the acknowledged raws) of the jobs not in the region read: each one `LREM`ed on its own.
    package let leftovers: [Int]

    /// Entries read past the acknowledged count: where the jobs that finish before older ones still running sit.
    package static let slack = 32

    /// The plan for acknowledging `acknowledged` on a list whose last entries are `region` (as `LRANGE list -k -1`
    /// returns them: the tail last). Nil when a cut would not pay: no acknowledged job in the region, or more
    /// entries staying in the stretch than leaving it (then every job is a leftover, `LREM`ed one by one).
    package static func plan(region: [[UInt8]], acknowledged: [[UInt8]]) -> TailCut? {
        var wanted = Multiset(acknowledged)
        var matched = [Bool](repeating: false, count: region.count)
        var found = 0
        var newest = region.count
        var index = region.count - 1
        while index >= 0, found < acknowledged.count {
            if wanted.take(region[index]) {
                matched[index] = true
                found += 1
                newest = index
            }
            index -= 1
        }
        let length = region.count - newest
        guard found > 0, length - found <= found else { return nil }
        var kept: [[UInt8]] = []
        for position in newest..<region.count where !matched[position] { kept.append(region[position]) }
        var leftovers: [Int] = []
        if found < acknowledged.count {
            for (position, raw) in acknowledged.enumerated() where wanted.take(raw) { leftovers.append(position) }
        }
        return TailCut(length: length, kept: kept, found: found, leftovers: leftovers)
    }

    /// The acknowledged raws as a multiset: open addressing over their distinct byte strings, each hashed in one pass
    /// over its bytes (`Hasher.combine(bytes:)`; `[UInt8]`'s own `Hashable` feeds the hasher a byte at a time).
    /// Concrete rather than a `Dictionary` keyed by a wrapper: the generic dictionary's runtime metadata and
    /// unspecialized paths were pages of the binary the settler touched on every batch (issue 38 goal 4, peak RSS).
    private struct Multiset {
        private let raws: [[UInt8]]
        /// Per slot: the index in `raws` of the distinct raw stored there, or -1. Never more than half full.
        private var owners: [Int]
        /// Per slot: the copies of its raw not yet taken.
        private var counts: [Int]
        private let mask: Int

        init(_ raws: [[UInt8]]) {
            var size = 16
            while size < raws.count * 2 { size <<= 1 }
            self.raws = raws
            owners = [Int](repeating: -1, count: size)
            counts = [Int](repeating: 0, count: size)
            mask = size - 1
            for index in raws.indices {
                let slot = slot(of: raws[index])
                if owners[slot] < 0 { owners[slot] = index }
                counts[slot] += 1
            }
        }

        /// Takes one copy of `bytes`; false when none is left (or there never was one).
        mutating func take(_ bytes: [UInt8]) -> Bool {
            let slot = slot(of: bytes)
            guard owners[slot] >= 0, counts[slot] > 0 else { return false }
            counts[slot] -= 1
            return true
        }

        /// The slot holding `bytes`, or the free slot where they would go.
        private func slot(of bytes: [UInt8]) -> Int {
            var hasher = Hasher()
            bytes.withUnsafeBytes { hasher.combine(bytes: $0) }
            var slot = hasher.finalize() & mask
            while owners[slot] >= 0 && !Self.same(raws[owners[slot]], bytes) { slot = (slot + 1) & mask }
            return slot
        }

        private static func same(_ a: [UInt8], _ b: [UInt8]) -> Bool {
            a.count == b.count && a.withUnsafeBytes { x in b.withUnsafeBytes { y in
                x.count == 0 || memcmp(x.baseAddress!, y.baseAddress!, x.count) == 0
            } }
        }
    }
}
