/// A stand-in module named `WebDashboard`, as another package of an adopter might declare.
public enum WebDashboardStandIn { public static let name = "WebDashboard" }
