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
        var wanted: [Payload: Int] = [:]
        wanted.reserveCapacity(acknowledged.count)
        for raw in acknowledged { wanted[Payload(raw), default: 0] += 1 }
        var matched = [Bool](repeating: false, count: region.count)
        var found = 0
        var newest = region.count
        var index = region.count - 1
        while index >= 0, found < acknowledged.count {
            let entry = Payload(region[index])
            if let count = wanted[entry], count > 0 {
                wanted[entry] = count - 1
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
            for (position, raw) in acknowledged.enumerated() {
                guard let count = wanted[Payload(raw)], count > 0 else { continue }
                wanted[Payload(raw)] = count - 1
                leftovers.append(position)
            }
        }
        return TailCut(length: length, kept: kept, found: found, leftovers: leftovers)
    }

    /// A payload as a dictionary key hashed in one pass over its bytes (`[UInt8]`'s own `Hashable` feeds the hasher
    /// one byte at a time: the settler hashes every acknowledged payload and every entry it reads).
    private struct Payload: Hashable {
        let bytes: [UInt8]
        init(_ bytes: [UInt8]) { self.bytes = bytes }
        func hash(into hasher: inout Hasher) { bytes.withUnsafeBytes { hasher.combine(bytes: $0) } }
        static func == (a: Payload, b: Payload) -> Bool {
            a.bytes.count == b.bytes.count && a.bytes.withUnsafeBytes { x in b.bytes.withUnsafeBytes { y in
                x.count == 0 || memcmp(x.baseAddress!, y.baseAddress!, x.count) == 0
            } }
        }
    }
}
