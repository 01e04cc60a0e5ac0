/// The keys Queue's Lua scripts name themselves, each from its key type: a fixed key bound to an upper-case Lua local
/// (sent in `KEYS[]`), a derivation as a lower-case Lua function built from the key type's builder. A script lists what
/// it uses (`ScriptKeys().queues.queueKey`); `scripts/check-sources` lists each derivation's use with its reason.
extension ScriptKeys {
    // Fixed keys.
    package var queues: ScriptKeys { fixed("QUEUES", Keys.queues) }
    package var paused: ScriptKeys { fixed("PAUSED", Keys.paused) }
    package var schedule: ScriptKeys { fixed("SCHEDULE", Keys.schedule) }
    package var retry: ScriptKeys { fixed("RETRY", Keys.retry) }
    package var dead: ScriptKeys { fixed("DEAD", Keys.dead) }
    package var batches: ScriptKeys { fixed("BATCHES", Keys.batches) }
    package var statProcessed: ScriptKeys { fixed("STAT_PROCESSED", Keys.statProcessed) }
    package var statFailed: ScriptKeys { fixed("STAT_FAILED", Keys.statFailed) }
    package var uniqueDropped: ScriptKeys { fixed("UNIQUE_DROPPED", Keys.uniqueDropped) }

    // Derivations: keys named by what the script reads (a queue in a job or an argument, a jid, a bid, the day).
    package var queueKey: ScriptKeys { derived("queue_key", Keys.queue) }
    package var workingKey: ScriptKeys { derived("working_key") { Keys.working(queue: $0, identity: $1) } }
    package var uniqueOwnerKey: ScriptKeys { derived("unique_owner_key", Keys.uniqueOwner) }
    package var completionKey: ScriptKeys { derived("completion_key") { CompletionKeys.record(jid: $0) } }
    package var statDayKeys: ScriptKeys {
        derived("stat_processed_day_key") { Keys.statProcessed(day: $0) }
            .derived("stat_failed_day_key") { Keys.statFailed(day: $0) }
            .derived("stat_minutely_processed_key") { Keys.statMinutelyProcessed(day: $0) }
            .derived("stat_minutely_failed_key") { Keys.statMinutelyFailed(day: $0) }
    }
    package var batchKeys: ScriptKeys {
        derived("batch_key", Keys.batch).derived("batch_jids_key", Keys.batchJids).derived("batch_done_key", Keys.batchDone)
            .derived("batch_failed_key", Keys.batchFailed).derived("batch_died_key", Keys.batchDied)
    }
}
