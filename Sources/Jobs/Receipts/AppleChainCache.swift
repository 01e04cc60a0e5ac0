import Crypto
import Foundation
import Synchronization

/// The x5c chains an `AppleSignedDataVerifier` has validated, so a worker does not parse three certificates and run
/// the X509 verifier for every JWS of the same Apple signing certificate (three to four JWS per receipts job, all
/// under one leaf; bench/receipts-cpu.sh, issue 38).
///
/// Apple's own library keeps such a cache (app-store-server-library-swift, `Sources/AppStoreServerLibrary/
/// ChainVerifier.swift`: `verifiedPublicKeyCache`, at most 32 entries, each trusted for 15 minutes). Ours is
/// narrower: an entry is used only when the new JWS's validation time falls inside the window where every
/// certificate of the validated chain is valid (Apple's reuses a result whatever the time); everything else the
/// verifier checks (signatures along the chain, constraints, Apple's OIDs, the configured roots) is a property of the
/// bytes, the same at every time. Only successes are kept; a miss runs the full validation, so the cache can only
/// spare work, never accept what the verifier would refuse. The JWS's own signature is always checked, with the
/// cached leaf key.
///
/// Invariant: an entry's key is the exact text of the JWS's three `x5c` entries, joined by "." — those the verifier
/// parsed and whose leaf and intermediate it validated against this verifier's roots (`x5c[2]` is parsed, not trusted:
/// keeping it in the key makes a hit need the very bytes that passed, as without the cache).
/// Thread rules: any thread; one lock around the table (lookups and inserts only, no validation under it).
final class AppleChainCache: Sendable {
    /// Apple's figures (ChainVerifier.swift: `MAXIMUM_CACHE_SIZE`, `CACHE_TIME_LIMIT`).
    static let capacity = 32
    static let lifetime: TimeInterval = 15 * 60

    struct Entry: Sendable {
        /// The leaf certificate's key, which verifies the JWS signature (X9.63 bytes: swift-crypto's key type is
        /// not `Sendable`; rebuilding it is a point check, microseconds).
        let leafKey: [UInt8]
        /// Latest `notValidBefore` and earliest `notValidAfter` of the validated chain (leaf, intermediate, root).
        let validFrom: Date
        let validUntil: Date
        /// When the entry stops being used (added + `lifetime`).
        let expires: Date
    }

    private let entries = Mutex<[String: Entry]>([:])

    /// The leaf key of a chain validated before, when `time` lies in its validity window and the entry is fresh.
    func leafKey(for key: String, at time: Date, now: Date = Date()) -> P256.Signing.PublicKey? {
        entries.withLock { entries -> [UInt8]? in
            guard let entry = entries[key] else { return nil }
            guard entry.expires > now else { entries[key] = nil; return nil }
            return (entry.validFrom...entry.validUntil).contains(time) ? entry.leafKey : nil
        }.flatMap { try? P256.Signing.PublicKey(x963Representation: $0) }
    }

    /// Keeps a validated chain. When full, expired entries go first; if none has, the whole table is dropped (a
    /// worker sees one or two Apple signing certificates at a time: 32 distinct chains means something unusual).
    func insert(_ key: String, leafKey: P256.Signing.PublicKey, validFrom: Date, validUntil: Date, now: Date = Date()) {
        let entry = Entry(leafKey: Array(leafKey.x963Representation), validFrom: validFrom, validUntil: validUntil, expires: now.addingTimeInterval(Self.lifetime))
        entries.withLock { entries in
            if entries[key] == nil, entries.count >= Self.capacity {
                entries = entries.filter { $0.value.expires > now }
                if entries.count >= Self.capacity { entries.removeAll() }
            }
            entries[key] = entry
        }
    }

    /// Entries held (tests).
    var count: Int { entries.withLock { $0.count } }
}
