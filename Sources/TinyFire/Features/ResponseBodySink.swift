import CTinyFireSystem

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

/// Where a finished body ended up.
enum SinkOutput: Sendable {
    case data(Data)
    case file(URL)
    case none

    /// The body, for a memory sink.
    var data: Data? {
        if case .data(let data) = self { return data }
        return nil
    }

    /// The file, for a file sink.
    var file: URL? {
        if case .file(let url) = self { return url }
        return nil
    }
}

/// A sink refused bytes.
enum SinkError: Error {
    case limitExceeded(limit: Int)
    case writeFailed(path: String, message: String)
}

/// Receives a response body as it is decoded. Loop-confined; `write` must not block for long.
protocol ResponseBodySink: AnyObject {
    /// Body bytes, valid only during the call.
    func write(_ bytes: UnsafeRawBufferPointer) throws(SinkError)
    /// The body is complete and valid.
    func finish() throws(SinkError) -> SinkOutput
    /// The transfer failed or was cancelled: drop what was written.
    func discard()
}

/// Collects the body in memory, up to `limit` bytes (decoded).
final class MemorySink: ResponseBodySink {
    private var data = Data()
    private let limit: Int

    init(limit: Int, expectedLength: UInt64?) {
        self.limit = limit
        if let expectedLength, expectedLength <= UInt64(limit) {
            data.reserveCapacity(Int(expectedLength))
        }
    }

    func write(_ bytes: UnsafeRawBufferPointer) throws(SinkError) {
        guard data.count + bytes.count <= limit else { throw .limitExceeded(limit: limit) }
        data.append(contentsOf: bytes)
    }

    func finish() throws(SinkError) -> SinkOutput { .data(data) }

    func discard() { data = Data() }
}

/// Writes the body to a descriptor the caller owns (stdout, a pipe into an installer,
/// /dev/null); nothing is buffered.
final class DescriptorSink: ResponseBodySink {
    private let fd: Int32
    private let name: String

    init(fd: Int32, name: String) {
        self.fd = fd
        self.name = name
    }

    func write(_ bytes: UnsafeRawBufferPointer) throws(SinkError) {
        try writeAll(fd, bytes, name: name)
    }

    func finish() throws(SinkError) -> SinkOutput { .none }

    func discard() {}
}

/// Drops the body (redirect bodies, HEAD-like uses).
final class DiscardSink: ResponseBodySink {
    func write(_ bytes: UnsafeRawBufferPointer) throws(SinkError) {}
    func finish() throws(SinkError) -> SinkOutput { .none }
    func discard() {}
}

/// Writes the body to a hidden temporary file next to the destination and renames it into
/// place only when the body is complete and valid, so a failed transfer never leaves a file
/// that looks complete. Memory: none beyond the connection's read buffer.
final class AtomicFileSink: ResponseBodySink {
    private let destination: URL
    private let temporaryPath: String
    private var fd: Int32
    private var finished = false

    /// Creates the temporary file.
    /// - Parameters:
    ///   - destination: the final file.
    ///   - createIntermediateDirectories: create missing parent directories first.
    ///   - replaceExisting: replace a file already at `destination`; otherwise it is an error.
    init(destination: URL, createIntermediateDirectories: Bool, replaceExisting: Bool) throws(SinkError) {
        self.destination = destination
        let path = destination.path(percentEncoded: false)
        let directory = PathParts(path: path).directory
        let name = PathParts(path: path).name
        if createIntermediateDirectories && !directory.isEmpty {
            do {
                try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            } catch {
                throw .writeFailed(path: directory, message: "cannot create directory: \(error)")
            }
        }
        if !replaceExisting && access(path, F_OK) == 0 {
            throw .writeFailed(path: path, message: "file exists (use .removePreviousFile to replace it)")
        }
        var template = Array(((directory.isEmpty ? "" : directory + "/") + "." + name + ".tinyfire-XXXXXX").utf8CString)
        let created = template.withUnsafeMutableBufferPointer { tinyfire_mkstemp_cloexec($0.baseAddress!) }
        guard created >= 0 else {
            throw .writeFailed(path: path, message: "cannot create temporary file: \(errnoMessage(errno))")
        }
        fd = created
        temporaryPath = String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        fchmod(fd, 0o644)
    }

    deinit {
        if !finished { discard() }
    }

    func write(_ bytes: UnsafeRawBufferPointer) throws(SinkError) {
        try writeAll(fd, bytes, name: temporaryPath)
    }

    func finish() throws(SinkError) -> SinkOutput {
        finished = true
        let path = destination.path(percentEncoded: false)
        let closed = Glibc.close(fd)
        fd = -1  // closed even when close reports an error: never close this number again
        guard closed == 0 else {
            let message = errnoMessage(errno)
            unlink(temporaryPath)
            throw .writeFailed(path: temporaryPath, message: message)
        }
        guard rename(temporaryPath, path) == 0 else {
            let message = errnoMessage(errno)
            unlink(temporaryPath)
            throw .writeFailed(path: path, message: "cannot rename into place: \(message)")
        }
        return .file(destination)
    }

    func discard() {
        guard !finished else { return }  // finish() already renamed or removed the file
        finished = true
        Glibc.close(fd)
        fd = -1
        unlink(temporaryPath)
    }
}

/// Writes every byte, retrying short writes and EINTR, waiting on EAGAIN.
private func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, name: String) throws(SinkError) {
    guard let base = bytes.baseAddress else { return }
    var offset = 0
    while offset < bytes.count {
        let n = Glibc.write(fd, base + offset, bytes.count - offset)
        if n >= 0 {
            offset += n
            continue
        }
        let code = errno
        if code == EINTR { continue }
        if code == EAGAIN {
            var pfd = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
            _ = poll(&pfd, 1, 1000)
            continue
        }
        throw .writeFailed(path: name, message: errnoMessage(code))
    }
}

/// A path split at its last slash, without NSString.
struct PathParts {
    let path: String
    /// The part after the last slash.
    var name: String {
        guard let slash = path.lastIndex(of: "/") else { return path }
        return String(path[path.index(after: slash)...])
    }
    /// The part before the last slash ("" for a bare name, "/" for a file in the root).
    var directory: String {
        guard let slash = path.lastIndex(of: "/") else { return "" }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }
}
