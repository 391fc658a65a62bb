#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// Writes all of `bytes` at `offset` with `pwrite`, over short writes and EINTR.
/// - Returns: nil, or the errno that stopped it (ENOSPC when the device took nothing).
package func pwriteAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, at offset: Int64) -> Int32? {
    guard let base = bytes.baseAddress else { return nil }
    var done = 0
    while done < bytes.count {
        let n = pwrite(fd, base + done, bytes.count - done, off_t(offset + Int64(done)))
        if n < 0 {
            if errno == EINTR { continue }
            return errno
        }
        if n == 0 { return ENOSPC }
        done += n
    }
    return nil
}

/// Writes all of `bytes` at the descriptor's position, over short writes and EINTR, waiting
/// (up to a second at a time) while a non-blocking descriptor would block.
/// - Returns: nil, or the errno that stopped it.
package func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) -> Int32? {
    guard let base = bytes.baseAddress else { return nil }
    var offset = 0
    while offset < bytes.count {
        let n = write(fd, base + offset, bytes.count - offset)
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
        return code
    }
    return nil
}

/// `writeAll` of an array.
/// - Returns: nil, or the errno that stopped it.
@discardableResult
package func writeAll(_ fd: Int32, _ bytes: [UInt8]) -> Int32? {
    bytes.withUnsafeBytes { writeAll(fd, $0) }
}

/// `fsync` on a directory, so that names created or removed in it survive a power cut.
/// - Returns: nil, or the errno and the step that failed ("open directory", "sync directory").
package func syncDirectory(_ path: String) -> (code: Int32, operation: String)? {
    let fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
    guard fd >= 0 else { return (errno, "open directory") }
    defer { close(fd) }
    return fsync(fd) == 0 ? nil : (errno, "sync directory")
}

/// Calls `body` with each name in an open directory stream, `.` and `..` left out, from the
/// stream's position to its end.
/// - Returns: nil, or the errno that ended the listing early (EOVERFLOW: an inode number a
///   32-bit `readdir` cannot hold; ENOENT: the directory is gone) — never a short listing that
///   passes for the whole.
package func readDirectoryNames(_ stream: OpaquePointer, _ body: (String) -> Void) -> Int32? {
    readDirectoryNameBytes(stream) { body(String(decoding: $0, as: UTF8.self)) }
}

/// `readDirectoryNames` with each name as the kernel gave it, bytes without the NUL: a name
/// that is not UTF-8 stays the name of its file (opened, renamed, removed by these bytes).
package func readDirectoryNameBytes(_ stream: OpaquePointer, _ body: ([UInt8]) -> Void) -> Int32? {
    while true {
        errno = 0
        guard let entry = readdir(stream) else { return errno == 0 ? nil : errno }
        let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in Array(raw.prefix { $0 != 0 }) }
        if name != [0x2E] && name != [0x2E, 0x2E] { body(name) }
    }
}

/// Why `preadFully` stopped: an errno, or 0 when the file ended first.
package struct ShortRead: Error {
    package var code: Int32
}

/// Reads exactly `count` bytes at `offset`, over short reads and EINTR.
package func preadFully(_ fd: Int32, count: Int, at offset: Int64) -> Result<[UInt8], ShortRead> {
    var bytes = [UInt8](repeating: 0, count: count)
    var done = 0
    while done < count {
        let n = bytes.withUnsafeMutableBytes { raw -> Int in
            let rest = UnsafeMutableRawBufferPointer(rebasing: raw[done...])
            return pread(fd, rest.baseAddress, rest.count, off_t(offset) + off_t(done))
        }
        if n < 0 && errno == EINTR { continue }
        guard n > 0 else { return .failure(ShortRead(code: n < 0 ? errno : 0)) }
        done += n
    }
    return .success(bytes)
}

/// How long a file `replaceFile` wrote is sure to last.
package enum Durability: Sendable {
    /// Readers see the old file or the whole new one, never a part (a temporary file renamed
    /// over it); after a power cut either may be there, or the new name with nothing in it on a
    /// file system that writes data late. For what is rewritten often and rebuilt at start (the
    /// status file under /run).
    case atomic
    /// As `.atomic`, and on disk when `replaceFile` returns: the temporary file fsync'd before
    /// the rename and the directory after it, so a power cut leaves the old file or the whole
    /// new one. For state the agent resumes from.
    case durable
}

/// Why `replaceFile` failed: the errno, the step (`create`, `write`, `sync`, `replace`, `open
/// directory`, `sync directory`) and the file.
package struct FileReplaceError: Error, Sendable {
    package var code: Int32
    package var operation: String
    package var path: String

    /// `PATH: cannot OPERATION: strerror`.
    package var description: String { "\(path): cannot \(operation): \(errnoMessage(code))" }
}

/// Replaces the file at `path` by one holding `bytes`: written to `path + temporarySuffix`
/// (created anew with `mode`, never through a symlink), then renamed over `path`, made as
/// lasting as `durability` says. On failure the temporary file is removed and `path` is left as
/// it was, except when only the directory sync failed: then `path` is the new file, not yet
/// durable. One writer per path (the temporary name is shared).
/// - Parameters:
///   - path: the file.
///   - bytes: its new contents.
///   - mode: the new file's permissions (0600 unless it holds nothing private).
///   - durability: `.atomic` or `.durable`.
///   - temporarySuffix: the temporary name's suffix beside `path`.
/// - Returns: nil, or what failed.
package func replaceFile(
    _ path: String, with bytes: [UInt8], mode: mode_t = 0o600, durability: Durability, temporarySuffix: String = ".tmp"
) -> FileReplaceError? {
    let temporary = path + temporarySuffix
    unlink(temporary)  // a leftover of a crash, or a symlink someone put there: O_EXCL refuses both
    let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode)
    guard fd >= 0 else { return FileReplaceError(code: errno, operation: "create", path: temporary) }
    var failure: FileReplaceError?
    if let code = bytes.withUnsafeBytes({ writeAll(fd, $0) }) {
        failure = FileReplaceError(code: code, operation: "write", path: temporary)
    } else if durability == .durable, fsync(fd) != 0 {
        failure = FileReplaceError(code: errno, operation: "sync", path: temporary)
    }
    close(fd)
    if failure == nil, rename(temporary, path) != 0 { failure = FileReplaceError(code: errno, operation: "replace", path: path) }
    if let failure {
        unlink(temporary)
        return failure
    }
    guard durability == .durable else { return nil }
    return syncDirectory(directoryPart(of: path)).map { FileReplaceError(code: $0.code, operation: $0.operation, path: path) }
}

/// The directory part of `path`: `.` for a bare name, `/` for a file in the root.
package func directoryPart(of path: String) -> String {
    guard let slash = path.utf8.lastIndex(of: UInt8(ascii: "/")) else { return "." }
    return slash == path.utf8.startIndex ? "/" : String(path[..<slash])
}
