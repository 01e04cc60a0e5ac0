import Foundation
import WorkersQueue
import WorkersTestServices
import XCTest

@testable import Workers

/// With several shards, each heartbeat counts its own shard's `cancels`: a beat of a shard without cancels does not
/// hide another shard's (mutation sample 2026-12-07, survivor E5: the process-wide flag must follow every shard's
/// set, not the one that beat last). Two test Redis databases stand for shards 0 and 1 (172 and 83).
/// And (issue 51 point 4, database 127) a beat reads only the jids it runs, whatever the size of `cancels`.
final class RunSteeringShardTests: XCTestCase {
    func testACancelOnOneShardOutlivesABeatOfAnotherShardWithoutCancels() throws {
        let shard0 = try TestRedis(database: 172)
        let shard1 = try TestRedis(database: 83)
        try shard0.flush()
        try shard1.flush()
        defer { try? shard0.flush(); try? shard1.flush() }
        let jid = "cancelacross000000000001"
        try shard0.command("ZADD", JobCancels.set, Clock.now() + 3600, jid)
        let payload = try JobClient.payload(for: NewJob("Noop"), jid: jid, createdAt: Clock.now(), enqueuedAt: Clock.now())
        let steering = RunSteering()
        let connections = [try shard0.connection(), try shard1.connection()]
        func fetched(shard: Int) throws -> FetchedJob {
            var jobs = [FetchedJob(queue: "default", raw: Array(payload.serialized().utf8), workingKey: "w", shard: shard)]
            try steering.markFetched(&jobs, shard: shard) { () throws(RedisError) in connections[shard] }
            return jobs[0]
        }

        XCTAssertFalse(try steering.isCancelled(payload, job: fetched(shard: 0)), "no beat yet: no lookup")
        try steering.beat(shard0.connection(), shard: 0, executions: [], now: Clock.now())
        XCTAssertTrue(steering.cancelsExist(shard: 0))
        XCTAssertTrue(try steering.isCancelled(payload, job: fetched(shard: 0)))
        try steering.beat(shard1.connection(), shard: 1, executions: [], now: Clock.now())
        XCTAssertTrue(steering.cancelsExist(shard: 0), "shard 1's beat without cancels keeps shard 0's")
        XCTAssertFalse(steering.cancelsExist(shard: 1))
        XCTAssertTrue(try steering.isCancelled(payload, job: fetched(shard: 0)))
        XCTAssertFalse(try steering.isCancelled(payload, job: fetched(shard: 1)), "a jid is looked up on the shard its job came from")
        try shard0.command("ZREM", JobCancels.set, jid)
        try steering.beat(shard0.connection(), shard: 0, executions: [], now: Clock.now())
        XCTAssertFalse(steering.cancelsExist(shard: 0), "withdrawn on its shard")
        XCTAssertFalse(try steering.isCancelled(payload, job: fetched(shard: 0)))
    }

    /// One beat's commands and reply bytes do not grow with `cancels`: with 100 and with 100,000 live marks, a beat
    /// serving 4 runs (one of them marked) sends no `ZRANGEBYSCORE` (no read of the set), one `ZCARD` and one
    /// `ZMSCORE`, and its replies are the same few hundred bytes; the marked run is told in both. (Before: the beat
    /// read up to 10,000 members with scores, ~400 kB of replies.) Counted with `CONFIG RESETSTAT` then
    /// `INFO commandstats` and `total_net_output_bytes` (the server is this test's alone meanwhile).
    func testABeatReadsOnlyTheJidsItRunsWhateverTheSizeOfCancels() throws {
        let redis = try TestRedis(database: 127)
        defer { try? redis.flush() }
        let admin = try redis.connection()
        func stats() throws -> (calls: [String: Int], outputBytes: Int) {
            // `stats` first: its reply is counted by the next call only.
            let text = (try admin.command("INFO", "stats").string ?? "") + (try admin.command("INFO", "commandstats").string ?? "")
            var calls: [String: Int] = [:]
            var bytes = 0
            for line in text.split(whereSeparator: \.isNewline) {
                if line.hasPrefix("total_net_output_bytes:") { bytes = Int(line.split(separator: ":")[1]) ?? 0 }
                guard line.hasPrefix("cmdstat_"), let colon = line.firstIndex(of: ":"), let range = line.range(of: "calls="),
                      let end = line[range.upperBound...].firstIndex(of: ",") else { continue }
                calls[String(line[line.index(line.startIndex, offsetBy: 8)..<colon])] = Int(line[range.upperBound..<end]) ?? 0
            }
            return (calls, bytes)
        }
        let beatConnection = try redis.connection()
        try beatConnection.command("PING")
        /// The commands and reply bytes of `body`, less those of the measurement itself.
        func measured(_ body: () throws -> Void) throws -> (calls: [String: Int], bytes: Int) {
            try admin.command("CONFIG", "RESETSTAT")
            try body()
            let after = try stats()
            return (after.calls.filter { !$0.key.hasPrefix("info") && !$0.key.hasPrefix("config") }, after.outputBytes)
        }
        let baseline = try measured {}.bytes

        let jids = (0..<4).map { "running00000000000000\($0)" }
        let executions = try jids.map { jid in
            let payload = try JobClient.payload(for: NewJob("Noop"), jid: jid, createdAt: Clock.now(), enqueuedAt: Clock.now())
            return Execution(job: FetchedJob(queue: "default", raw: Array(payload.serialized().utf8), workingKey: "w"),
                             payload: payload, threadID: "t", startedAt: Clock.now(), timeout: 60)
        }
        var results: [Int: (calls: [String: Int], bytes: Int, told: Bool)] = [:]
        for count in [100, 100_000] {
            try redis.flush()
            var marks: [any RedisArgument] = ["ZADD", JobCancels.set]
            for index in 0..<count { marks += [Clock.now() + 86_400, "othercancel\(100_000_000 + index)"] }
            marks += [Clock.now() + Double(JobCancels.ttl.components.seconds), jids[2]]  // the newest mark
            _ = try admin.send(marks).checked()
            let steering = RunSteering()
            let beat = try measured { try steering.beat(beatConnection, shard: 0, executions: executions, now: Clock.now()) }
            results[count] = (beat.calls, beat.bytes - baseline, executions[2].cancellation.isCancelledByOperator)
            XCTAssertFalse(executions[1].cancellation.isCancelledByOperator)
        }
        for (count, result) in results.sorted(by: { $0.key < $1.key }) {
            print("RunSteeringShardTests: one beat with \(count) marks: \(result.calls), \(result.bytes) reply bytes")
            XCTAssertNil(result.calls["zrangebyscore"], "\(count) marks: no read of the whole set")
            XCTAssertEqual(result.calls["zcard"], 1, "\(count) marks")
            XCTAssertEqual(result.calls["zmscore"], 1, "\(count) marks")
            XCTAssertEqual(Set(result.calls.keys), ["zremrangebyscore", "zcard", "zmscore"], "\(count) marks")
            XCTAssertLessThan(result.bytes, 500, "\(count) marks: the replies are bounded by the runs, not the marks")
            XCTAssertTrue(result.told, "\(count) marks: the marked run is told")
        }
        XCTAssertLessThanOrEqual(abs((results[100]?.bytes ?? 0) - (results[100_000]?.bytes ?? 0)), 16,
                                 "the same replies but the count's and the score's digits")
    }

    /// A job settled for good while known marked has its mark removed by the second beat after (its settlement is
    /// written by then), not the first; a failed beat keeps it for the next one. `cancelled-<jid>` is left alone.
    func testASettledJobsMarkLeavesAtTheSecondBeat() throws {
        let redis = try TestRedis(database: 127)
        defer { try? redis.flush() }
        let jid = "settledmark0000000000001"
        try redis.command("ZADD", JobCancels.set, Clock.now() + 3600, jid)
        try redis.command("SET", JobCancels.markKey(jid: jid), 1, "EX", 3600)
        let steering = RunSteering()
        let connection = try redis.connection()
        try steering.beat(connection, shard: 0, executions: [], now: Clock.now())
        steering.noteSettled(jid: jid, shard: 0)
        try steering.beat(connection, shard: 0, executions: [], now: Clock.now())
        XCTAssertFalse(try redis.command("ZSCORE", JobCancels.set, jid).isNull, "the first beat after keeps it")
        XCTAssertTrue(steering.cancelsExist(shard: 0))
        try steering.beat(connection, shard: 0, executions: [], now: Clock.now())
        XCTAssertTrue(try redis.command("ZSCORE", JobCancels.set, jid).isNull, "the second beat removes it")
        XCTAssertFalse(steering.cancelsExist(shard: 0))
        XCTAssertEqual(try redis.int("EXISTS", JobCancels.markKey(jid: jid)), 1)

        let other = "settledmark0000000000002"
        try redis.command("ZADD", JobCancels.set, Clock.now() + 3600, other)
        steering.noteSettled(jid: other, shard: 0)
        try steering.beat(connection, shard: 0, executions: [], now: Clock.now())
        let broken = try redis.connection()
        let id = try XCTUnwrap(try broken.command("CLIENT", "ID").integer)
        try redis.command("CLIENT", "KILL", "ID", id)  // the server closed it: the beat fails
        XCTAssertThrowsError(try steering.beat(broken, shard: 0, executions: [], now: Clock.now()))
        XCTAssertFalse(try redis.command("ZSCORE", JobCancels.set, other).isNull)
        try steering.beat(connection, shard: 0, executions: [], now: Clock.now())
        XCTAssertTrue(try redis.command("ZSCORE", JobCancels.set, other).isNull, "kept for the beat after the failed one")
    }

    /// The fetch-time byte search for jids: every `"jid"` key's string value (spaces allowed), nested ones too (a
    /// superset: the payload is parsed to confirm a jid found marked); nil when unsure (none, or an escape).
    func testJidCandidates() {
        func candidates(_ text: String) -> [String]? { RunSteering.jidCandidates(Array(text.utf8)) }
        XCTAssertEqual(candidates(#"{"class":"A","args":[{"jid":"inner"}],"jid":"outer"}"#), ["inner", "outer"])
        XCTAssertEqual(candidates(#"{"jid" : "spaced", "args":["jid", "x\"jid\":\"no"]}"#), ["spaced"])
        XCTAssertNil(candidates(#"{"class":"A","args":[]}"#))
        XCTAssertNil(candidates(#"{"jid":"a\u0062c"}"#))
        XCTAssertNil(candidates(#"{"jid":"unterminated"#))
    }
}
