/// A stand-in module named `Storage`, as another package of an adopter might declare.
public enum StorageStandIn { public static let name = "Storage" }
