#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// One layer of a connection's bytes: the TCP socket, TLS over it, TLS over that (the origin's
/// TLS inside an HTTPS proxy's). Everything above the top layer — the CONNECT request, the
/// HTTP/1.1 exchange, request bodies — reads and writes through this one interface and never
/// asks which layers are below. Non-blocking: every call returns at once. Loop-confined.
package protocol ByteStream: AnyObject {
    /// Reads into `buffer`.
    func read(into buffer: UnsafeMutableRawBufferPointer) -> IOResult
    /// Writes from `first`, then `second` (one gather write where the layer can; TLS takes one
    /// buffer at a time and writes only from `first`).
    func write(_ first: UnsafeRawBufferPointer, _ second: UnsafeRawBufferPointer) -> IOResult
    /// The socket, when bytes written here go to it unchanged (so a file can be sent with
    /// sendfile); nil under TLS.
    var plainDescriptor: Int32? { get }
    /// The layer can hold input it already took from the socket (decrypted TLS records), which
    /// the socket no longer signals: read on until `wouldBlock`.
    var holdsBufferedInput: Bool { get }
    /// The peer ended the stream without saying so (TLS without close_notify): the end of a
    /// close-delimited body cannot be trusted.
    var endedWithoutCloseNotify: Bool { get }
    /// Whether a `.failed(code)` from this layer carries an mbedTLS code (else an errno).
    var failuresAreTLSCodes: Bool { get }
    /// Says goodbye on an idle connection (TLS close_notify); the socket closes elsewhere.
    func shutdown()
}

extension ByteStream {
    /// Writes one buffer.
    package func write(_ bytes: UnsafeRawBufferPointer) -> IOResult {
        write(bytes, UnsafeRawBufferPointer(start: nil, count: 0))
    }
}

/// The bottom layer: a connected non-blocking TCP socket. It does not own the descriptor (the
/// connection that registered it with the loop closes it).
package final class SocketStream: ByteStream {
    package let fd: Int32

    package init(fd: Int32) {
        self.fd = fd
    }

    package func read(into buffer: UnsafeMutableRawBufferPointer) -> IOResult { Socket.read(fd, into: buffer) }
    package func write(_ first: UnsafeRawBufferPointer, _ second: UnsafeRawBufferPointer) -> IOResult {
        Socket.write(fd, first, second)
    }
    package var plainDescriptor: Int32? { fd }
    package var holdsBufferedInput: Bool { false }
    package var endedWithoutCloseNotify: Bool { false }
    package var failuresAreTLSCodes: Bool { false }
    package func shutdown() {}
}
