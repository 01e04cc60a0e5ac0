import ArgumentParser
import Foundation

/// Exit codes: 0 success, 1 runtime failure (Redis unreachable, …), 2 bad arguments.
WorkerCtl.mainWithExitCodes()
