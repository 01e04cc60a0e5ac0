/// An ordered list of header fields with case-insensitive lookup.
///
/// Invariant: names and values are stored as given (no folding, no trimming beyond what the parser did);
/// lookups compare names ASCII-case-insensitively. Duplicate names are kept (e.g. several `Set-Cookie`).
public struct HTTPHeaders: Sendable, Equatable, Sequence, ExpressibleByDictionaryLiteral, CustomStringConvertible {
    public struct Field: Sendable, Equatable {
        public var name: String
        public var value: String
        public init(name: String, value: String) { self.name = name; self.value = value }
    }

    public private(set) var fields: [Field] = []

    public init() {}
    public init(_ pairs: [(String, String)]) { for (n, v) in pairs { add(name: n, value: v) } }
    public init(dictionaryLiteral elements: (String, String)...) { self.init(elements) }

    /// Appends a field (keeps existing ones with the same name).
    public mutating func add(name: String, value: String) { fields.append(Field(name: name, value: value)) }

    /// Replaces every field named `name` with one field (or removes them when `value` is nil).
    public mutating func set(_ name: String, _ value: String?) {
        fields.removeAll { Self.same($0.name, name) }
        if let value { add(name: name, value: value) }
    }

    /// The first value for `name` (case-insensitive), or nil. Setting replaces all fields of that name.
    public subscript(name: String) -> String? {
        get { fields.first { Self.same($0.name, name) }?.value }
        set { set(name, newValue) }
    }

    /// Every value for `name`, in order.
    public func values(for name: String) -> [String] { fields.filter { Self.same($0.name, name) }.map(\.value) }

    public func contains(_ name: String) -> Bool { fields.contains { Self.same($0.name, name) } }

    public var count: Int { fields.count }
    public func makeIterator() -> IndexingIterator<[Field]> { fields.makeIterator() }

    /// Header names and values, with the values of `Authorization`, `Cookie`, `Proxy-Authorization` elided.
    public var description: String {
        fields.map { f in
            let secret = ["authorization", "proxy-authorization", "cookie", "set-cookie"].contains(f.name.lowercased())
            return "\(f.name): \(secret ? "<redacted>" : f.value)"
        }.joined(separator: "\n")
    }

    static func same(_ a: String, _ b: String) -> Bool {
        a.utf8.count == b.utf8.count && a.lowercased() == b.lowercased()
    }
}

extension String {
    /// True when the text holds CR, LF or NUL (checked per scalar: "\r\n" is one `Character`).
    /// `package`: Mail's `EmailMessage` refuses header injection with it too.
    package var containsLineBreakOrNUL: Bool { unicodeScalars.contains { $0 == "\r" || $0 == "\n" || $0 == "\0" } }
}
