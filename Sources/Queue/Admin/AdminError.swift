/// What an admin operation refused or could not find. Redis failures are thrown separately as
/// `RedisError`.
public enum AdminError: Error, Sendable, Equatable, CustomStringConvertible {
    /// An argument is malformed (a jid with glob characters, a page size out of range…).
    case invalidArgument(String)
    /// No job with this jid in the states searched.
    case jobNotFound(jid: String, searched: [JobState])
    /// The jid is in more than one place; the operator must say which (`--state`).
    case ambiguousJob(jid: String, locations: [String])
    /// The action does not apply to a job in this state (e.g. `run` on a dead job).
    case actionNotAllowed(action: String, jid: String, state: JobState, allowed: [JobState])
    /// The entry is not a valid job, so it cannot be moved to a queue (it can still be deleted).
    case invalidJob(jid: String?, reason: String)
    /// The job was found but another operator or process moved it before we could.
    case jobGone(jid: String, location: String)
    /// No process with this identity (or identity prefix) in `processes`.
    case processNotFound(String)
    /// The identity prefix matches several processes.
    case ambiguousProcess(String, matches: [String])
    /// No unique lock with this key (`unique:<digest>`) is held.
    case uniqueLockNotHeld(lock: String)
    /// The jid owns no unique lock (it never had one, or it was released).
    case noUniqueLockOwned(jid: String)
    /// No batch with this bid (never created, or its keys expired).
    case batchNotFound(bid: String)

    public var description: String {
        switch self {
        case .invalidArgument(let message): return message
        case .jobNotFound(let jid, let searched):
            return "no job with jid \(jid) in \(searched.map(\.rawValue).joined(separator: ", "))"
        case .ambiguousJob(let jid, let locations):
            return "jid \(jid) is in several places (\(locations.joined(separator: "; "))); choose one with --state"
        case .actionNotAllowed(let action, let jid, let state, let allowed):
            return "cannot \(action) job \(jid): it is \(state.rawValue); \(action) works on \(allowed.map(\.rawValue).joined(separator: ", ")) jobs"
        case .invalidJob(let jid, let reason):
            return "job \(jid ?? "(no jid)") is not a valid job (\(reason)); it can only be deleted"
        case .jobGone(let jid, let location):
            return "job \(jid) is no longer in \(location) (moved by someone else); nothing done"
        case .processNotFound(let identity): return "no process \(identity) in the process set"
        case .ambiguousProcess(let prefix, let matches):
            return "'\(prefix)' matches several processes: \(matches.joined(separator: ", "))"
        case .uniqueLockNotHeld(let lock): return "\(lock) is not held"
        case .noUniqueLockOwned(let jid): return "jid \(jid) owns no unique lock"
        case .batchNotFound(let bid): return "no batch \(bid) (never created, or expired)"
        }
    }

    /// True for mistakes in the request (exit 2 in workerctl), false for "not there" (exit 1).
    public var isUsageError: Bool {
        switch self {
        case .invalidArgument, .ambiguousJob, .actionNotAllowed, .ambiguousProcess: return true
        case .jobNotFound, .invalidJob, .jobGone, .processNotFound, .uniqueLockNotHeld, .noUniqueLockOwned, .batchNotFound:
            return false
        }
    }

    /// True when the thing named (a job, process, lock or batch) is not on the Redis asked. With several
    /// shards (docs/sharding.md) such a miss means "look on the next shard"; every other error stops the search.
    public var isNotFound: Bool {
        switch self {
        case .jobNotFound, .processNotFound, .uniqueLockNotHeld, .noUniqueLockOwned, .batchNotFound: return true
        case .invalidArgument, .ambiguousJob, .actionNotAllowed, .invalidJob, .jobGone, .ambiguousProcess: return false
        }
    }
}
