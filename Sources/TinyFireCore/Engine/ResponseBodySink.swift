/// A sink refused bytes.
package enum SinkError: Error, Sendable {
    /// An in-memory body would grow past its limit (bytes, decoded).
    case limitExceeded(limit: Int)
    /// A download's file would grow past its limit.
    case fileSizeExceeded(limit: UInt64)
    case writeFailed(path: String, message: String)
    /// A download's destination cannot take the file: it exists (and may not be replaced),
    /// its directory is missing, or the final move failed; the errno says which.
    case destinationUnusable(path: String, code: Int32, message: String)
    /// A resumed download's response cannot continue the partial file.
    case resumeRejected(String)
    /// A resumed download's resource changed, and the request asked to stop then.
    case resourceChanged(String)

    /// What a transfer that a sink stopped reports.
    package var reason: TransferError.Reason {
        switch self {
        case .limitExceeded(let limit): return .bodyLimitExceeded(limit: limit)
        case .fileSizeExceeded(let limit): return .fileSizeExceeded(limit: limit)
        case .writeFailed(let path, let message), .destinationUnusable(let path, _, let message):
            return .fileWriteFailed(path: path, message: message)
        case .resumeRejected(let message): return .resumeRejected(message: message)
        case .resourceChanged(let message): return .resourceChanged(message: message)
        }
    }
}

/// Receives a response body as it is decoded. Loop-confined; `write` must not block for long.
/// Where the body ends up (memory, a file, a descriptor) is the sink's own business: its owner
/// made it (`TransferOwner.transferMakeSink`) and reads the result from it after `finish`.
package protocol ResponseBodySink: AnyObject {
    /// Body bytes, valid only during the call.
    func write(_ bytes: UnsafeRawBufferPointer) throws(SinkError)
    /// The body is complete and valid.
    func finish() throws(SinkError)
    /// The transfer failed or was cancelled: drop what was written.
    func discard()
}

/// Writes the body to a descriptor the caller owns (stdout, a pipe into an installer,
/// /dev/null); nothing is buffered.
package final class DescriptorSink: ResponseBodySink {
    private let fd: Int32
    private let name: String

    package init(fd: Int32, name: String) {
        self.fd = fd
        self.name = name
    }

    package func write(_ bytes: UnsafeRawBufferPointer) throws(SinkError) {
        try writeAll(fd, bytes, name: name)
    }

    package func finish() throws(SinkError) {}

    package func discard() {}
}

/// Drops the body (redirect bodies, HEAD-like uses).
package final class DiscardSink: ResponseBodySink {
    package init() {}
    package func write(_ bytes: UnsafeRawBufferPointer) throws(SinkError) {}
    package func finish() throws(SinkError) {}
    package func discard() {}
}

/// Collects the body in memory as bytes, up to `limit` bytes (decoded); what the agent reads
/// its small answers into. Memory: at most `limit` bytes.
package final class ByteArraySink: ResponseBodySink {
    /// The body so far.
    package private(set) var bytes: [UInt8] = []
    private let limit: Int
    private let keepsPrefix: Bool

    /// - Parameters:
    ///   - limit: bytes kept at most.
    ///   - expectedLength: the announced length, to reserve for.
    ///   - keepsPrefix: past `limit`, keep the first `limit` bytes and read on (the start of
    ///     an answer that is judged, not used); false fails the transfer with `.limitExceeded`.
    package init(limit: Int, expectedLength: UInt64? = nil, keepsPrefix: Bool = false) {
        self.limit = limit
        self.keepsPrefix = keepsPrefix
        if let expectedLength, expectedLength <= UInt64(limit) { bytes.reserveCapacity(Int(expectedLength)) }
    }

    package func write(_ chunk: UnsafeRawBufferPointer) throws(SinkError) {
        guard bytes.count + chunk.count <= limit else {
            guard keepsPrefix else { throw .limitExceeded(limit: limit) }
            bytes.append(contentsOf: chunk.prefix(limit - bytes.count))
            return
        }
        bytes.append(contentsOf: chunk)
    }

    package func finish() throws(SinkError) {}

    package func discard() { bytes = [] }
}

/// Writes every byte (`writeAll`), as a sink error naming `name`.
package func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, name: String) throws(SinkError) {
    if let code = writeAll(fd, bytes) { throw .writeFailed(path: name, message: errnoMessage(code)) }
}
