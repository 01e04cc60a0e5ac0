/// A stand-in module named `Telemetry`, as another package of an adopter might declare.
public enum TelemetryStandIn { public static let name = "Telemetry" }
