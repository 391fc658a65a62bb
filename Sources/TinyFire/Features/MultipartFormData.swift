import CTinyFireSystem
import Synchronization

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

/// A `multipart/form-data` body (RFC 7578), built as in Alamofire: parts from `Data`, files
/// and streams, each with a `Content-Disposition` and optional `Content-Type`.
///
/// `Session.upload(multipartFormData:…)` encodes it when the request starts. Below
/// `encodingMemoryThreshold` (10 MB by default, as Alamofire) the whole body is built in
/// memory. At or above it, the body is written into a temporary file through one 64 KiB
/// buffer and sent from disk; the file is removed when the request finishes, whether it
/// succeeded, failed or was cancelled. Unlike Alamofire, file parts are not copied into that
/// temporary file: they are sent from their own files, so a 1 GiB capture needs neither 1 GiB
/// of memory nor 1 GiB of free space. Either way the `Content-Length` is known up front.
///
/// Names and file names are escaped as browsers do (`"` → `%22`, CR → `%0D`, LF → `%0A`), so
/// no value can break the part headers.
///
/// Thread-safe; appending after the upload started has no effect on that upload.
public final class MultipartFormData: Sendable {
    /// The size from which `Session.upload(multipartFormData:)` spills to disk: 10 MB.
    public static let encodingMemoryThreshold: UInt64 = 10_000_000

    /// One part's bytes.
    enum PartBody: Sendable {
        case data(Data)
        case file(path: String, size: UInt64)
        case stream(any UploadByteStream, length: UInt64)

        var length: UInt64 {
            switch self {
            case .data(let data): UInt64(data.count)
            case .file(_, let size): size
            case .stream(_, let length): length
            }
        }
    }

    struct Part: Sendable {
        var headers: HTTPHeaders
        var body: PartBody
    }

    private struct State {
        var parts: [Part] = []
        /// The first error met while appending; `encode` and the upload report it (as
        /// Alamofire does).
        var appendError: TinyFireError?
    }

    /// The boundary between parts.
    public let boundary: String
    /// Where the upload's temporary file goes. Default: the process's temporary directory.
    public let temporaryDirectory: URL
    private let state = Mutex(State())

    /// Creates an empty form.
    /// - Parameters:
    ///   - boundary: the boundary; default `tinyfire.boundary.` and 16 random hex digits.
    ///   - temporaryDirectory: where a body above the threshold is spilled; default the
    ///     process's temporary directory (`TMPDIR`, else /tmp).
    public init(boundary: String? = nil, temporaryDirectory: URL? = nil) {
        self.boundary = boundary ?? Self.randomBoundary()
        self.temporaryDirectory = temporaryDirectory ?? FileManager.default.temporaryDirectory
    }

    /// Creates an empty form, as Alamofire's `MultipartFormData(fileManager:boundary:)`.
    /// - Parameters:
    ///   - fileManager: its `temporaryDirectory` is where a large body spills.
    ///   - boundary: the boundary; default a random one.
    public convenience init(fileManager: FileManager, boundary: String? = nil) {
        self.init(boundary: boundary, temporaryDirectory: fileManager.temporaryDirectory)
    }

    /// `multipart/form-data; boundary=…`, the request's `Content-Type`.
    public var contentType: String { "multipart/form-data; boundary=\(boundary)" }

    /// The encoded body's length in bytes (boundaries and part headers included).
    public var contentLength: UInt64 {
        let parts = state.withLock { $0.parts }
        return layout(of: parts).reduce(0) { $0 + $1.length }
    }

    static func randomBoundary() -> String {
        var generator = SystemRandomNumberGenerator()
        let value: UInt64 = generator.next()
        let hex = String(value, radix: 16)
        return "tinyfire.boundary." + String(repeating: "0", count: 16 - hex.count) + hex
    }

    // MARK: - Appending

    /// Appends a part from memory.
    /// - Parameters:
    ///   - data: the part's bytes.
    ///   - name: the form field name.
    ///   - fileName: a file name to announce, if any.
    ///   - mimeType: the part's `Content-Type`, if any.
    public func append(_ data: Data, withName name: String, fileName: String? = nil, mimeType: String? = nil) {
        let headers = Self.contentHeaders(name: name, fileName: fileName, mimeType: mimeType)
        state.withLock { $0.parts.append(Part(headers: headers, body: .data(data))) }
    }

    /// Appends a file part named after the file, with a MIME type from its extension
    /// (`application/octet-stream` when unknown).
    /// - Parameters:
    ///   - fileURL: a regular file; read when the body is encoded or sent.
    ///   - name: the form field name.
    public func append(_ fileURL: URL, withName name: String) {
        let fileName = PathParts(path: fileURL.path(percentEncoded: false)).name
        // A URL that is not a file's is the next call's to refuse, as `.bodyPartURLInvalid`.
        guard !fileName.isEmpty else {
            record(.multipartEncodingFailed(reason: .bodyPartFilenameInvalid(in: fileURL)))
            return
        }
        append(fileURL, withName: name, fileName: fileName, mimeType: MIMEType.forPathExtension(fileURL.pathExtension))
    }

    /// Appends a file part.
    /// - Parameters:
    ///   - fileURL: a regular file; read when the body is encoded or sent.
    ///   - name: the form field name.
    ///   - fileName: the file name to announce.
    ///   - mimeType: the part's `Content-Type`.
    public func append(_ fileURL: URL, withName name: String, fileName: String, mimeType: String) {
        guard fileURL.isFileURL else {
            record(.multipartEncodingFailed(reason: .bodyPartURLInvalid(url: fileURL)))
            return
        }
        let path = fileURL.path(percentEncoded: false)
        var info = stat()
        guard stat(path, &info) == 0 else {
            let error = fileSystemError(errno, path: path, writing: false)
            record(.multipartEncodingFailed(reason: .bodyPartFileNotReachableWithError(atURL: fileURL, error: error)))
            return
        }
        guard (info.st_mode & S_IFMT) != S_IFDIR else {
            record(.multipartEncodingFailed(reason: .bodyPartFileIsDirectory(at: fileURL)))
            return
        }
        guard (info.st_mode & S_IFMT) == S_IFREG else {
            record(.multipartEncodingFailed(reason: .bodyPartFileSizeNotAvailable(at: fileURL)))
            return
        }
        let headers = Self.contentHeaders(name: name, fileName: fileName, mimeType: mimeType)
        state.withLock { $0.parts.append(Part(headers: headers, body: .file(path: path, size: UInt64(info.st_size)))) }
    }

    /// Appends a part read from a stream, which must yield exactly `length` bytes.
    /// - Parameters:
    ///   - stream: the source; read once, when the body is encoded.
    ///   - length: its length in bytes.
    ///   - name: the form field name.
    ///   - fileName: the file name to announce.
    ///   - mimeType: the part's `Content-Type`.
    public func append(
        _ stream: any UploadByteStream, withLength length: UInt64, name: String, fileName: String, mimeType: String
    ) {
        append(stream, withLength: length, headers: Self.contentHeaders(name: name, fileName: fileName, mimeType: mimeType))
    }

    /// Appends a part read from a stream, with headers of your own.
    /// - Parameters:
    ///   - stream: the source; read once, when the body is encoded; must yield exactly
    ///     `length` bytes.
    ///   - length: its length in bytes.
    ///   - headers: the part's headers (`Content-Disposition` at least).
    public func append(_ stream: any UploadByteStream, withLength length: UInt64, headers: HTTPHeaders) {
        state.withLock { $0.parts.append(Part(headers: headers, body: .stream(stream, length: length))) }
    }

    private func record(_ error: TinyFireError) {
        state.withLock { state in
            if state.appendError == nil { state.appendError = error }
        }
    }

    /// `Content-Disposition` (escaped) and `Content-Type` headers for a part.
    static func contentHeaders(name: String, fileName: String?, mimeType: String?) -> HTTPHeaders {
        var disposition = "form-data; name=\"\(escape(name))\""
        if let fileName { disposition += "; filename=\"\(escape(fileName))\"" }
        var headers: HTTPHeaders = ["Content-Disposition": disposition]
        if let mimeType { headers.add(name: "Content-Type", value: mimeType) }
        return headers
    }

    /// Escapes a name as the HTML standard's multipart/form-data encoder does.
    static func escape(_ value: String) -> String { FormPartNames.escape(value) }

    // MARK: - Layout

    /// A piece of the encoded body, in order.
    enum Piece {
        case text([UInt8])
        case body(PartBody)

        var length: UInt64 {
            switch self {
            case .text(let bytes): UInt64(bytes.count)
            case .body(let body): body.length
            }
        }
    }

    /// The encoded body as pieces: boundaries and part headers as text, part bodies as given.
    func layout(of parts: [Part]) -> [Piece] {
        var pieces: [Piece] = []
        for (i, part) in parts.enumerated() {
            var text = i == 0 ? "--\(boundary)\r\n" : "\r\n--\(boundary)\r\n"
            for header in part.headers { text += "\(header.name): \(header.value)\r\n" }
            text += "\r\n"
            pieces.append(.text(Array(text.utf8)))
            pieces.append(.body(part.body))
        }
        pieces.append(.text(Array((parts.isEmpty ? "--\(boundary)--\r\n" : "\r\n--\(boundary)--\r\n").utf8)))
        return pieces
    }

    private func checkedParts() throws(TinyFireError) -> [Part] {
        let (parts, error) = state.withLock { ($0.parts, $0.appendError) }
        if let error { throw error }
        for part in parts {
            for header in part.headers where header.value.contains(where: { $0 == "\r" || $0 == "\n" }) {
                throw .multipartEncodingFailed(reason: .bodyPartHeaderInvalid(name: header.name))
            }
        }
        return parts
    }

    // MARK: - Encoding

    /// The whole body in memory (Alamofire's `encode()`), files and streams read in.
    /// - Returns: the encoded body.
    /// - Throws: `.multipartEncodingFailed` naming the part that could not be read.
    public func encode() throws(TinyFireError) -> Data {
        var out = Data()
        for piece in layout(of: try checkedParts()) {
            try write(piece) { bytes throws(TinyFireError) in out.append(contentsOf: bytes) }
        }
        return out
    }

    /// Writes the whole body to a new file (Alamofire's `writeEncodedData(to:)`), through one
    /// 64 KiB buffer.
    /// - Parameter fileURL: a file that must not exist yet.
    /// - Throws: `.multipartEncodingFailed` when the file exists or a part cannot be read or
    ///   written; a partly written file is removed.
    public func writeEncodedData(to fileURL: URL) throws(TinyFireError) {
        guard fileURL.isFileURL else { throw .multipartEncodingFailed(reason: .outputStreamURLInvalid(url: fileURL)) }
        let path = fileURL.path(percentEncoded: false)
        let fd = Glibc.open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
        guard fd >= 0 else {
            if errno == EEXIST { throw .multipartEncodingFailed(reason: .outputStreamFileAlreadyExists(at: fileURL)) }
            throw .multipartEncodingFailed(reason: .outputFileWriteFailed(path: path, message: errnoMessage(errno)))
        }
        let writer = SpillWriter(fd: fd, path: path)
        do throws(TinyFireError) {
            for piece in layout(of: try checkedParts()) {
                try write(piece) { bytes throws(TinyFireError) in try writer.write(bytes) }
            }
            try writer.close()
        } catch {
            writer.abandon()
            unlink(path)
            throw error
        }
    }

    /// The body as the upload sends it. Below `threshold` one piece of memory; at or above it
    /// boundaries, headers, data and stream parts go into a temporary file (through one 64 KiB
    /// buffer) and file parts stay in their own files.
    func encodeForUpload(threshold: UInt64) throws(TinyFireError) -> EncodedBody {
        let parts = try checkedParts()
        let pieces = layout(of: parts)
        let length = pieces.reduce(0) { $0 + $1.length }
        if length < threshold {
            return EncodedBody(segments: [.bytes(try encode())], temporaryFile: nil)
        }
        let directory = temporaryDirectory.path(percentEncoded: false)
        var template = Array((directory + "/TinyFire-multipart-XXXXXX").utf8CString)
        let fd = template.withUnsafeMutableBufferPointer { tinyfire_mkstemp_cloexec($0.baseAddress!) }
        guard fd >= 0 else {
            throw .multipartEncodingFailed(reason: .outputFileWriteFailed(path: directory, message: errnoMessage(errno)))
        }
        let path = String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        let writer = SpillWriter(fd: fd, path: path)
        var segments: [BodySegment] = []
        var runStart: UInt64 = 0
        func closeRun() {
            if writer.offset > runStart {
                segments.append(.file(path: path, offset: runStart, length: writer.offset - runStart, fileSize: nil))
            }
            runStart = writer.offset
        }
        do throws(TinyFireError) {
            for piece in pieces {
                if case .body(.file(let filePath, let size)) = piece {
                    closeRun()
                    segments.append(.file(path: filePath, offset: 0, length: size, fileSize: size))
                } else {
                    try write(piece) { bytes throws(TinyFireError) in try writer.write(bytes) }
                }
            }
            closeRun()
            try writer.close()
        } catch {
            writer.abandon()
            unlink(path)
            throw error
        }
        return EncodedBody(segments: segments, temporaryFile: URL(filePath: path))
    }

    /// Hands `piece`'s bytes to `sink` in pieces of at most 64 KiB (files and streams through
    /// one buffer).
    private func write(
        _ piece: Piece, to sink: (UnsafeRawBufferPointer) throws(TinyFireError) -> Void
    ) throws(TinyFireError) {
        switch piece {
        case .text(let bytes):
            try bytes.withUnsafeBytes { raw in Result { () throws(TinyFireError) in try sink(raw) } }.get()
        case .body(.data(let data)):
            try data.withUnsafeBytes { raw in Result { () throws(TinyFireError) in try sink(raw) } }.get()
        case .body(.file(let path, let size)):
            let fd = Glibc.open(path, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else {
                throw .multipartEncodingFailed(
                    reason: .bodyPartFileNotReachableWithError(
                        atURL: URL(filePath: path), error: fileSystemError(errno, path: path, writing: false)))
            }
            defer { Glibc.close(fd) }
            try copy(expected: size, name: path, to: sink) { buffer throws(TinyFireError) -> Int in
                while true {
                    let n = Glibc.read(fd, buffer.baseAddress, buffer.count)
                    if n >= 0 { return n }
                    if errno != EINTR {
                        throw .multipartEncodingFailed(reason: .inputStreamReadFailed(message: "\(path): \(errnoMessage(errno))"))
                    }
                }
            }
        case .body(.stream(let stream, let length)):
            try copy(expected: length, name: "stream part", to: sink) { buffer throws(TinyFireError) -> Int in
                do {
                    return try stream.read(into: buffer)
                } catch {
                    throw .multipartEncodingFailed(reason: .inputStreamReadFailed(message: "\(error)"))
                }
            }
        }
    }

    /// Copies exactly `expected` bytes from `read` to `sink` through one 64 KiB buffer.
    private func copy(
        expected: UInt64, name: String, to sink: (UnsafeRawBufferPointer) throws(TinyFireError) -> Void,
        read: (UnsafeMutableRawBufferPointer) throws(TinyFireError) -> Int
    ) throws(TinyFireError) {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 16)
        defer { buffer.deallocate() }
        var done: UInt64 = 0
        while done < expected {
            let want = Int(min(UInt64(buffer.count), expected - done))
            let n = try read(UnsafeMutableRawBufferPointer(rebasing: buffer[0..<want]))
            guard n > 0, n <= want else {
                throw .multipartEncodingFailed(reason: .bodyPartLengthMismatch(part: name, expected: expected, actual: done))
            }
            try sink(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
            done += UInt64(n)
        }
    }

    /// An encoded upload body: what to send, and the temporary file to remove afterwards.
    struct EncodedBody: Sendable {
        var segments: [BodySegment]
        var temporaryFile: URL?

        func removeTemporaryFile() {
            if let temporaryFile { unlink(temporaryFile.path(percentEncoded: false)) }
        }
    }
}

/// Appends to a new file, counting bytes.
private final class SpillWriter {
    private var fd: Int32
    let path: String
    private(set) var offset: UInt64 = 0

    init(fd: Int32, path: String) {
        self.fd = fd
        self.path = path
    }

    func write(_ bytes: UnsafeRawBufferPointer) throws(TinyFireError) {
        guard let base = bytes.baseAddress else { return }
        var done = 0
        while done < bytes.count {
            let n = Glibc.write(fd, base + done, bytes.count - done)
            if n > 0 {
                done += n
            } else if n < 0 && errno == EINTR {
                continue
            } else {
                throw .multipartEncodingFailed(reason: .outputFileWriteFailed(path: path, message: errnoMessage(errno)))
            }
        }
        offset += UInt64(bytes.count)
    }

    /// Closes the file; the descriptor is gone afterwards even when close reports an error
    /// (Linux frees it either way), so `abandon` after a failed close closes nothing twice.
    func close() throws(TinyFireError) {
        guard fd >= 0 else { return }
        let status = Glibc.close(fd)
        let code = errno
        fd = -1
        guard status == 0 else {
            throw .multipartEncodingFailed(reason: .outputFileWriteFailed(path: path, message: errnoMessage(code)))
        }
    }

    func abandon() {
        if fd >= 0 { Glibc.close(fd) }
        fd = -1
    }
}

/// MIME types for common file extensions (multipart file parts, `fire-agent request -F`).
public enum MIMEType {
    /// The MIME type for a file extension (case-insensitive, without the dot);
    /// `application/octet-stream` when unknown.
    /// - Parameter pathExtension: `jpg`, `json`, …
    /// - Returns: the type.
    public static func forPathExtension(_ pathExtension: String) -> String {
        FormPartNames.mimeType(forExtension: pathExtension)
    }
}
