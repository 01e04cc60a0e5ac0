import WorkersQueue

/// The Redis keys of the Geo jobs: the provider block of `ProviderBlock` and the answers of `GeocodeCache`.
/// Immutable; any thread.
package enum GeoKeys {
    /// STRING: the time (ms) until which `provider` blocks us; absent otherwise.
    package static func blocked(provider: String) -> String { "ratelimit:\(provider):blocked" }
    /// STRING: the probe lease after a block, value the probing caller's token.
    package static func probe(provider: String) -> String { "ratelimit:\(provider):probe" }
    /// STRING (JSON, TTL): one cached answer, `geocode:<provider>:<language>:z<zoom>:<decimals>:<lat>,<lon>`.
    package static func answer(provider: String, language: String, zoom: String, decimals: String, cell: String) -> String {
        "geocode:\(provider):\(language):z\(zoom):\(decimals):\(cell)"
    }

    /// The key patterns above, for the key catalogue (the union: Tests/JobsTests/KeyCatalogue+All.swift).
    package static let catalogue: [KeyPattern] = {
        let provider = [KeyPattern.Part("provider", sample: "nominatim")]
        return [
            KeyPattern("geo-provider-blocked", [.string], owner: "geo jobs", parts: provider) { blocked(provider: $0[0]) },
            KeyPattern("geo-provider-probe", [.string], owner: "geo jobs", parts: provider) { probe(provider: $0[0]) },
            KeyPattern("geocode-answer", [.string], owner: "geo jobs",
                       parts: provider + [KeyPattern.Part("language", sample: "en"), KeyPattern.Part("zoom", sample: "14"),
                                          KeyPattern.Part("decimals", sample: "3"), KeyPattern.Part("cell", sample: "48.857,2.352")]) {
                answer(provider: $0[0], language: $0[1], zoom: $0[2], decimals: $0[3], cell: $0[4])
            },
        ]
    }()
}
