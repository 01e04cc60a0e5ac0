// Scheduler module: cron expressions, the schedule file, the catch-up planner, and the runner that
// fires entries through Redis (docs/scheduler.md).
// See Package.swift for its place in the layering: it may import Queue, Yams and Logging, never Workers.
//
// Runtime pieces (Redis I/O):
//
// * `CronStore` — sidekiq-cron's keys (`CronKeys`, `CronHashField`): `sync` writes the schedule file's
//   entries, `fire` claims one tick and enqueues its job in ONE Lua script (`CronScripts.fire`: the
//   claim ZADD NX into `cron_job:NAME:enqueued`, the monotonic cursor `last_tick_epoch`, SADD queues +
//   LPUSH of the Sidekiq JSON with a jid derived from entry+tick, history, `last_enqueue_time`), so a
//   crash can never leave a claim without its job or a job without its claim; `runNow`, `backfill`
//   (CronBackfill.swift: one past tick by hand, the same claim and jid as `fire`), `setStatus`,
//   `list`, `history` serve `workerctl cron`.
// * `SchedulerRunner` — the loop: per round, reload status + cursor from Redis, plan with
//   `CatchUpPlanner`, fire each due tick; sleep until the next tick of any entry (at most `maxSleep`).
//   `requestReload` (SIGHUP) makes the loop's own thread re-read the schedule file between rounds.
//
// Pure pieces (no I/O except `ScheduleFile.load`, no clock except `SystemClock`):
//
// * `CronExpression` — parses the fugit / sidekiq-cron dialect (5 or 6 fields, names, steps, `L`,
//   `dow#n`, macros) and computes `next(after:in:)`, `previous(atOrBefore:in:)` and
//   `ticks(from:to:in:limit:)` in any `TimeZone`. Daylight-saving rules are documented in
//   CronExpression+Schedule.swift:
//     - a wall-clock time skipped by spring-forward fires once at the end of the gap (03:00 local)
//       when the hour field is fixed, and not at all when the hour field is `*` or a step;
//     - a wall-clock time repeated by fall-back fires at its first occurrence only when the hour
//       field is fixed, and at both occurrences when the hour field is `*` or a step.
// * `ScheduleEntry` / `ScheduleFile` — `config/schedule.yaml`, validated as a whole
//   (`ScheduleFileError` lists every problem with the entry name and the key).
// * `CatchUpPlanner` — `dueTicks(entry:lastFired:now:)`: which ticks to fire under the entry's
//   `CatchUpPolicy` (`skip` / `latest` / `all` within a window). The runner claims each tick in
//   Redis (single fire across processes, sidekiq-cron's ZADD on `cron_job:NAME:enqueued` with
//   `TickFormat.iso8601UTC(tick)`) and enqueues `entry.arguments(forTick:)`.
