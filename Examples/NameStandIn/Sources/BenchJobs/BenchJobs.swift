/// A stand-in module named `BenchJobs`, as another package of an adopter might declare.
public enum BenchJobsStandIn { public static let name = "BenchJobs" }
