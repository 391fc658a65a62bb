import CTinyFireSystem

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// A response body written to a partial file: a new hidden one beside the destination
/// (`.NAME.tinyfire-XXXXXX`, 0600 while incomplete), an earlier attempt's continued from where
/// its recorded bytes end, or an earlier one emptied. `finish` closes it for the caller to move
/// into place (`commitPartialFile`); `discard` fsyncs and closes it and leaves the bytes, for
/// the caller to keep (a resumable transfer) or remove. The library's downloads, fire-agent's
/// firmware images and `fire-agent request` write through it. Memory: none beyond the
/// connection's read buffer.
package final class PartialFileSink: ResponseBodySink {
    /// Where the bytes go.
    package enum Placement: Sendable {
        /// A new hidden file in `destination`'s directory.
        case besides(destination: String)
        /// An earlier attempt's file, continued from `offset` (cut there first). A missing file
        /// or one shorter than `offset` is `SinkError.resumeRejected`.
        case append(path: String, offset: UInt64)
        /// An earlier attempt's file (or a new one), emptied; fsync'd before a resume record
        /// describes it.
        case empty(path: String)
    }

    /// The descriptor while open, -1 after `finish` or `discard`.
    package private(set) var descriptor: Int32
    /// The file written.
    package let path: String
    /// Bytes in it.
    package private(set) var bytesOnDisk: UInt64

    /// Opens the file as `placement` says.
    package init(_ placement: Placement) throws(SinkError) {
        switch placement {
        case .besides(let destination):
            let slash = destination.utf8.lastIndex(of: UInt8(ascii: "/"))
            let directory = slash.map { String(destination[...$0]) } ?? ""
            let name = slash.map { String(destination[destination.index(after: $0)...]) } ?? destination
            var template = Array((directory + "." + name + ".tinyfire-XXXXXX").utf8CString)
            let created = template.withUnsafeMutableBufferPointer { buffer -> Int32 in
                guard let base = buffer.baseAddress else { return -1 }
                return tinyfire_mkstemp_cloexec(base)
            }
            guard created >= 0 else {
                let code = errno
                throw .destinationUnusable(path: destination, code: code, message: "cannot create temporary file: \(errnoMessage(code))")
            }
            descriptor = created
            var bytes: [UInt8] = []
            for byte in template where byte != 0 { bytes.append(UInt8(bitPattern: byte)) }
            path = String(decoding: bytes, as: UTF8.self)
            bytesOnDisk = 0
        case .append(let existing, let offset):
            path = existing
            bytesOnDisk = offset
            descriptor = open(existing, O_WRONLY | O_CLOEXEC)
            guard descriptor >= 0 else {
                if errno == ENOENT { throw .resumeRejected("the partial file \(existing) is gone") }
                throw .writeFailed(path: existing, message: "cannot open partial file: \(errnoMessage(errno))")
            }
            var info = stat()
            guard fstat(descriptor, &info) == 0, UInt64(info.st_size) >= offset else {
                closeDescriptor()
                throw .resumeRejected("the partial file \(existing) is shorter than the \(offset) bytes recorded")
            }
            guard ftruncate(descriptor, off_t(offset)) == 0, lseek(descriptor, 0, SEEK_END) >= 0 else {
                let message = errnoMessage(errno)
                closeDescriptor()
                throw .writeFailed(path: existing, message: message)
            }
        case .empty(let existing):
            path = existing
            bytesOnDisk = 0
            descriptor = open(existing, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
            guard descriptor >= 0 else {
                throw .writeFailed(path: existing, message: "cannot open partial file: \(errnoMessage(errno))")
            }
            fsync(descriptor)
        }
    }

    deinit {
        if descriptor >= 0 { close(descriptor) }
    }

    package func write(_ bytes: UnsafeRawBufferPointer) throws(SinkError) {
        try writeAll(descriptor, bytes, name: path)
        bytesOnDisk += UInt64(bytes.count)
    }

    /// Closes the file; the bytes are complete.
    package func finish() throws(SinkError) {
        let closed = close(descriptor)
        descriptor = -1  // closed even when close reports an error: never close this number again
        if closed != 0 { throw .writeFailed(path: path, message: errnoMessage(errno)) }
    }

    /// Flushes the bytes to disk (the recorded length survives a power cut) and closes the
    /// file; the caller keeps or removes it.
    package func discard() {
        guard descriptor >= 0 else { return }
        fsync(descriptor)
        closeDescriptor()
    }

    /// Closes the file and removes it: the transfer keeps nothing.
    package func remove() {
        if descriptor >= 0 { closeDescriptor() }
        unlink(path)
    }

    private func closeDescriptor() {
        close(descriptor)
        descriptor = -1
    }
}

/// Moves a complete partial file into place: a rename (the destination is the old file or the
/// whole new one), or a copy through one 64 KiB buffer when it is on another file system. The
/// finished file gets the mode a new file gets, `0666 & ~umask`, as curl's and a shell
/// redirection's do. The partial file is gone afterwards, whatever happened.
/// - Returns: nil, or the errno of the rename that failed.
package func commitPartialFile(_ staged: String, to destination: String) -> Int32? {
    chmod(staged, newFileMode())
    guard staged != destination else { return nil }
    guard rename(staged, destination) != 0 else { return nil }
    let code = errno
    defer { unlink(staged) }
    if code == EXDEV, copyFile(from: staged, to: destination) { return nil }
    return code
}

/// Copies a file through one 64 KiB buffer (a rename across file systems).
private func copyFile(from source: String, to target: String) -> Bool {
    let input = open(source, O_RDONLY | O_CLOEXEC)
    guard input >= 0 else { return false }
    defer { close(input) }
    let output = open(target, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, newFileMode())
    guard output >= 0 else { return false }
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 16)
    defer { buffer.deallocate() }
    while true {
        let n = read(input, buffer.baseAddress, buffer.count)
        if n < 0 && errno == EINTR { continue }
        if n <= 0 {
            let ok = n == 0 && close(output) == 0
            if !ok { unlink(target) }
            return ok
        }
        do throws(SinkError) {
            try writeAll(output, UnsafeRawBufferPointer(rebasing: buffer[0..<n]), name: target)
        } catch {
            close(output)
            unlink(target)
            return false
        }
    }
}

/// `0666 & ~umask`: the mode of a newly created file. The umask is read from
/// /proc/self/status (Linux 4.7+) because umask(2) can only be read by setting it, racing
/// other threads creating files; 022 when it cannot be read.
package func newFileMode() -> mode_t {
    var mask: mode_t = 0o022
    let fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { return 0o666 & ~mask }
    defer { close(fd) }
    var buffer = [UInt8](repeating: 0, count: 4096)
    let n = read(fd, &buffer, buffer.count)
    guard n > 0 else { return 0o666 & ~mask }
    for line in buffer[0..<n].split(separator: UInt8(ascii: "\n")) where line.starts(with: "Umask:".utf8) {
        var value: mode_t = 0
        var digits = 0
        for byte in line.dropFirst(6) where byte != UInt8(ascii: " ") && byte != UInt8(ascii: "\t") {
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "7") else { return 0o666 & ~mask }
            value = value * 8 + mode_t(byte - UInt8(ascii: "0"))
            digits += 1
        }
        if digits > 0 && digits <= 4 { mask = value }
    }
    return 0o666 & ~mask
}
