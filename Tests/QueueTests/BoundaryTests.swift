import WorkersQueue
import WorkersTestServices
import XCTest

/// `Bounded`, the one way an outside number enters the runtime, and its uses at the wire boundary: a payload's
/// run-time counters are refused out of range, a producer cannot set the runtime's own fields, client-settable
/// numbers are clamped (review H1, M1).
final class BoundaryTests: XCTestCase {
    func testConversionsAreTotalAndClamped() {
        let extremes: [Double] = [.nan, .infinity, -.infinity, 1e300, -1e300, Double(Int.max), -Double(Int.max),
                                  9.3e18, 0, -0.0, 0.5, 1e-300]
        for value in extremes {
            let result = Bounded.int(value, in: -10...10)
            XCTAssertTrue((-10...10).contains(result), "\(value) → \(result)")
            XCTAssertTrue((0...Int.max).contains(Bounded.int(value, in: 0...Int.max)))
            XCTAssertTrue((0...3600.0).contains(Bounded.seconds(value, max: 3600)), "\(value)")
            XCTAssertTrue((0...3_600_000).contains(Bounded.milliseconds(value, maxSeconds: 3600)), "\(value)")
        }
        XCTAssertEqual(Bounded.int(Double.nan, in: 3...9), 3)
        XCTAssertEqual(Bounded.int(Double.infinity, in: 3...9), 9)
        XCTAssertEqual(Bounded.int(7.9, in: 3...9), 7)
        XCTAssertEqual(Bounded.int(Int64.min, in: 0...5), 0)
        XCTAssertEqual(Bounded.milliseconds(0.0001, maxSeconds: 1), 1, "rounded up")
        XCTAssertNil(Bounded.epochSeconds(-1e300))
        XCTAssertNil(Bounded.epochSeconds(1e300))
        XCTAssertNil(Bounded.epochSeconds(-1))
        XCTAssertEqual(Bounded.epochSeconds(1_700_000_000.5), 1_700_000_000.5)
    }

    /// `Duration.seconds(_: Double)` traps on NaN and ±∞: a number of seconds from outside becomes a `Duration`
    /// through `Bounded.duration`, clamped as `Bounded.seconds` clamps.
    func testAnOutsideNumberOfSecondsBecomesADurationClampedNeverATrap() {
        for value in [Double.nan, .infinity, -.infinity, 1e300, -1e300, 9.3e18, 0, -0.0, 1e-300] {
            let duration = Bounded.duration(seconds: value, max: 3600)
            XCTAssertTrue((Duration.zero...Duration.seconds(3600)).contains(duration), "\(value) → \(duration)")
        }
        XCTAssertEqual(Bounded.duration(seconds: .infinity, max: 60), .seconds(60))
        XCTAssertEqual(Bounded.duration(seconds: .nan), .zero)
        XCTAssertEqual(Bounded.duration(seconds: 1.5), .milliseconds(1500))
        XCTAssertEqual(Bounded.duration(seconds: 1e300), .seconds(Bounded.maxIntervalSeconds))
        XCTAssertEqual(Duration.seconds(1.25).inSeconds, 1.25)
    }

    func testDecimalTextOfAnyLengthParsesClampedOrNotAtAll() {
        XCTAssertEqual(Bounded.int(parsing: "400000000000000000", in: 1...1_000_000), 1_000_000)
        XCTAssertEqual(Bounded.int(parsing: String(repeating: "9", count: 500), in: 0...Int.max), Int.max)
        XCTAssertEqual(Bounded.int(parsing: "-" + String(repeating: "9", count: 500), in: -5...5), -5)
        XCTAssertEqual(Bounded.int(parsing: "42", in: 0...100), 42)
        XCTAssertEqual(Bounded.int(parsing: "+7", in: 0...100), 7)
        XCTAssertEqual(Bounded.int(parsing: "-3", in: 0...100), 0)
        for text in ["", "-", "4e17", "1.5", " 1", "0x10", "١٢"] {
            XCTAssertNil(Bounded.int(parsing: text, in: 0...100), text)
        }
    }

    func testAPayloadWhoseRunTimeCountersAreOutOfRangeIsRefusedWithItsReason() {
        let refused: [(String, String)] = [
            (#"{"class":"A","args":[],"retry_count":9223372036854775807}"#,
             #"payload "retry_count" is 9223372036854775807, outside -1...1000000"#),
            (#"{"class":"A","args":[],"interrupted_count":-1}"#, #"payload "interrupted_count" is -1, outside 0...1000000"#),
            (#"{"class":"A","args":[],"retry_count":2.5}"#, #"payload "retry_count" must be an integer, got float"#),
            (#"{"class":"A","args":[],"interrupted_count":[1]}"#, #"payload "interrupted_count" must be an integer, got array"#),
            // A limiter's reschedule count: `300 × overrated` trapped at Int64.min.
            (#"{"class":"A","args":[],"overrated":-9223372036854775808}"#, #"payload "overrated" is -9223372036854775808, outside 0...1000000"#),
        ]
        for (raw, reason) in refused {
            XCTAssertThrowsError(try JobPayload(parsing: Array(raw.utf8)), raw) { error in
                XCTAssertEqual("\(error)", reason)
            }
            XCTAssertEqual(UnreadableJob.reason(Array(raw.utf8)), reason)
        }
        for raw in [#"{"class":"A","args":[],"retry_count":1000000,"interrupted_count":0}"#,
                    #"{"class":"A","args":[],"retry_count":null}"#,
                    #"{"class":"A","args":[],"retry_count":-1}"#] {  // Sidekiq's "retry now" after a first failure
            XCTAssertNoThrow(try JobPayload(parsing: Array(raw.utf8)), raw)
        }
    }

    func testAccessorsNeverHandBackANumberTheRuntimeCannotComputeWith() throws {
        // A payload built by hand (not parsed) with every extreme still reads within range.
        let payload = JobPayload(fields: [
            "class": "A", "args": [], "retry_count": .int(.max), "interrupted_count": .int(.min), "retry": .int(.max),
            "enqueued_at": .double(-1e300), "created_at": .double(1e300), "failed_at": .int(.max), "retry_for": .double(1e300),
        ])
        XCTAssertEqual(payload.retryCount, Bounded.maxCount)
        XCTAssertEqual(payload.interruptedCount, 0)
        XCTAssertEqual(payload.retry, .limit(Bounded.maxCount))
        XCTAssertNil(payload.enqueuedAt)
        XCTAssertNil(payload.createdAt)
        XCTAssertNil(payload.failedAt)
        XCTAssertEqual(payload.retryFor, Bounded.maxIntervalSeconds)
        let unique = try XCTUnwrap(UniquePolicy.requested(by: JobPayload(fields: ["class": "A", "args": [], "unique_for": .double(1e300)])))
        XCTAssertEqual(unique.seconds, UniquePolicy.maxSeconds)
    }

    func testAProducerCannotSetTheRuntimesOwnFields() throws {
        for field in NewJob.runtimeOwnedFields.sorted() {
            let job = NewJob("A", extra: [field: .int(9_223_372_036_854_775_807)])
            XCTAssertThrowsError(try JobClient.payload(for: job, createdAt: 1, enqueuedAt: 1), field) { error in
                XCTAssertEqual(error as? EnqueueError, .runtimeField(field))
            }
        }
        for field in ["retry_count", "interrupted_count", "bid", "error_message", "error_class", "failed_at", "retried_at"] {
            XCTAssertTrue(NewJob.runtimeOwnedFields.contains(field), field)
        }
        // Client-settable numbers stay, clamped.
        let payload = try JobClient.payload(for: NewJob("A", extra: ["unique_for": .double(1e300), "tags": ["x"]]),
                                            createdAt: 1, enqueuedAt: 1)
        XCTAssertEqual(payload.fields["unique_for"], .int(Int64(UniquePolicy.maxSeconds)))
        XCTAssertEqual(payload.fields["tags"], ["x"])
        XCTAssertThrowsError(try JobClient.payload(for: NewJob("A", retry: .int(.max)), createdAt: 1, enqueuedAt: 1))
        // Larger than the limit: refused before anything is written (review M10).
        let redis = try TestRedis(database: 28)
        let huge = NewJob("A", args: [.string(String(repeating: "x", count: JobClient.maxPayloadBytes))])
        XCTAssertThrowsError(try redis.client.enqueue(huge)) { error in
            guard case .tooLarge(let bytes, JobClient.maxPayloadBytes)? = error as? EnqueueError else { return XCTFail("\(error)") }
            XCTAssertGreaterThan(bytes, JobClient.maxPayloadBytes)
        }
        XCTAssertThrowsError(try redis.client.enqueue(huge, in: 60))
        XCTAssertThrowsError(try redis.client.enqueueUnique(huge, policy: UniquePolicy(for: .seconds(60))))
        XCTAssertThrowsError(try redis.client.createBatch(NewBatch(jobs: [huge])))
        XCTAssertEqual(try redis.command("KEYS", "*").strings, [], "nothing written")
        // The runtime's own path still sets them (a batch's bid).
        var job = NewJob("A")
        job.runtimeFields["bid"] = "b1"
        let batched = try JobClient.payload(for: job, createdAt: 1, enqueuedAt: 1)
        XCTAssertEqual(batched.fields["bid"], "b1")
    }

    func testCountersFromRedisAreClampedAndTheirSumsSaturateNeverATrap() {
        XCTAssertEqual(Bounded.counter("41"), 41)
        XCTAssertEqual(Bounded.counter("99999999999999999999999"), Bounded.maxCounter)
        XCTAssertEqual(Bounded.counter("-5"), 0)
        XCTAssertEqual(Bounded.counter("4e3"), 0)
        XCTAssertEqual(Bounded.counter(nil), 0)
        XCTAssertEqual(Bounded.sum(Int.max, 1), Int.max)
        XCTAssertEqual(Bounded.sum(Int.min, -1), Int.min)
        XCTAssertEqual(Bounded.sum(2, 3), 5)
    }


    /// The producer's jid is read from bytes that do not parse when it sits at the top level as a plain string; a
    /// `jid` inside `args`, a truncated or escaped value, or control characters give none (the dead entry gets a new
    /// one), whatever else is wrong with the bytes.
    func testAnUnreadablePayloadKeepsItsProducersJidOnlyWhenPlainlyReadable() {
        let cases: [(raw: [UInt8], jid: String?)] = [
            (Array(#"{"class":42,"args":[],"jid":"abc123"}"#.utf8), "abc123"),
            (Array(#"{ "args" : [ {"jid":"inner"} ], "jid" : "outer-1" , "class": "#.utf8), "outer-1"),
            (Array(#"{"args":[{"jid":"inner"}],"class":"X""#.utf8), nil),
            (Array(#"{"note":"a "jid":"fake"","jid":"real"}"#.utf8), "real"),
            (Array(#"{"jid":"esc\u001b[31m"}"#.utf8), nil),
            (Array(#"{"jid":"with space"}"#.utf8), nil),
            (Array(#"{"jid":42,"class":"X"}"#.utf8), nil),
            (Array(#"{"jid":"cut"#.utf8), nil),
            (Array(#"["jid","x"]"#.utf8), nil),
            ([0x7b, 0xff, 0xfe] + Array(#","jid":"after-bad-utf8"}"#.utf8), "after-bad-utf8"),
            (Array("{\"jid\":\"\(String(repeating: "j", count: 129))\"}".utf8), nil),
        ]
        for (raw, jid) in cases {
            XCTAssertEqual(UnreadableJob.producerJid(in: raw), jid, String(decoding: raw, as: UTF8.self))
        }
        let entry = UnreadableJob.deadEntry(raw: Array(#"{"class":42,"jid":"abc123"}"#.utf8), queue: "q", reason: "r")
        XCTAssertEqual(try JobPayload(parsing: entry).jid, "abc123")
    }
}
