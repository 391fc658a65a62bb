import CTinyFireTLS
import Synchronization

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// The loaded form of a `TLSConfiguration`: mbedTLS's config, RNG and trust anchors. Shared by
/// every connection of a session; used on its loop thread only.
final class TLSContext: @unchecked Sendable {
    let configuration: TLSConfiguration
    let pointer: OpaquePointer

    init(_ configuration: TLSConfiguration) throws(TinyFireError) {
        self.configuration = configuration
        var error: Int32 = 0
        guard let pointer = tinyfire_tls_config_new(&error) else {
            throw .invalidTLSConfiguration(reason: "mbedTLS setup failed: \(tlsErrorMessage(error))")
        }
        self.pointer = pointer
        for file in configuration.caCertificateFiles {
            let result = tinyfire_tls_config_add_ca_file(pointer, file)
            guard result == 0 else {
                throw .invalidTLSConfiguration(reason: "cannot load CA certificates from \(file): \(tlsErrorMessage(result))")
            }
        }
        for directory in configuration.caCertificateDirectories {
            let result = tinyfire_tls_config_add_ca_directory(pointer, directory)
            guard result == 0 else {
                throw .invalidTLSConfiguration(reason: "cannot load CA certificates from \(directory): \(tlsErrorMessage(result))")
            }
        }
        for file in configuration.crlFiles {
            let result = tinyfire_tls_config_add_crl_file(pointer, file)
            guard result == 0 else {
                throw .invalidTLSConfiguration(reason: "cannot load the CRL \(file): \(tlsErrorMessage(result))")
            }
        }
        switch (configuration.clientCertificateFile, configuration.clientKeyFile) {
        case (nil, nil):
            break
        case (let certificate?, let key?):
            let result = tinyfire_tls_config_set_own_cert(pointer, certificate, key, configuration.clientKeyPassword)
            guard result == 0 else {
                throw .invalidTLSConfiguration(
                    reason: "cannot load the client certificate \(certificate) with key \(key): \(tlsErrorMessage(result))")
            }
        default:
            throw .invalidTLSConfiguration(reason: "a client certificate needs both a certificate file and a key file")
        }
    }

    deinit {
        tinyfire_tls_config_free(pointer)
    }

    /// The trust anchors mbedTLS loaded (CA files and directories) as DER, for evaluators that
    /// verify a chain again (revocation). Copied on first use.
    lazy var anchorCertificates: [Certificate] = derEntries(pointer, tinyfire_tls_config_anchor).map(Certificate.init(der:))
}

/// The DER entries an indexed C accessor of `object` hands out, until it returns NULL.
private func derEntries(
    _ object: OpaquePointer, _ accessor: (OpaquePointer?, Int32, UnsafeMutablePointer<Int>?) -> UnsafePointer<UInt8>?
) -> [Data] {
    var result: [Data] = []
    var index: Int32 = 0
    var length = 0
    while let der = accessor(object, index, &length) {
        result.append(Data(bytes: der, count: length))
        index += 1
    }
    return result
}

/// A saved TLS session, offered on the next connection to the same origin, with the trust
/// facts of the full handshake that made it: a resumed handshake receives no certificate, so
/// its connection is evaluated on these (the verified path, not the leaf alone that mbedTLS
/// keeps). Sessions are cached per `Session`, so a session is only ever resumed under the trust
/// configuration (anchors, CRLs, evaluators) that evaluated it.
final class TLSSession: @unchecked Sendable {
    let pointer: OpaquePointer
    /// What the full handshake presented and verified.
    let trust: ServerTrust

    init?(trust: ServerTrust) {
        guard let pointer = tinyfire_tls_session_new() else { return nil }
        self.pointer = pointer
        self.trust = trust
    }

    deinit {
        tinyfire_tls_session_free(pointer)
    }
}

/// The layer below a TLS stream that is not a socket, handed to mbedTLS's callbacks.
private final class LowerStream {
    let stream: any ByteStream
    init(_ stream: any ByteStream) { self.stream = stream }
}

/// mbedTLS's send callback over a `LowerStream`.
private let sendToLowerStream: tinyfire_tls_send_fn = { context, buffer, length in
    guard let context, let buffer else { return -1 }
    let lower = Unmanaged<LowerStream>.fromOpaque(context).takeUnretainedValue().stream
    switch lower.write(UnsafeRawBufferPointer(start: buffer, count: min(length, Int(Int32.max)))) {
    case .bytes(let n): return Int32(n)
    case .wouldBlock: return TINYFIRE_TLS_WANT_WRITE
    case .endOfFile, .failed: return -1
    }
}

/// mbedTLS's receive callback over a `LowerStream`.
private let receiveFromLowerStream: tinyfire_tls_recv_fn = { context, buffer, length in
    guard let context, let buffer else { return -1 }
    let lower = Unmanaged<LowerStream>.fromOpaque(context).takeUnretainedValue().stream
    switch lower.read(into: UnsafeMutableRawBufferPointer(start: buffer, count: min(length, Int(Int32.max)))) {
    case .bytes(let n): return Int32(n)
    case .wouldBlock: return TINYFIRE_TLS_WANT_READ
    case .endOfFile: return 0
    case .failed: return -1
    }
}

/// One TLS client stream over a lower layer: a connected non-blocking socket (mbedTLS reads
/// and writes it directly) or any other `ByteStream` (the origin's TLS inside an HTTPS
/// proxy's). Loop-confined.
final class TLSStream: ByteStream {
    private let pointer: OpaquePointer
    let context: TLSContext
    /// The layer below when it is not the socket (kept alive for mbedTLS's callbacks).
    private let lower: LowerStream?
    /// The peer closed the TCP connection without a TLS close_notify (what truncation looks
    /// like): the end of a close-delimited body cannot be trusted.
    private(set) var closedWithoutNotify = false

    /// - Parameters:
    ///   - context: the configuration and trust anchors.
    ///   - lower: the layer the records go over.
    ///   - serverName: SNI and the name mbedTLS checks (nil for an IP address).
    init(context: TLSContext, over lower: any ByteStream, serverName: String?) throws(TinyFireError) {
        self.context = context
        var error: Int32 = 0
        let created: OpaquePointer?
        if let socket = lower as? SocketStream {
            self.lower = nil
            created = tinyfire_tls_new(context.pointer, socket.fd, serverName, &error)
        } else {
            let box = LowerStream(lower)
            self.lower = box
            created = tinyfire_tls_new_over_stream(
                context.pointer, Unmanaged.passUnretained(box).toOpaque(), sendToLowerStream, receiveFromLowerStream, serverName,
                &error)
        }
        guard let created else {
            throw .invalidTLSConfiguration(reason: "mbedTLS connection setup failed: \(tlsErrorMessage(error))")
        }
        self.pointer = created
    }

    deinit {
        tinyfire_tls_free(pointer)
    }

    enum HandshakeResult {
        case done
        case wantRead
        case wantWrite
        case failed(Int32)
    }

    func offer(_ session: TLSSession) {
        _ = tinyfire_tls_set_session(pointer, session.pointer)
    }

    func handshake() -> HandshakeResult {
        let result = tinyfire_tls_handshake(pointer)
        switch result {
        case 0: return .done
        case TINYFIRE_TLS_WANT_READ: return .wantRead
        case TINYFIRE_TLS_WANT_WRITE: return .wantWrite
        default: return .failed(result)
        }
    }

    func read(into buffer: UnsafeMutableRawBufferPointer) -> IOResult {
        guard let base = buffer.baseAddress, buffer.count > 0 else { return .bytes(0) }
        let result = tinyfire_tls_read(pointer, base.assumingMemoryBound(to: UInt8.self), min(buffer.count, Int(Int32.max)))
        switch result {
        case TINYFIRE_TLS_CLOSED: return .endOfFile
        case TINYFIRE_TLS_EOF:
            closedWithoutNotify = true
            return .endOfFile
        case TINYFIRE_TLS_WANT_READ, TINYFIRE_TLS_WANT_WRITE: return .wouldBlock
        case let n where n > 0: return .bytes(Int(n))
        default: return .failed(result)
        }
    }

    /// Writes from `first` only (TLS takes one buffer at a time).
    func write(_ first: UnsafeRawBufferPointer, _ second: UnsafeRawBufferPointer) -> IOResult {
        guard let base = first.baseAddress, first.count > 0 else { return .bytes(0) }
        let result = tinyfire_tls_write(pointer, base.assumingMemoryBound(to: UInt8.self), first.count)
        switch result {
        case TINYFIRE_TLS_WANT_READ, TINYFIRE_TLS_WANT_WRITE: return .wouldBlock
        case let n where n > 0: return .bytes(Int(n))
        default: return .failed(result)
        }
    }

    /// mbedTLS's verification flags (0: the chain verified against the CA set and the name).
    var verificationFlags: UInt32 { tinyfire_tls_verify_flags(pointer) }

    func saveSession(into session: TLSSession) -> Bool {
        tinyfire_tls_get_session(pointer, session.pointer) == 0
    }

    var details: TLSDetails {
        TLSDetails(
            version: String(cString: tinyfire_tls_version(pointer)),
            cipherSuite: String(cString: tinyfire_tls_ciphersuite(pointer)),
            resumed: tinyfire_tls_session_resumed(pointer) != 0,
            peerCertificates: derEntries(pointer, tinyfire_tls_peer_certificate),
            verifiedPath: derEntries(pointer, tinyfire_tls_verified_path))
    }

    /// Whether the leaf certificate names `address` (4 or 16 bytes) in an iPAddress SAN.
    func peerHasIPAddress(_ address: [UInt8]) -> Bool {
        tinyfire_tls_peer_has_ip_address(pointer, address, address.count) != 0
    }

    var plainDescriptor: Int32? { nil }
    var holdsBufferedInput: Bool { true }
    var endedWithoutCloseNotify: Bool { closedWithoutNotify }
    var failuresAreTLSCodes: Bool { true }

    /// Sends close_notify (best effort: an idle connection about to close).
    func shutdown() {
        _ = tinyfire_tls_close_notify(pointer)
    }
}
