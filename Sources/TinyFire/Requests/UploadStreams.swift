import Dispatch
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

/// A source of request body bytes of unknown length (Alamofire's `InputStream` uploads),
/// sent with chunked framing.
///
/// `read(into:)` runs on a background queue, never on the I/O thread, so it may block (a pipe,
/// a slow sensor); it is called again only after the previous chunk went out, so at most two
/// 64 KiB chunks exist per upload whatever the stream's length.
public protocol UploadByteStream: AnyObject, Sendable {
    /// Fills up to `buffer.count` bytes.
    /// - Parameter buffer: where to put the bytes.
    /// - Returns: the number of bytes written into `buffer`; 0 at the end of the stream.
    /// - Throws: any error; the upload then fails with `.requestBodyReadFailed` carrying its
    ///   description.
    func read(into buffer: UnsafeMutableRawBufferPointer) throws -> Int
}

/// Reads an open descriptor (a pipe, stdin, a device, a file) until end of file.
public final class FileDescriptorByteStream: UploadByteStream, @unchecked Sendable {
    private let fd: Int32
    private let closeWhenDone: Bool
    private let closed = Mutex(false)

    /// Creates a stream over `fd`.
    /// - Parameters:
    ///   - fd: a readable descriptor (blocking reads are fine: they run off the I/O thread).
    ///   - closeWhenDone: close `fd` at end of file, on error, or when the stream is released.
    public init(fileDescriptor fd: Int32, closeWhenDone: Bool = false) {
        self.fd = fd
        self.closeWhenDone = closeWhenDone
    }

    deinit { closeIfOwned() }

    /// Reads what the descriptor has, waiting for it if the descriptor is non-blocking.
    /// - Parameter buffer: where to put the bytes.
    /// - Returns: the bytes read; 0 at end of file.
    /// - Throws: an error naming the descriptor and errno.
    public func read(into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        while true {
            let n = Glibc.read(fd, buffer.baseAddress, buffer.count)
            if n >= 0 {
                if n == 0 { closeIfOwned() }
                return n
            }
            let code = errno
            if code == EINTR { continue }
            if code == EAGAIN {
                var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                _ = poll(&pfd, 1, -1)
                continue
            }
            closeIfOwned()
            throw StreamReadError(message: "cannot read descriptor \(fd): \(errnoMessage(code))")
        }
    }

    private func closeIfOwned() {
        guard closeWhenDone else { return }
        let fd = self.fd
        closed.withLock { closed in
            guard !closed else { return }
            closed = true
            Glibc.close(fd)
        }
    }

    struct StreamReadError: Error, CustomStringConvertible {
        let message: String
        var description: String { message }
    }
}

/// Bytes in memory as a stream (tests, and bodies built by code that wants chunked framing).
public final class DataByteStream: UploadByteStream, @unchecked Sendable {
    private let data: Data
    private let offset = Mutex(0)

    /// Creates a stream over `data`.
    /// - Parameter data: the bytes.
    public init(_ data: Data) { self.data = data }

    /// Copies the next bytes.
    /// - Parameter buffer: where to put the bytes.
    /// - Returns: the bytes copied; 0 at the end.
    public func read(into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        offset.withLock { offset in
            let n = min(buffer.count, data.count - offset)
            guard n > 0 else { return 0 }
            data.withUnsafeBytes { bytes in
                buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + n]))
            }
            offset += n
            return n
        }
    }
}
