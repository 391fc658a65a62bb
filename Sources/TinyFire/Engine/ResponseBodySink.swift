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
    private let file: PartialFileSink
    /// The partial file's path.
    var partialPath: String { file.path }
    private var finished = false
    private(set) var output = SinkOutput.none
    /// Bytes in the partial file.
    var bytesOnDisk: UInt64 { file.bytesOnDisk }
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
        if createIntermediateDirectories && !directory.isEmpty {
            do {
                try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            } catch {
                let code = ((error as? CocoaError)?.underlying as? POSIXError)?.code.rawValue ?? EIO
                throw .destinationUnusable(path: directory, code: code, message: "cannot create directory: \(error)")
            }
        }
        let placement: PartialFileSink.Placement
        var continuing: String?
        switch partial {
        case .new: placement = .besides(destination: path)
        case .append(let existing, let offset):
            placement = .append(path: existing, offset: offset)
            continuing = existing
        case .restart(let existing):
            placement = .empty(path: existing)
            continuing = existing
        }
        if !replaceExisting && access(path, F_OK) == 0 && continuing != path {
            throw .destinationUnusable(path: path, code: EEXIST, message: "file exists (use .removePreviousFile to replace it)")
        }
        // A new one is 0600 (mkstemp): it stays private until it is complete (commitStagedFile).
        file = try PartialFileSink(placement)
        // Held while this process writes: a later process's sweep of abandoned partial files
        // (removeAbandonedPartials) never removes a live one. Released by close, or by death.
        _ = flock(file.descriptor, LOCK_EX | LOCK_NB)
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

    func write(_ bytes: UnsafeRawBufferPointer) throws(SinkError) {
        try file.write(bytes)
    }

    /// Closes the partial file; the request moves it into place once validated
    /// (`commitStagedFile`).
    func finish() throws(SinkError) {
        finished = true
        do throws(SinkError) {
            try file.finish()
        } catch {
            unlink(partialPath)
            throw error
        }
        output = .stagedFile(URL(filePath: partialPath), destination: destination)
    }

    func discard() {
        guard !finished else { return }  // finish() already renamed or removed the file
        finished = true
        if let keepPartial, bytesOnDisk > 0 {
            file.discard()
            keepPartial(partialPath, bytesOnDisk)
            return
        }
        file.remove()
    }
}

/// Moves a validated body into place: a rename (atomic: the destination is either the old
/// file or the complete new one), or a copy when the partial file is on another file system.
/// The staged file is gone afterwards, whatever happened.
///
/// The partial file was private (0600) while incomplete; the finished file gets the mode a
/// newly created file gets, `0666 & ~umask`, as curl's and every shell redirection's do.
func commitStagedFile(_ staged: URL, to destination: URL) throws(SinkError) {
    let to = destination.path(percentEncoded: false)
    guard let code = commitPartialFile(staged.path(percentEncoded: false), to: to) else { return }
    throw .destinationUnusable(path: to, code: code, message: "cannot move the download into place: \(errnoMessage(code))")
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
