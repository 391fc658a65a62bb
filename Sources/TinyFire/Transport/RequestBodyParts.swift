#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif
#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// An in-memory request body as `Data`, lent to the connection where it already is (no copy).
final class DataBody: BodyBytes {
    let data: Data

    init(_ data: Data) {
        self.data = data
    }

    var count: Int { data.count }

    func withBodyBytes(_ body: (UnsafeRawBufferPointer) -> Void) {
        data.withUnsafeBytes { body($0) }
    }
}

extension BodySegment {
    /// `data` as a memory segment.
    static func bytes(_ data: Data) -> BodySegment { .memory(DataBody(data)) }
}

/// An app's `UploadByteStream` as the core's upload source: its untyped errors become the
/// message the request fails with.
final class UploadStreamSource: UploadSource {
    let stream: any UploadByteStream

    init(_ stream: any UploadByteStream) {
        self.stream = stream
    }

    func read(into buffer: UnsafeMutableRawBufferPointer) throws(UploadSourceError) -> Int {
        do {
            return try stream.read(into: buffer)
        } catch {
            throw UploadSourceError("\(error)")
        }
    }
}

/// A file body (`upload(_ fileURL:)`, `fire-agent request -T`).
package enum RequestBodyFile {
    /// The file at `path` with its current size, as one segment that must keep that size.
    /// - Throws: `.invalidRequest` naming the file when it cannot be read or is not a regular file.
    package static func segment(regularFileAt path: String) throws(TinyFireError) -> BodySegment {
        let size = try regularFileSize(path, purpose: "upload file")
        return .file(path: path, offset: 0, length: size, fileSize: size)
    }

    /// The size of the regular file at `path`.
    /// - Throws: `.invalidRequest` naming the file when it cannot be read or is not a regular file.
    package static func regularFileSize(_ path: String, purpose: String) throws(TinyFireError) -> UInt64 {
        var info = stat()
        guard stat(path, &info) == 0 else {
            throw .invalidRequest(reason: "cannot read the \(purpose) \(path): \(errnoMessage(errno))")
        }
        guard (info.st_mode & S_IFMT) == S_IFREG else {
            throw .invalidRequest(reason: "the \(purpose) \(path) is not a regular file")
        }
        return UInt64(info.st_size)
    }
}
