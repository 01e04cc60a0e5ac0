/// Whether the live processes serving a queue can run a job class, from what each announces in its process record
/// (`ProcessEntry.registeredClasses`: ours list their classes; Ruby Sidekiq and older releases list none). The one
/// reading of those announcements: the runtime's give-back of a class it does not know (docs/deploy.md, "Rolling
/// deploys") and `jobs explain` both decide through here.
///
/// A process serves a queue when it lists the queue and is not quiet (a quiet process fetches nothing).
package enum ClassKnowledge: Sendable, Equatable {
    /// `identities` (sorted) serve the queue and list the class.
    case announced(by: [String])
    /// No process serving the queue lists the class, but `identities` (sorted) list no classes at all (Ruby
    /// Sidekiq, an older release of ours, or a process with more classes than its record lists): they may know it.
    case mayKnow(unannounced: [String])
    /// `serving` processes serve the queue; every one lists its classes, and none lists this one.
    case nobody(serving: Int)

    /// What `processes` say about `className` on `queue`, leaving out `excluding` (the asking process itself). With
    /// `argumentsVersion`: a process announces the class only when it also announces that version among those it
    /// decodes; one that lists the class without versions may know it.
    package static func of(className: String, queue: String, processes: [ProcessEntry],
                           excluding identity: String? = nil, argumentsVersion: Int? = nil) -> ClassKnowledge {
        let serving = processes.filter { !$0.quiet && $0.queues.contains(queue) && $0.identity != identity }
        let listing = serving.filter { $0.registeredClasses?.contains(className) == true }
        let announcing = listing.filter { process in
            argumentsVersion.map { process.argumentVersions(of: className)?.contains($0) == true } ?? true
        }.map(\.identity).sorted()
        if !announcing.isEmpty { return .announced(by: announcing) }
        let unversioned = argumentsVersion == nil ? [] : listing.filter { $0.argumentVersions(of: className) == nil }
        let silent = (serving.filter { $0.registeredClasses == nil } + unversioned).map(\.identity).sorted()
        if !silent.isEmpty { return .mayKnow(unannounced: silent) }
        return .nobody(serving: serving.count)
    }
}
