/// A stand-in module named `HTTP`, as another package of an adopter might declare.
public enum HTTPStandIn { public static let name = "HTTP" }
