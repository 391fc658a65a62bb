import CTinyFireSystem
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// Request body bytes held in memory, lent to the connection while it writes them. A class, so
/// an in-memory body (TinyFire's `Data`, the agent's `[UInt8]`) goes to the socket from where it
/// already is, without a copy into a core type.
package protocol BodyBytes: AnyObject, Sendable {
    /// The number of bytes.
    var count: Int { get }
    /// Runs `body` with the bytes (valid only inside `body`).
    func withBodyBytes(_ body: (UnsafeRawBufferPointer) -> Void)
}

/// An in-memory body as a byte array.
package final class ByteArrayBody: BodyBytes {
    package let bytes: [UInt8]

    package init(_ bytes: [UInt8]) {
        self.bytes = bytes
    }

    package var count: Int { bytes.count }

    package func withBodyBytes(_ body: (UnsafeRawBufferPointer) -> Void) {
        bytes.withUnsafeBytes { body($0) }
    }
}

extension BodyBytes {
    /// Writes the bytes from `offset` on to `stream`.
    func write(from offset: Int, to stream: any ByteStream) -> IOResult {
        var result = IOResult.bytes(0)
        withBodyBytes { result = stream.write(UnsafeRawBufferPointer(rebasing: $0[offset...])) }
        return result
    }
}

/// Why a streamed upload's source could not be read.
package struct UploadSourceError: Error, Sendable {
    /// What failed, for the request's error.
    package var message: String

    package init(_ message: String) {
        self.message = message
    }
}

/// Request body bytes of unknown length, read on a thread of their own (never the I/O loop's),
/// so a read may block.
package protocol UploadSource: AnyObject, Sendable {
    /// Fills up to `buffer.count` bytes; 0 at the end of the stream.
    /// - Throws: `UploadSourceError` naming what failed; the upload fails with it.
    func read(into buffer: UnsafeMutableRawBufferPointer) throws(UploadSourceError) -> Int
}

/// A piece of a request body of known length.
package enum BodySegment: Sendable {
    /// Bytes in memory.
    case memory(any BodyBytes)
    /// `length` bytes of the file at `path` from `offset`. When `fileSize` is set, the file
    /// must still have that size once its bytes are sent (a file that changed mid-upload fails
    /// the request instead of sending a mix of two versions).
    case file(path: String, offset: UInt64, length: UInt64, fileSize: UInt64?)

    package var length: UInt64 {
        switch self {
        case .memory(let bytes): UInt64(bytes.count)
        case .file(_, _, let length, _): length
        }
    }
}

/// A request body that is not a single in-memory buffer.
package enum RequestBodySource: Sendable {
    /// Memory and file pieces of known total length (a file upload, a multipart body):
    /// `Content-Length` framing; sent again from the start on a retry.
    case segments([BodySegment])
    /// Bytes of unknown length read from a stream: chunked framing; read once.
    case stream(StreamBodySource)

    /// The body's length, nil when unknown (a stream).
    package var length: UInt64? {
        switch self {
        case .segments(let segments): segments.reduce(0) { $0 + $1.length }
        case .stream: nil
        }
    }

    /// Whether the body can be sent again from the start (a stream cannot, once read).
    package var isReplayable: Bool {
        switch self {
        case .segments: true
        case .stream(let source): !source.wasClaimed
        }
    }
}

/// What a body producer did.
package enum BodyWriteResult: Equatable {
    /// Wrote this many bytes.
    case wrote(Int)
    /// The socket (or TLS) cannot take more now: wait for writability.
    case wouldBlock
    /// A stream has no bytes ready: the producer calls its wake-up when it has.
    case waiting
    /// Every byte is sent.
    case done
    /// The socket or TLS failed with this code.
    case failed(Int32)
    /// The body's source failed (file unreadable or changed, stream error).
    case sourceFailed(String)
}

/// Sends a request body that is not a single in-memory buffer, for one exchange. Loop-confined.
package protocol BodyProducer: AnyObject {
    /// Writes some of the body to the connection's top stream.
    func write(to stream: any ByteStream) -> BodyWriteResult
    /// The exchange ended (sent, failed or aborted): release files and buffers.
    func close()
    /// Body bytes sent so far, without framing (what upload progress counts).
    var payloadSent: UInt64 { get }
}

/// Sends segments in order: memory pieces straight from where they are, file pieces with
/// `sendfile` on plain HTTP (no copy through user space, ≤ 1 MiB per call) or through one
/// 64 KiB buffer on TLS. Memory: the buffer, allocated on the first TLS file read.
package final class SegmentBodyProducer: BodyProducer {
    package static let bufferSize = 64 * 1024
    private let segments: [BodySegment]
    private var index = 0
    /// Bytes of the current segment sent.
    private var sent: UInt64 = 0
    private var fd: Int32 = -1
    private var buffer: UnsafeMutableRawBufferPointer?
    private var start = 0
    private var end = 0
    package private(set) var payloadSent: UInt64 = 0

    package init(segments: [BodySegment]) {
        self.segments = segments
    }

    deinit { close() }

    package func close() {
        if fd >= 0 { closeDescriptor(fd) }
        fd = -1
        buffer?.deallocate()
        buffer = nil
    }

    package func write(to stream: any ByteStream) -> BodyWriteResult {
        while index < segments.count {
            let segment = segments[index]
            if sent == segment.length {
                if let problem = finishSegment(segment) { return .sourceFailed(problem) }
                index += 1
                sent = 0
                continue
            }
            let result: IOResult
            switch segment {
            case .memory(let bytes):
                result = bytes.write(from: Int(sent), to: stream)
            case .file(let path, let offset, let length, _):
                if fd < 0 {
                    fd = open(path, O_RDONLY | O_CLOEXEC)
                    guard fd >= 0 else { return .sourceFailed("cannot open \(path): \(errnoMessage(errno))") }
                }
                let remaining = length - sent
                if let socket = stream.plainDescriptor, start == end {
                    // Plain HTTP: the kernel copies file pages straight to the socket.
                    var position = Int64(offset + sent)
                    let n = tinyfire_sendfile(socket, fd, &position, UInt(min(remaining, 1 << 20)))
                    if n > 0 {
                        result = .bytes(n)
                    } else if n == 0 {
                        return .sourceFailed(shortFileMessage(path, remaining: remaining))
                    } else {
                        let code = errno
                        if code == EINTR { continue }
                        if code == EAGAIN || code == EWOULDBLOCK { return .wouldBlock }
                        return .failed(code)
                    }
                } else {
                    if start == end, let problem = fill(path: path, at: offset + sent, remaining: remaining) {
                        return .sourceFailed(problem)
                    }
                    guard let buffer else { return .sourceFailed("no buffer") }
                    result = stream.write(UnsafeRawBufferPointer(rebasing: buffer[start..<end]))
                    if case .bytes(let n) = result { start += n }
                }
            }
            switch result {
            case .bytes(let n):
                sent += UInt64(n)
                payloadSent += UInt64(n)
                return .wrote(n)
            case .wouldBlock: return .wouldBlock
            case .endOfFile: return .failed(EPIPE)
            case .failed(let code): return .failed(code)
            }
        }
        return .done
    }

    /// Reads the next piece of the current file into the buffer.
    private func fill(path: String, at position: UInt64, remaining: UInt64) -> String? {
        let buffer = self.buffer ?? .allocate(byteCount: Self.bufferSize, alignment: 16)
        self.buffer = buffer
        start = 0
        end = 0
        let want = Int(min(UInt64(buffer.count), remaining))
        while true {
            let n = pread(fd, buffer.baseAddress, want, off_t(position))
            if n > 0 {
                end = n
                return nil
            }
            if n == 0 { return shortFileMessage(path, remaining: remaining) }
            if errno != EINTR { return "cannot read \(path): \(errnoMessage(errno))" }
        }
    }

    /// Closes the segment's file; a message when it no longer has the size it had when the
    /// body was built.
    private func finishSegment(_ segment: BodySegment) -> String? {
        guard case .file(let path, _, _, let fileSize) = segment else { return nil }
        defer {
            closeDescriptor(fd)
            fd = -1
            start = 0
            end = 0
        }
        guard let fileSize, fd >= 0 else { return nil }
        var info = stat()
        if fstat(fd, &info) == 0, UInt64(info.st_size) != fileSize {
            return "\(path) changed size during the upload (\(fileSize) bytes announced, now \(info.st_size))"
        }
        return nil
    }

    private func shortFileMessage(_ path: String, remaining: UInt64) -> String {
        "\(path) ended \(remaining) bytes early (it changed during the upload)"
    }
}

// MARK: - Streams

/// One upload stream, handed out to at most one exchange: a stream cannot be rewound, so a
/// retry, a stale-connection replay or a 307/308 redirect of a stream upload fails with a
/// message saying so.
package final class StreamBodySource: Sendable {
    package let stream: any UploadSource
    private let claimed = Atomic<Bool>(false)

    package init(_ stream: any UploadSource) { self.stream = stream }

    /// Whether an exchange already took the stream.
    package var wasClaimed: Bool { claimed.load(ordering: .acquiring) }

    /// Takes the stream for one exchange; false when it was taken before.
    package func claim() -> Bool {
        claimed.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged
    }
}

/// One chunk of a chunked body: `<hex size>\r\n` + data + `\r\n` laid out contiguously, so
/// it goes in one write.
private final class ChunkBuffer: @unchecked Sendable {
    static let dataCapacity = 64 * 1024
    static let headerSpace = 10
    let storage: UnsafeMutableRawBufferPointer
    /// The framed chunk, ready to send.
    var range = 0..<0
    /// Where the data ends inside `storage`.
    var dataEnd = 0

    init() {
        storage = .allocate(byteCount: Self.headerSpace + Self.dataCapacity + 2, alignment: 16)
    }

    deinit { storage.deallocate() }

    var dataArea: UnsafeMutableRawBufferPointer {
        UnsafeMutableRawBufferPointer(rebasing: storage[Self.headerSpace..<Self.headerSpace + Self.dataCapacity])
    }

    /// Frames `count` data bytes read into `dataArea`.
    func frame(count: Int) {
        let hex = Array(String(count, radix: 16).utf8) + [13, 10]
        let headerStart = Self.headerSpace - hex.count
        for (i, byte) in hex.enumerated() { storage[headerStart + i] = byte }
        storage[Self.headerSpace + count] = 13
        storage[Self.headerSpace + count + 1] = 10
        range = headerStart..<Self.headerSpace + count + 2
        dataEnd = Self.headerSpace + count
    }

    /// Data bytes (not framing) among the `n` bytes sent from the front of `range`.
    func payload(inFirst n: Int) -> Int {
        max(0, min(range.lowerBound + n, dataEnd) - max(range.lowerBound, Self.headerSpace))
    }
}

/// Sends a stream with chunked framing. A thread of its own reads the stream into one of two
/// chunk buffers while the loop writes the other, so reading and sending overlap and a blocking
/// read never holds the loop. The thread ends at the end of the stream, at its failure, or after
/// the read in progress when the exchange ends. Memory: two 64 KiB chunk buffers and the
/// thread's stack (`BlockingWork.callbackStack`, reserved; the stream is the app's code).
package final class StreamBodyProducer: BodyProducer, @unchecked Sendable {
    private struct Shared {
        /// Buffers the reader may fill.
        var free: [ChunkBuffer]
        /// Framed chunks, in order, waiting to be written.
        var ready: [ChunkBuffer] = []
        var ended = false
        var failure: String?
        /// The exchange ended: the reader stops.
        var closed = false
        /// Set when the writer found nothing ready and waits for a wake-up.
        var writerWaiting = false
    }

    private enum Take {
        case buffer(ChunkBuffer)
        case stop
    }

    private static let terminator: [UInt8] = Array("0\r\n\r\n".utf8)
    private let stream: any UploadSource
    private let loop: EventLoop
    private let wake: @Sendable () -> Void
    private let shared: ConditionLocked<Shared>
    /// Loop-owned: the chunk being written.
    private var current: ChunkBuffer?
    private var terminatorSent = 0
    package private(set) var payloadSent: UInt64 = 0

    /// Starts reading `stream` on a new thread.
    /// - Parameters:
    ///   - stream: the source.
    ///   - loop: the I/O loop; `wake` runs on it when a chunk becomes ready.
    ///   - wake: continues the exchange's writing.
    package init(stream: any UploadSource, loop: EventLoop, wake: @escaping @Sendable () -> Void) {
        self.stream = stream
        self.loop = loop
        self.wake = wake
        shared = ConditionLocked(Shared(free: [ChunkBuffer(), ChunkBuffer()]))
        do throws(SystemResourceError) {
            try BlockingWork.run(label: "tinyfire-upload", stackBytes: BlockingWork.callbackStack) { [self] in readAll() }
        } catch {
            shared.withLock { $0.failure = "no thread to read the upload stream: \(error.description)" }
        }
    }

    package func close() {
        shared.withLock { $0.closed = true }
    }

    /// The reader thread: fills free buffers until the stream ends, fails, or the exchange ends.
    private func readAll() {
        while true {
            let take = shared.wait { state -> Take? in
                if state.closed { return .stop }
                return state.free.popLast().map { .buffer($0) }
            }
            guard case .buffer(let buffer) = take else { return }
            var count = 0
            var failure: String?
            do throws(UploadSourceError) {
                count = try stream.read(into: buffer.dataArea)
                if count < 0 || count > ChunkBuffer.dataCapacity {
                    failure = "the upload stream returned \(count) from read (expected 0...\(ChunkBuffer.dataCapacity))"
                }
            } catch {
                failure = "the upload stream failed: \(error.message)"
            }
            if failure == nil && count > 0 { buffer.frame(count: count) }
            let finished = failure != nil || count == 0
            let wakeWriter = shared.withLock { state -> Bool in
                if let failure {
                    state.failure = failure
                } else if count == 0 {
                    state.ended = true
                } else {
                    state.ready.append(buffer)
                }
                if finished { state.free.append(buffer) }
                let waiting = state.writerWaiting
                state.writerWaiting = false
                return waiting && !state.closed
            }
            if wakeWriter { loop.execute(wake) }
            if finished { return }
        }
    }

    package func write(to stream: any ByteStream) -> BodyWriteResult {
        while true {
            if let chunk = current {
                let result = stream.write(UnsafeRawBufferPointer(rebasing: chunk.storage[chunk.range]))
                switch result {
                case .bytes(let n):
                    payloadSent += UInt64(chunk.payload(inFirst: n))
                    chunk.range = chunk.range.lowerBound + n..<chunk.range.upperBound
                    if chunk.range.isEmpty {
                        current = nil
                        shared.withLock { $0.free.append(chunk) }
                    }
                    return .wrote(n)
                case .wouldBlock: return .wouldBlock
                case .endOfFile: return .failed(EPIPE)
                case .failed(let code): return .failed(code)
                }
            }
            enum Next { case chunk(ChunkBuffer), end, failed(String), wait }
            let next = shared.withLock { state -> Next in
                if !state.ready.isEmpty { return .chunk(state.ready.removeFirst()) }
                if let failure = state.failure { return .failed(failure) }
                if state.ended { return .end }
                state.writerWaiting = true
                return .wait
            }
            switch next {
            case .chunk(let chunk):
                current = chunk
            case .failed(let message):
                return .sourceFailed(message)
            case .wait:
                return .waiting
            case .end:
                guard terminatorSent < Self.terminator.count else { return .done }
                let result = Self.terminator.withUnsafeBytes {
                    stream.write(UnsafeRawBufferPointer(rebasing: $0[terminatorSent...]))
                }
                switch result {
                case .bytes(let n):
                    terminatorSent += n
                    return .wrote(n)
                case .wouldBlock: return .wouldBlock
                case .endOfFile: return .failed(EPIPE)
                case .failed(let code): return .failed(code)
                }
            }
        }
    }
}
