import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A filesystem failure with the operation and path (export paths hold ids only, never personal data).
public struct ExportFileError: Error, Sendable, CustomStringConvertible {
    public let operation: String
    public let path: String
    public let errno: Int32
    public var description: String { "\(operation) '\(path)': \(String(cString: strerror(errno)))" }
}

/// The export files in the storage directory: `<export_id>.json`, written atomically with owner-only modes.
///
/// Invariants: the directory is mode 0700 and every file 0600 (created with that mode, never widened);
/// a final file appears only by `rename` of a complete, fsynced temporary file `.<export_id>.<random>.tmp`;
/// `remove` only deletes paths directly inside the directory. Thread-safe: no shared mutable state (distinct
/// exports use distinct names; the same export written twice ends as one complete file, last rename wins).
public struct ExportFileStore: Sendable {
    public let directory: URL

    public init(directory: URL) { self.directory = directory.standardizedFileURL }

    public func finalPath(exportID: UUID) -> String {
        directory.appendingPathComponent("\(exportID.uuidString.lowercased()).json").path
    }

    /// Creates the directory (0700) when missing and tightens its mode when it exists.
    public func prepareDirectory() throws(ExportFileError) {
        let path = directory.path
        if mkdir(path, 0o700) != 0 && errno != EEXIST {
            // Parents missing: create them (0700 too) with Foundation, then retry.
            do {
                try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true,
                                                        attributes: [.posixPermissions: 0o700])
            } catch {
                throw ExportFileError(operation: "mkdir", path: path, errno: errno)
            }
        }
        if chmod(path, 0o700) != 0 { throw ExportFileError(operation: "chmod", path: path, errno: errno) }
    }

    /// Writes the file for `exportID` through `produce` (which writes into the given sink) and returns the
    /// final path and size. The file is complete on disk (fsync of file and directory) when this returns;
    /// on any error the temporary file is removed and no final file is created or replaced.
    public func write(exportID: UUID, _ produce: (BufferedFileSink) throws -> Void) throws -> (path: String, size: Int64) {
        try prepareDirectory()
        let final = finalPath(exportID: exportID)
        let temporary = directory.appendingPathComponent(
            ".\(exportID.uuidString.lowercased()).\(UUID().uuidString.lowercased()).tmp").path
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw ExportFileError(operation: "open", path: temporary, errno: errno) }
        var closed = false
        do {
            let sink = BufferedFileSink(descriptor: fd, path: temporary)
            try produce(sink)
            try sink.flush()
            if fsync(fd) != 0 { throw ExportFileError(operation: "fsync", path: temporary, errno: errno) }
            let size = sink.bytesWritten
            closed = true
            if close(fd) != 0 { throw ExportFileError(operation: "close", path: temporary, errno: errno) }
            if rename(temporary, final) != 0 { throw ExportFileError(operation: "rename", path: final, errno: errno) }
            syncDirectory()
            return (final, size)
        } catch {
            if !closed { close(fd) }
            unlink(temporary)
            throw error
        }
    }

    /// Deletes `path` if it lies directly inside the directory; a missing file is not an error.
    /// Returns whether a file was removed. A path outside the directory is refused (never deleted).
    @discardableResult
    public func remove(path: String) throws(ExportFileError) -> Bool {
        let standardized = URL(fileURLWithPath: path).standardizedFileURL
        guard standardized.deletingLastPathComponent().path == directory.path else {
            throw ExportFileError(operation: "refusing to delete outside the export directory", path: path, errno: EPERM)
        }
        if unlink(standardized.path) == 0 { return true }
        if errno == ENOENT { return false }
        throw ExportFileError(operation: "unlink", path: path, errno: errno)
    }

    /// Files in the directory with their modification times (for the orphan sweep). Missing directory: none.
    public func listing() -> [(name: String, modified: Date)] {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory.path) else { return [] }
        // FileManager's attributes, not `stat()`: Glibc's `struct stat` is declared by several C modules (Glibc,
        // CDispatch, CoreFoundation), and which one MemberImportVisibility names depends on the import graph.
        return names.compactMap { name in
            let path = directory.appendingPathComponent(name).path
            guard let attributes = try? FileManager.default.attributesOfItem(atPath: path),
                  attributes[.type] as? FileAttributeType == .typeRegular,
                  let modified = attributes[.modificationDate] as? Date else { return nil }
            return (name, Date(timeIntervalSince1970: modified.timeIntervalSince1970.rounded(.down)))
        }
    }

    private func syncDirectory() {
        let fd = open(directory.path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return }
        fsync(fd)
        close(fd)
    }
}

/// Writes bytes to a file descriptor through a fixed 64 KiB buffer: memory stays bounded however large
/// the document. Used by one thread for one file.
public final class BufferedFileSink {
    private let descriptor: Int32
    private let path: String
    private var buffer: [UInt8] = []
    private let capacity = 64 * 1024
    public private(set) var bytesWritten: Int64 = 0

    init(descriptor: Int32, path: String) {
        self.descriptor = descriptor
        self.path = path
        buffer.reserveCapacity(capacity)
    }

    public func write(_ text: String) throws {
        var text = text
        try text.withUTF8 { try write(bytes: $0) }
    }

    public func write(bytes: UnsafeBufferPointer<UInt8>) throws {
        if buffer.count + bytes.count > capacity { try flush() }
        if bytes.count >= capacity {
            try writeAll(bytes)
        } else {
            buffer.append(contentsOf: bytes)
        }
    }

    public func flush() throws {
        guard !buffer.isEmpty else { return }
        try buffer.withUnsafeBufferPointer { try writeAll($0) }
        buffer.removeAll(keepingCapacity: true)
    }

    private func writeAll(_ bytes: UnsafeBufferPointer<UInt8>) throws {
        var offset = 0
        while offset < bytes.count {
            let n = Glibc.write(descriptor, bytes.baseAddress! + offset, bytes.count - offset)
            if n < 0 {
                if errno == EINTR { continue }
                throw ExportFileError(operation: "write", path: path, errno: errno)
            }
            offset += n
        }
        bytesWritten += Int64(bytes.count)
    }
}
