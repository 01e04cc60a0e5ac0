import Foundation
import WorkersQueue
import XCTest

/// A typed enqueue writes its arguments' version (`JobArguments.argumentsVersion`) as `args_version`, which a worker
/// that does not decode it reads to give the job back to a release that announces it (docs/deploy.md, "Rolling
/// deploys"); unversioned arguments write none.
final class TypedEnqueueVersionTests: XCTestCase {
    struct Versioned: JobArguments {
        static let className = "VersionedThing"
        static let argumentsVersion: Int? = 3
        static let decodableArgumentsVersions: ClosedRange<Int>? = 2...3
        let id: Int
    }

    struct Plain: JobArguments {
        static let className = "PlainThing"
        let id: Int
    }

    func testAVersionedTypedEnqueueCarriesItsVersionAndAnUnversionedOneNone() throws {
        XCTAssertEqual(try NewJob(Versioned(id: 1)).extra[NewJob.argumentsVersionField], 3)
        XCTAssertNil(try NewJob(Plain(id: 1)).extra[NewJob.argumentsVersionField])
        XCTAssertEqual(Plain.decodableArgumentsVersions, nil)
        XCTAssertEqual(Versioned.decodableArgumentsVersions, 2...3)
        // The field is the producer's to set, not the runtime's: it passes the enqueue checks.
        XCTAssertFalse(NewJob.runtimeOwnedFields.contains(NewJob.argumentsVersionField))
    }
}
