@_exported import WorkersBoundary

// Every module that speaks the wire format reads outside numbers through `Bounded` (Sources/Boundary): re-exported
// here so `import Queue` brings it.

extension Bounded {
    /// A JSON integer that must lie in `range`: nil when absent (or JSON null), an error naming `field` when it is
    /// not an integer or out of range.
    public static func checkedInt(_ value: JSONValue?, field: String, in range: ClosedRange<Int>) -> Result<Int?, BoundaryError> {
        switch value {
        case nil, .null?: return .success(nil)
        case .int(let n)?:
            guard n >= Int64(range.lowerBound), n <= Int64(range.upperBound) else {
                return .failure(BoundaryError(field: field, problem: .outOfRange(String(n), range: range)))
            }
            return .success(Int(n))
        case let other?:
            return .failure(BoundaryError(field: field, problem: .notAnInteger(other.typeName)))
        }
    }

}
