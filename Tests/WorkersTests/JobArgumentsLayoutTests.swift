import Foundation
import WorkersQueue
@testable import Workers
import XCTest

/// The typed contract's wire form: what `JobArguments.sidekiqArgs()` writes is what the registry's decoding reads,
/// in both layouts, and values the encoder or the layout cannot carry are refused at enqueue, not at run time.
final class JobArgumentsLayoutTests: XCTestCase {
    struct Welcome: JobArguments, Equatable {
        static let className = "Welcome"
        let userID: Int64
        let locale: String
        enum CodingKeys: String, CodingKey { case userID = "user_id", locale }
    }

    struct Pair: JobArguments, Equatable {
        static let className = "Pair"
        static let layout = JobArgumentsLayout.positional
        let name: String
        let count: Int
        init(name: String, count: Int) { (self.name, self.count) = (name, count) }
        init(from decoder: any Decoder) throws {
            var container = try decoder.unkeyedContainer()
            name = try container.decode(String.self)
            count = try container.decode(Int.self)
        }
        func encode(to encoder: any Encoder) throws {
            var container = encoder.unkeyedContainer()
            try container.encode(name)
            try container.encode(count)
        }
    }

    struct Ratio: JobArguments { static let className = "Ratio"; let value: Double }

    func testSingleHashArgumentsTravelAsOneObjectAndDecodeBack() throws {
        let arguments = Welcome(userID: 9_007_199_254_740_993, locale: "fr")
        let args = try arguments.sidekiqArgs()
        XCTAssertEqual(args, [.object(["locale": "fr", "user_id": .int(9_007_199_254_740_993)])])
        XCTAssertEqual(try ArgumentsDecoding.decode(Welcome.self, from: args, layout: .singleHash), arguments)
        XCTAssertThrowsError(try ArgumentsDecoding.decode(Welcome.self, from: args + args, layout: .singleHash))
    }

    func testPositionalArgumentsTravelAsTheWholeArray() throws {
        let arguments = Pair(name: "a", count: 3)
        let args = try arguments.sidekiqArgs()
        XCTAssertEqual(args, ["a", .int(3)])
        XCTAssertEqual(try ArgumentsDecoding.decode(Pair.self, from: args, layout: .positional), arguments)
    }

    func testNonFiniteNumbersAreRefusedAtEnqueue() {
        XCTAssertThrowsError(try NewJob(Ratio(value: .nan))) { error in
            guard case EnqueueError.invalidArguments = error else { return XCTFail("\(error)") }
        }
    }

    func testTypedNewJobNamesTheClassAndDefaultQueue() throws {
        let job = try NewJob(Welcome(userID: 1, locale: "en"))
        XCTAssertEqual(job.className, "Welcome")
        XCTAssertEqual(job.queue, "default")
        XCTAssertEqual(try NewJob(Welcome(userID: 1, locale: "en"), queue: "mail").queue, "mail")
    }

    // The helpers' `Codable` witnesses are their protocol extensions', not synthesized ones (a synthesized
    // `init(from:)` would want a keyed container, and `encode(to:)` would write `{"value": …}`).
    struct Nothing: NoJobArguments, Equatable { static let className = "Nothing" }
    struct Message: SingleJobArgument, Equatable { static let className = "Message"; let value: String }

    func testArgumentHelpersUseTheirProtocolsCodingNotSynthesis() throws {
        XCTAssertEqual(try Nothing().sidekiqArgs(), [])
        XCTAssertEqual(try ArgumentsDecoding.decode(Nothing.self, from: [], layout: Nothing.layout), Nothing())
        XCTAssertThrowsError(try ArgumentsDecoding.decode(Nothing.self, from: [1], layout: Nothing.layout))
        XCTAssertEqual(try Message(value: "boom").sidekiqArgs(), ["boom"])
        XCTAssertEqual(try ArgumentsDecoding.decode(Message.self, from: ["boom"], layout: Message.layout), Message(value: "boom"))
        XCTAssertThrowsError(try ArgumentsDecoding.decode(Message.self, from: ["a", "b"], layout: Message.layout))
        XCTAssertEqual(try FailJob.Arguments(value: "boom").sidekiqArgs(), ["boom"])
        XCTAssertEqual(try NoopJob.Arguments().sidekiqArgs(), [])
        XCTAssertEqual(try SleepJob.Arguments(milliseconds: 5).sidekiqArgs(), [.int(5)])
        XCTAssertThrowsError(try SleepJob.Arguments(milliseconds: -1))
    }

    /// Noop's arguments are never decoded: any `args` runs (the benchmark's fast path).
    func testIgnoredArgumentsAcceptAnyArgs() throws {
        let registry = JobRegistry.builtins()
        let payload = try JobClient.payload(for: NewJob("Noop", args: [.object(["x": 1]), "y", .double(2.5)]),
                                            jid: "a00000000000000000000001", createdAt: 1, enqueuedAt: 1)
        XCTAssertEqual(try registry.prepare(payload).className, "Noop")
    }

    /// An `IgnoredJobArguments` type is never decoded: the registry prepares its jobs from one value made at
    /// registration (this type's `init(from:)` would refuse every payload).
    struct NeverDecoded: IgnoredJobArguments {
        static let className = "NeverDecoded"
        init() {}
        init(from decoder: any Decoder) throws { throw JobError.badInput("decoded") }
    }
    struct NeverDecodedJob: Job {
        func perform(_ arguments: NeverDecoded, context: JobContext) throws {}
    }

    func testIgnoredArgumentsAreNeverDecoded() throws {
        var registry = JobRegistry()
        registry.register(NeverDecodedJob())
        let payload = try JobClient.payload(for: NewJob("NeverDecoded", args: ["anything", 1]),
                                            jid: "a00000000000000000000002", createdAt: 1, enqueuedAt: 1)
        XCTAssertEqual(try registry.prepare(payload).className, "NeverDecoded")
    }
}
