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
    /// A complete body in its partial file, moved to `destination` once validated.
    case stagedFile(URL, destination: URL)
    case none

    /// The body, for a memory sink.
    var data: Data? {
        // No byte arrived: no data, as Alamofire's (URLSession's) `data` is nil then.
        if case .data(let data) = self, !data.isEmpty { return data }
        return nil
    }

    /// The file, for a file sink.
    var file: URL? {
        if case .file(let url) = self { return url }
        return nil
    }
}

/// A TinyFire sink: where its body ended up, once `finish` succeeded.
protocol OutputSink: ResponseBodySink {
    /// The body (memory), its file, or `.none`.
    var output: SinkOutput { get }
}

/// Collects the body in memory, up to `limit` bytes (decoded).
final class MemorySink: OutputSink {
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

    func finish() throws(SinkError) {}

    var output: SinkOutput { .data(data) }

    func discard() { data = Data() }
}

extension DescriptorSink: OutputSink {
    var output: SinkOutput { .none }
}

extension DiscardSink: OutputSink {
    var output: SinkOutput { .none }
}

/// Writes the body to a partial file (hidden, next to the destination) and renames it into
/// place only when the body is complete and valid, so a failed transfer never leaves a file
/// that looks complete. Memory: none beyond the connection's read buffer.
///
/// A resumable download keeps its partial file when the transfer fails (flushed with fsync
/// first, so the recorded length survives a power cut) and reports how many bytes it holds;
/// a resumed one appends to the partial file of an earlier attempt.
final class AtomicFileSink: OutputSink {
    /// Where the partial file comes from.
    enum Partial {
        /// A new hidden file beside the destination.
        case new
        /// An earlier attempt's file, continued from `offset` (truncated there first).
        case append(path: String, offset: UInt64)
        /// An earlier attempt's file, emptied (the server sent the whole body again).
        case restart(path: String)
    }

    private let destination: URL
    /// The partial file's path.
    let partialPath: String
    private var fd: Int32
    private var finished = false
    private(set) var output = SinkOutput.none
    /// Bytes in the partial file.
    private(set) var bytesOnDisk: UInt64
    /// Keep the partial file when the transfer fails (called with its path and length), or
    /// nil to remove it.
    private let keepPartial: ((String, UInt64) -> Void)?

    /// Opens the partial file.
    /// - Parameters:
    ///   - destination: the final file.
    ///   - createIntermediateDirectories: create missing parent directories first.
    ///   - replaceExisting: replace a file already at `destination`; otherwise it is an error.
    ///   - partial: a new partial file, or an earlier one to continue or restart.
    ///   - keepPartial: called with the partial file's path and length when a failed transfer
    ///     keeps it; nil removes it on failure.
    init(
        destination: URL, createIntermediateDirectories: Bool, replaceExisting: Bool, partial: Partial = .new,
        keepPartial: ((String, UInt64) -> Void)? = nil
    ) throws(SinkError) {
        self.destination = destination
        self.keepPartial = keepPartial
        let path = destination.path(percentEncoded: false)
        let directory = PathParts(path: path).directory
        let name = PathParts(path: path).name
        if createIntermediateDirectories && !directory.isEmpty {
            do {
                try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            } catch {
                let code = ((error as? CocoaError)?.underlying as? POSIXError)?.code.rawValue ?? EIO
                throw .destinationUnusable(path: directory, code: code, message: "cannot create directory: \(error)")
            }
        }
        var continuing: String?
        switch partial {
        case .append(let partialPath, _), .restart(let partialPath): continuing = partialPath
        case .new: break
        }
        if !replaceExisting && access(path, F_OK) == 0 && continuing != path {
            throw .destinationUnusable(path: path, code: EEXIST, message: "file exists (use .removePreviousFile to replace it)")
        }
        switch partial {
        case .new:
            var template = Array(((directory.isEmpty ? "" : directory + "/") + "." + name + ".tinyfire-XXXXXX").utf8CString)
            let created = template.withUnsafeMutableBufferPointer { tinyfire_mkstemp_cloexec($0.baseAddress!) }
            guard created >= 0 else {
                let code = errno
                throw .destinationUnusable(path: path, code: code, message: "cannot create temporary file: \(errnoMessage(code))")
            }
            fd = created
            partialPath = String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            // mkstemp made it 0600: it stays private until it is complete (commitStagedFile).
            bytesOnDisk = 0
        case .append(let existing, let offset):
            fd = Glibc.open(existing, O_WRONLY | O_CLOEXEC)
            guard fd >= 0 else {
                if errno == ENOENT { throw .resumeRejected("the partial file \(existing) is gone") }
                throw .writeFailed(path: existing, message: "cannot open partial file: \(errnoMessage(errno))")
            }
            partialPath = existing
            bytesOnDisk = offset
            var info = stat()
            guard fstat(fd, &info) == 0, UInt64(info.st_size) >= offset else {
                closeRefused()
                throw .resumeRejected("the partial file \(existing) is shorter than the \(offset) bytes recorded")
            }
            guard ftruncate(fd, off_t(offset)) == 0, lseek(fd, 0, SEEK_END) >= 0 else {
                let message = errnoMessage(errno)
                closeRefused()
                throw .writeFailed(path: existing, message: message)
            }
        case .restart(let existing):
            fd = Glibc.open(existing, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
            guard fd >= 0 else { throw .writeFailed(path: existing, message: "cannot open partial file: \(errnoMessage(errno))") }
            partialPath = existing
            bytesOnDisk = 0
        }
        // Held while this process writes: a later process's sweep of abandoned partial files
        // (removeAbandonedPartials) never removes a live one. Released by close, or by death.
        _ = flock(fd, LOCK_EX | LOCK_NB)
    }

    deinit {
        if !finished { discard() }
    }

    /// How long an unlocked partial file of a default-location download must have been
    /// untouched before a later process removes it as abandoned: 24 hours. (Resume data that
    /// must outlive a restart should name its own destination, not the temporary directory.)
    static let abandonedPartialAge: Duration = .seconds(24 * 3600)

    /// Removes the partial files (`.TinyFire_*.tmp.tinyfire-*`) that downloads without a
    /// destination left in `directory` when their process died: those no process holds locked
    /// and that have not changed for `age`.
    /// - Returns: how many were removed.
    @discardableResult
    static func removeAbandonedPartials(in directory: String, olderThan age: Duration = abandonedPartialAge) -> Int {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return 0 }
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        let cutoff = Int64(now.tv_sec) - Int64(clamping: age.components.seconds)
        var removed = 0
        for name in names where name.hasPrefix(".TinyFire_") && name.contains(".tmp.tinyfire-") {
            let path = directory + "/" + name
            let fd = Glibc.open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
            guard fd >= 0 else { continue }
            defer { Glibc.close(fd) }
            var info = stat()
            guard fstat(fd, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG, Int64(info.st_mtim.tv_sec) < cutoff,
                flock(fd, LOCK_EX | LOCK_NB) == 0
            else { continue }
            if unlink(path) == 0 { removed += 1 }
        }
        return removed
    }

    /// The sweep of the default temporary directory, once per process (on its first download
    /// without a destination).
    static let sweepDefaultTemporaryDirectoryOnce: Void = {
        removeAbandonedPartials(in: FileManager.default.temporaryDirectory.path(percentEncoded: false))
    }()

    /// An initializer that fails after opening the file closes it here, once: the instance is
    /// already whole, so `deinit` runs next and must find nothing left to close or remove (the
    /// descriptor's number may belong to another file by then).
    private func closeRefused() {
        Glibc.close(fd)
        fd = -1
        finished = true
    }

    func write(_ bytes: UnsafeRawBufferPointer) throws(SinkError) {
        try writeAll(fd, bytes, name: partialPath)
        bytesOnDisk += UInt64(bytes.count)
    }

    /// Closes the partial file; the request moves it into place once validated
    /// (`commitStagedFile`).
    func finish() throws(SinkError) {
        finished = true
        let closed = Glibc.close(fd)
        fd = -1  // closed even when close reports an error: never close this number again
        guard closed == 0 else {
            let message = errnoMessage(errno)
            unlink(partialPath)
            throw .writeFailed(path: partialPath, message: message)
        }
        output = .stagedFile(URL(filePath: partialPath), destination: destination)
    }

    func discard() {
        guard !finished else { return }  // finish() already renamed or removed the file
        finished = true
        if let keepPartial, bytesOnDisk > 0 {
            fsync(fd)
            Glibc.close(fd)
            fd = -1
            keepPartial(partialPath, bytesOnDisk)
            return
        }
        Glibc.close(fd)
        fd = -1
        unlink(partialPath)
    }
}

/// Moves a validated body into place: a rename (atomic: the destination is either the old
/// file or the complete new one), or a copy when the partial file is on another file system.
/// The staged file is gone afterwards, whatever happened.
///
/// The partial file was private (0600) while incomplete; the finished file gets the mode a
/// newly created file gets, `0666 & ~umask`, as curl's and every shell redirection's do.
func commitStagedFile(_ staged: URL, to destination: URL) throws(SinkError) {
    let from = staged.path(percentEncoded: false)
    let to = destination.path(percentEncoded: false)
    chmod(from, newFileMode())
    guard from != to else { return }
    guard rename(from, to) != 0 else { return }
    let code = errno
    defer { unlink(from) }
    if code == EXDEV, copyFile(from: from, to: to) { return }
    throw .destinationUnusable(path: to, code: code, message: "cannot move the download into place: \(errnoMessage(code))")
}

/// Copies a file through one 64 KiB buffer (a rename across file systems).
private func copyFile(from source: String, to target: String) -> Bool {
    let input = Glibc.open(source, O_RDONLY | O_CLOEXEC)
    guard input >= 0 else { return false }
    defer { Glibc.close(input) }
    let output = Glibc.open(target, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, newFileMode())
    guard output >= 0 else { return false }
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 16)
    defer { buffer.deallocate() }
    while true {
        let n = Glibc.read(input, buffer.baseAddress, buffer.count)
        if n < 0 && errno == EINTR { continue }
        if n <= 0 {
            let ok = n == 0 && Glibc.close(output) == 0
            if !ok { unlink(target) }
            return ok
        }
        do {
            try writeAll(output, UnsafeRawBufferPointer(rebasing: buffer[0..<n]), name: target)
        } catch {
            Glibc.close(output)
            unlink(target)
            return false
        }
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

/// `0666 & ~umask`: the mode of a newly created file. The umask is read from
/// /proc/self/status (Linux 4.7+) because umask(2) can only be read by setting it, which would
/// race with other threads creating files; 022 when it cannot be read.
func newFileMode() -> mode_t {
    var mask: mode_t = 0o022
    let fd = Glibc.open("/proc/self/status", O_RDONLY | O_CLOEXEC)
    if fd >= 0 {
        defer { Glibc.close(fd) }
        var buffer = [UInt8](repeating: 0, count: 4096)
        let n = Glibc.read(fd, &buffer, buffer.count)
        if n > 0, let line = String(decoding: buffer[0..<n], as: UTF8.self).split(separator: "\n").first(where: { $0.hasPrefix("Umask:") }),
            let value = mode_t(line.dropFirst(6).trimmingHTTPWhitespace(), radix: 8)
        {
            mask = value
        }
    }
    return 0o666 & ~mask
}
