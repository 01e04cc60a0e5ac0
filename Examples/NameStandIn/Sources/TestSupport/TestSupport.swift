/// A stand-in module named `TestSupport`, as another package of an adopter might declare.
public enum TestSupportStandIn { public static let name = "TestSupport" }
