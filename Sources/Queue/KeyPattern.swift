/// One key pattern a key type can build (`Keys`, `LimitKeys`, `CronKeys`, …): its name, the Redis type(s) the key
/// holds, the feature that owns it, its variable parts and the key type's own builder.
///
/// Invariant: the pattern is derived from the builder itself (the builder is called with placeholder parts and the
/// text around them is the literal part of the pattern), so a catalogue entry cannot disagree with the key it names.
/// `matches` and `glob` come from that template. Each module lists its patterns in a catalogue next to its key types
/// (`QueueKeyCatalogue.all`, `CronKeys.catalogue`, …); the union is in the tests (`Tests/JobsTests/KeyCatalogue+All`).
/// Immutable and `Sendable`; any thread.
package struct KeyPattern: Sendable, CustomStringConvertible {
    /// The Redis data types a key can hold (`TYPE` replies).
    package enum RedisType: String, Sendable, CaseIterable {
        case string, hash, list, set, zset
    }

    /// A variable part of a key: what it stands for, a sample value for `example`, and its shape when matched.
    package struct Part: Sendable {
        /// The bytes a part may hold when a key is matched against the pattern.
        package enum Shape: Sendable {
            /// One or more bytes of anything (queue names, jids, class names may hold any byte, colons too).
            case any
            /// `HOST:PID:NONCE` (`Identifiers.processIdentity`): host without colons, decimal pid, hex nonce.
            case identity
            /// `YYYY-MM-DD` (a UTC day).
            case day
        }

        package let name: String
        package let sample: String
        package let shape: Shape

        package init(_ name: String, sample: String, shape: Shape = .any) {
            self.name = name
            self.sample = sample
            self.shape = shape
        }

        package static func identity(_ name: String = "identity") -> Part {
            Part(name, sample: "host:4242:0123456789ab", shape: .identity)
        }
        package static func day(_ name: String = "day") -> Part { Part(name, sample: "2026-12-07", shape: .day) }
    }

    /// A short name (`queue`, `working`, `unique-lock`).
    package let name: String
    /// The types the key may hold (one for most; a limiter instance is a ZSET or a HASH by kind).
    package let types: Set<RedisType>
    /// The feature that owns the key (`queues`, `runtime`, `cron`, …; docs/architecture.md, "Who owns which Redis key").
    package let owner: String
    package let parts: [Part]
    private let builder: @Sendable ([String]) -> String
    /// Literal segments between the parts: `segments.count == parts.count + 1`, in key order; `order[i]` is the
    /// index in `parts` of the i-th part as it appears in the key.
    private let segments: [[UInt8]]
    private let order: [Int]

    /// `build` is the key type's builder, called with one string per part (in `parts` order).
    package init(_ name: String, _ types: Set<RedisType>, owner: String, parts: [Part] = [],
                 build: @escaping @Sendable ([String]) -> String) {
        self.name = name
        self.types = types
        self.owner = owner
        self.parts = parts
        self.builder = build
        (segments, order) = Self.template(parts.count, build)
    }

    /// A key without parts (`queues`, `dead`).
    package init(_ name: String, _ type: RedisType, owner: String, key: String) {
        self.init(name, [type], owner: owner, build: { _ in key })
    }

    /// The key for `values` (one per part), built by the key type.
    package func key(_ values: [String]) -> String { builder(values) }

    /// The key built from the parts' samples.
    package var example: String { key(parts.map(\.sample)) }

    /// The pattern as text: literal segments with `<part>` for each part (`queue:<queue>`).
    package var template: String {
        var text = String(decoding: segments[0], as: UTF8.self)
        for (index, part) in order.enumerated() {
            text += "<" + parts[part].name + ">" + String(decoding: segments[index + 1], as: UTF8.self)
        }
        return text
    }

    /// A `SCAN … MATCH` glob for the pattern (parts as `*`, glob characters of the literal escaped).
    package var glob: String {
        func escaped(_ bytes: [UInt8]) -> String {
            var out = ""
            for character in String(decoding: bytes, as: UTF8.self) {
                if "*?[]\\".contains(character) { out.append("\\") }
                out.append(character)
            }
            return out
        }
        return segments.map(escaped).joined(separator: "*")
    }

    package var description: String {
        "\(template) (\(types.map(\.rawValue).sorted().joined(separator: "|")), \(owner))"
    }

    /// Whether `key` is a key of this pattern: its literal segments in order, each part matching its shape.
    package func matches(_ key: String) -> Bool {
        let bytes = Array(key.utf8)
        guard bytes.starts(with: segments[0]) else { return false }
        return match(bytes, from: segments[0].count, part: 0)
    }

    private func match(_ bytes: [UInt8], from start: Int, part index: Int) -> Bool {
        if index == order.count { return start == bytes.count }
        let next = segments[index + 1], shape = parts[order[index]].shape
        // Each end position of this part where the next literal follows; the last part must reach the end.
        var end = start + 1
        while end <= bytes.count - next.count {
            if bytes[end..<(end + next.count)].elementsEqual(next), Self.fits(bytes[start..<end], shape),
               match(bytes, from: end + next.count, part: index + 1) {
                return true
            }
            end += 1
        }
        return false
    }

    private static func fits(_ bytes: ArraySlice<UInt8>, _ shape: Part.Shape) -> Bool {
        let colon = UInt8(ascii: ":")
        func digits(_ part: some Collection<UInt8>) -> Bool { !part.isEmpty && part.allSatisfy { (0x30...0x39).contains($0) } }
        switch shape {
        case .any:
            return !bytes.isEmpty
        case .day:
            let fields = bytes.split(separator: UInt8(ascii: "-"), omittingEmptySubsequences: false)
            return fields.count == 3 && fields.map(\.count) == [4, 2, 2] && fields.allSatisfy(digits)
        case .identity:
            let fields = bytes.split(separator: colon, omittingEmptySubsequences: false)
            return fields.count == 3 && !fields[0].isEmpty && digits(fields[1]) && !fields[2].isEmpty
                && fields[2].allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }
        }
    }

    /// The builder called with placeholders (`\u{1}` + index + `\u{2}`), cut into literal segments around them.
    /// A builder that drops or repeats a part cannot be matched: its pattern is then its output as a literal
    /// with the parts left out, which the catalogue test (every pattern matches its own example) reports.
    private static func template(_ count: Int, _ build: ([String]) -> String) -> ([[UInt8]], [Int]) {
        let built = Array(build((0..<count).map { "\u{1}\($0)\u{2}" }).utf8)
        var segments: [[UInt8]] = [[]], order: [Int] = []
        var index = 0
        while index < built.count {
            if built[index] == 0x01, let close = built[index...].firstIndex(of: 0x02),
               let part = Int(String(decoding: built[(index + 1)..<close], as: UTF8.self)), part < count {
                order.append(part)
                segments.append([])
                index = close + 1
            } else {
                segments[segments.count - 1].append(built[index])
                index += 1
            }
        }
        return (segments, order)
    }
}

extension Array where Element == KeyPattern {
    /// The first pattern `key` matches, nil for a key no key type builds.
    package func pattern(of key: String) -> KeyPattern? { first { $0.matches(key) } }
}
