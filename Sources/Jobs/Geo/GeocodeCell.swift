import Foundation

/// Coordinates rounded to a grid cell: the unit of caching and what the provider is asked about
/// (so the provider never sees a user's exact position).
public struct GeocodeCell: Sendable, Hashable, CustomStringConvertible {
    public let latitude: Double
    public let longitude: Double
    public let decimals: Int

    public init(latitude: Double, longitude: Double, decimals: Int) {
        let scale = pow(10, Double(decimals))
        // `+ 0` turns -0.0 into 0.0 so that one cell has one key.
        self.latitude = (latitude * scale).rounded() / scale + 0
        self.longitude = (longitude * scale).rounded() / scale + 0
        self.decimals = decimals
    }

    public var latitudeText: String { String(format: "%.\(decimals)f", latitude) }
    public var longitudeText: String { String(format: "%.\(decimals)f", longitude) }

    /// "lat,lon" with the cell's decimals, e.g. "48.86,2.35".
    public var description: String { "\(latitudeText),\(longitudeText)" }
}

/// What a reverse lookup found. All nil is a valid answer ("Unable to geocode": no coverage).
public struct GeocodeResult: Sendable, Equatable, Codable {
    /// ISO 3166-1 alpha-2, upper case (Nominatim sends lower case).
    public var countryCode: String?
    public var country: String?
    public var city: String?

    public init(countryCode: String?, country: String?, city: String?) {
        self.countryCode = countryCode
        self.country = country
        self.city = city
    }

    public static let empty = GeocodeResult(countryCode: nil, country: nil, city: nil)

    enum CodingKeys: String, CodingKey {
        case countryCode = "country_code", country, city
    }
}
