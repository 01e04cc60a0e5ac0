import ArgumentParser
import Foundation
import WorkersQueue

extension JobsCommand {
    /// `workerctl jobs cancel JID`: parses and prints; the logic is `JobAdmin.cancel(jid:)`, run on every shard.
    struct Cancel: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "cancel", abstract: "Cancel a job: it never starts, or stops if it is running.",
            discussion: """
                Marks the job cancelled on every shard (the key cancelled-JID, which Sidekiq's documented \
                cancelled? pattern reads, for 7 days), moves it from the scheduled set, the retry set or its queue \
                to the dead set with error class Cancelled, and tells a running job within one heartbeat interval \
                (it stops at its next context.checkCancellation() or HTTP call, then goes to dead as Cancelled; a \
                job whose ledger transaction committed is done). A job found nowhere is still marked. Retrying a \
                Cancelled job from the dead set withdraws the cancel.
                """)
        @OptionGroup var connection: ConnectionOptions
        @OptionGroup var output: OutputOptions
        @Argument(help: "The job's jid.") var jid: String

        func run() throws {
            try adminCall {
                let outcomes = try connection.onEveryShard { try JobAdmin(connection: $0).cancel(jid: jid) }
                if output.json {
                    return printJSON(.object(["jid": .string(jid), "shards": .array(outcomes.map(Self.json))]))
                }
                print(Self.summary(jid: jid, outcomes))
            }
        }

        static func json(_ outcome: OnShard<CancelOutcome>) -> JSONValue {
            .object(["shard": .string(outcome.shard),
                     "moved_to_dead": .array(outcome.value.movedToDead.map { .string($0.rawValue) }),
                     "running_on": .array(outcome.value.runningOn.map { .string($0) }),
                     "search_incomplete": .bool(outcome.value.searchIncomplete),
                     "invalid": .int(Int64(outcome.value.invalid))])
        }

        static func summary(jid: String, _ outcomes: [OnShard<CancelOutcome>]) -> String {
            let sharded = outcomes.count > 1
            var lines = ["cancelled \(jid)" + (sharded ? " (marked on \(outcomes.count) shards)" : "")]
            for outcome in outcomes {
                let prefix = sharded ? "  shard \(outcome.shard): " : "  "
                for state in outcome.value.movedToDead { lines.append("\(prefix)\(state.rawValue) → dead (Cancelled)") }
                for identity in outcome.value.runningOn {
                    lines.append("\(prefix)running on \(identity): told within one heartbeat interval")
                }
                if outcome.value.searchIncomplete {
                    lines.append("\(prefix)search stopped at \(JobAdmin.cancelSearchEntries) entries; a copy left unread never starts")
                }
                if outcome.value.invalid > 0 { lines.append("\(prefix)\(outcome.value.invalid) invalid entries left in place") }
            }
            if outcomes.allSatisfy({ $0.value.foundNothing }) {
                lines.append("  not found waiting or running: marked, so it never starts for 7 days")
            }
            return lines.joined(separator: "\n")
        }
    }
}
