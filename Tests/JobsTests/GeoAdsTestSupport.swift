import Foundation
import WorkersHTTP
import WorkersAppJobs
import Logging
import WorkersQueue
import WorkersStorage
import WorkersTestServices
import Workers
import XCTest

/// Rows the tests create.
enum GeoAdsSeed {
    @discardableResult
    static func user(_ pool: PostgresPool, consentGeolocation: Bool? = true) throws -> UUID {
        let id = UUID()
        try pool.withConnection { connection in
            try connection.execute("INSERT INTO users (id, app_id) VALUES ($1, $2)", [id, UUID()])
            if let consentGeolocation {
                try connection.execute("INSERT INTO privacy_settings (user_id, consent_geolocation) VALUES ($1, $2)",
                                       [id, consentGeolocation])
            }
        }
        return id
    }

    static func location(_ pool: PostgresPool, user: UUID?, latitude: Double, longitude: Double, accuracy: Double? = 25,
                         ageDays: Int = 0) throws -> UUID {
        let id = UUID()
        try pool.withConnection { connection in
            try connection.execute("""
                INSERT INTO user_locations (id, user_id, latitude, longitude, accuracy, altitude, source, created_at)
                VALUES ($1, $2, $3, $4, $5, 120, 'gps', now() - make_interval(days => $6::int))
                """, [id, user, latitude, longitude, accuracy, ageDays])
        }
        return id
    }
}
