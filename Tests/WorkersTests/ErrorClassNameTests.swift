import XCTest

@testable import Workers

/// `error_class` in Sidekiq's records reads like a Ruby class path. (The runner end to end:
/// WorkerRuntimeTests.testFailureIsRetriedWithSidekiqBookkeepingThenDies and the Ruby interop test.)
final class ErrorClassNameTests: XCTestCase {
    private let jobTypes = ["Workers.FailJob": "Fail", "Jobs.ValidateReceiptJob": "ValidateReceiptJob"]

    func testJobTypeBecomesItsSidekiqClassName() {
        XCTAssertEqual(ErrorClassName.rubyStyle("Workers.FailJob.Failure", jobTypes: jobTypes), "Fail::Failure")
        XCTAssertEqual(ErrorClassName.rubyStyle("Jobs.ValidateReceiptJob.Problem.Kind", jobTypes: jobTypes),
                       "ValidateReceiptJob::Problem::Kind")
    }

    func testModulePrefixGenericsAndPrivateDiscriminatorsAreDropped() {
        XCTAssertEqual(ErrorClassName.rubyStyle("Jobs.StoreHTTPError", jobTypes: jobTypes), "StoreHTTPError")
        XCTAssertEqual(ErrorClassName.rubyStyle("Swift.DecodingError", jobTypes: jobTypes), "DecodingError")
        XCTAssertEqual(ErrorClassName.rubyStyle("Jobs.(Parser in _1A2B3C).Problem<Swift.Int, Jobs.Thing>", jobTypes: jobTypes),
                       "Parser::Problem")
        XCTAssertEqual(ErrorClassName.rubyStyle("Jobs.Outer.(unknown context at $5a1b).Local", jobTypes: jobTypes),
                       "Outer::Local")
        XCTAssertEqual(ErrorClassName.rubyStyle("Plain", jobTypes: jobTypes), "Plain")
    }

    func testReflectedNameOfARealError() {
        struct Local: Error {}
        let name = ErrorClassName.of(FailJob.Failure(message: "x"), jobTypes: JobRegistry.builtins().classNamesByType)
        XCTAssertEqual(name, "Fail::Failure")
        XCTAssertFalse(ErrorClassName.of(Local(), jobTypes: [:]).contains("."), ErrorClassName.of(Local(), jobTypes: [:]))
    }
}
