import CTinyFireTLS

/// How a session's HTTPS connections trust servers and identify themselves.
///
/// Memory: the parsed trust anchors (the system bundle is about 140 certificates, ~200 KiB
/// parsed) once per session, loaded on the first https request; about 40 KiB of mbedTLS state
/// per open connection (two 16 KiB record buffers plus the handshake state).
public struct TLSConfiguration: Sendable, Equatable {
    /// Debian's CA bundle.
    public static let systemCABundle = "/etc/ssl/certs/ca-certificates.crt"

    /// Files of trusted CA certificates (PEM or DER). Default `[systemCABundle]`.
    public var caCertificateFiles: [String]
    /// Directories of trusted CA certificates (every file in them is loaded).
    public var caCertificateDirectories: [String]
    /// Certificate revocation lists (PEM or DER) checked against the chain.
    public var crlFiles: [String]
    /// The device's own certificate (PEM or DER) for mutual TLS, with its key.
    public var clientCertificateFile: String?
    /// The private key of `clientCertificateFile`.
    public var clientKeyFile: String?
    /// The key's password, if it is encrypted.
    public var clientKeyPassword: String?
    /// Longest time for the TLS handshake. Default 30 s.
    public var handshakeTimeout: Duration
    /// Whether a reconnect offers the previous session (skips the full handshake). Default true.
    public var sessionResumption: Bool

    /// Creates a configuration; every parameter has the documented default.
    public init(
        caCertificateFiles: [String] = [TLSConfiguration.systemCABundle],
        caCertificateDirectories: [String] = [],
        crlFiles: [String] = [],
        clientCertificateFile: String? = nil,
        clientKeyFile: String? = nil,
        clientKeyPassword: String? = nil,
        handshakeTimeout: Duration = .seconds(30),
        sessionResumption: Bool = true
    ) {
        self.caCertificateFiles = caCertificateFiles
        self.caCertificateDirectories = caCertificateDirectories
        self.crlFiles = crlFiles
        self.clientCertificateFile = clientCertificateFile
        self.clientKeyFile = clientKeyFile
        self.clientKeyPassword = clientKeyPassword
        self.handshakeTimeout = handshakeTimeout
        self.sessionResumption = sessionResumption
    }

    /// The mbedTLS version linked in, e.g. `2.28.3`.
    public static var libraryVersion: String { X509.libraryVersion }
}

/// A TLS configuration mbedTLS refused (a CA file it cannot read or parse, a key that does not
/// match its certificate), with the reason. TinyFire reports it as
/// `TinyFireError.invalidTLSConfiguration(reason:)`.
package struct TLSSetupError: Error, Sendable, CustomStringConvertible {
    package let reason: String
    package var description: String { reason }

    package init(reason: String) { self.reason = reason }
}

/// The loaded form of a `TLSConfiguration`: mbedTLS's config, RNG and trust anchors. Shared by
/// every connection of a session; used on its loop thread only.
package final class TLSContext: @unchecked Sendable {
    package let configuration: TLSConfiguration
    package let pointer: OpaquePointer

    package init(_ configuration: TLSConfiguration) throws(TLSSetupError) {
        self.configuration = configuration
        var error: Int32 = 0
        guard let pointer = tinyfire_tls_config_new(&error) else {
            throw TLSSetupError(reason: "mbedTLS setup failed: \(tlsErrorMessage(error))")
        }
        self.pointer = pointer
        for file in configuration.caCertificateFiles {
            let result = tinyfire_tls_config_add_ca_file(pointer, file)
            guard result == 0 else {
                throw TLSSetupError(reason: "cannot load CA certificates from \(file): \(tlsErrorMessage(result))")
            }
        }
        for directory in configuration.caCertificateDirectories {
            let result = tinyfire_tls_config_add_ca_directory(pointer, directory)
            guard result == 0 else {
                throw TLSSetupError(reason: "cannot load CA certificates from \(directory): \(tlsErrorMessage(result))")
            }
        }
        for file in configuration.crlFiles {
            let result = tinyfire_tls_config_add_crl_file(pointer, file)
            guard result == 0 else {
                throw TLSSetupError(reason: "cannot load the CRL \(file): \(tlsErrorMessage(result))")
            }
        }
        switch (configuration.clientCertificateFile, configuration.clientKeyFile) {
        case (nil, nil):
            break
        case (let certificate?, let key?):
            let result = tinyfire_tls_config_set_own_cert(pointer, certificate, key, configuration.clientKeyPassword)
            guard result == 0 else {
                throw TLSSetupError(
                    reason: "cannot load the client certificate \(certificate) with key \(key): \(tlsErrorMessage(result))")
            }
        default:
            throw TLSSetupError(reason: "a client certificate needs both a certificate file and a key file")
        }
    }

    deinit {
        tinyfire_tls_config_free(pointer)
    }

    /// The trust anchors mbedTLS loaded (CA files and directories) as DER, for evaluators that
    /// verify a chain again (revocation). Copied on first use.
    package lazy var anchorDER: [[UInt8]] = derEntries(pointer, tinyfire_tls_config_anchor)
}

/// The DER entries an indexed C accessor of `object` hands out, until it returns NULL.
private func derEntries(
    _ object: OpaquePointer, _ accessor: (OpaquePointer?, Int32, UnsafeMutablePointer<Int>?) -> UnsafePointer<UInt8>?
) -> [[UInt8]] {
    var result: [[UInt8]] = []
    var index: Int32 = 0
    var length = 0
    while let der = accessor(object, index, &length) {
        result.append([UInt8](UnsafeBufferPointer(start: der, count: length)))
        index += 1
    }
    return result
}

/// A saved TLS session, offered on the next connection to the same origin, with the trust
/// facts of the full handshake that made it (`Trust`): a resumed handshake receives no
/// certificate, so its connection is evaluated on these (the verified path, not the leaf alone
/// that mbedTLS keeps). Cache sessions per trust configuration (TinyFire: per `Session`), so a
/// session is only ever resumed under the anchors, CRLs and evaluators that evaluated it.
package final class TLSSession<Trust: Sendable>: @unchecked Sendable {
    package let pointer: OpaquePointer
    /// What the full handshake presented and verified.
    package let trust: Trust

    package init?(trust: Trust) {
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
package final class TLSStream: ByteStream {
    private let pointer: OpaquePointer
    package let context: TLSContext
    /// The layer below when it is not the socket (kept alive for mbedTLS's callbacks).
    private let lower: LowerStream?
    /// The peer closed the TCP connection without a TLS close_notify (what truncation looks
    /// like): the end of a close-delimited body cannot be trusted.
    package private(set) var closedWithoutNotify = false

    /// - Parameters:
    ///   - context: the configuration and trust anchors.
    ///   - lower: the layer the records go over.
    ///   - serverName: SNI and the name mbedTLS checks (nil for an IP address).
    package init(context: TLSContext, over lower: any ByteStream, serverName: String?) throws(TLSSetupError) {
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
            throw TLSSetupError(reason: "mbedTLS connection setup failed: \(tlsErrorMessage(error))")
        }
        self.pointer = created
    }

    deinit {
        tinyfire_tls_free(pointer)
    }

    package enum HandshakeResult {
        case done
        case wantRead
        case wantWrite
        case failed(Int32)
    }

    package func offer<Trust>(_ session: TLSSession<Trust>) {
        _ = tinyfire_tls_set_session(pointer, session.pointer)
    }

    package func handshake() -> HandshakeResult {
        let result = tinyfire_tls_handshake(pointer)
        switch result {
        case 0: return .done
        case TINYFIRE_TLS_WANT_READ: return .wantRead
        case TINYFIRE_TLS_WANT_WRITE: return .wantWrite
        default: return .failed(result)
        }
    }

    package func read(into buffer: UnsafeMutableRawBufferPointer) -> IOResult {
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
    package func write(_ first: UnsafeRawBufferPointer, _ second: UnsafeRawBufferPointer) -> IOResult {
        guard let base = first.baseAddress, first.count > 0 else { return .bytes(0) }
        let result = tinyfire_tls_write(pointer, base.assumingMemoryBound(to: UInt8.self), first.count)
        switch result {
        case TINYFIRE_TLS_WANT_READ, TINYFIRE_TLS_WANT_WRITE: return .wouldBlock
        case let n where n > 0: return .bytes(Int(n))
        default: return .failed(result)
        }
    }

    /// mbedTLS's verification flags (0: the chain verified against the CA set and the name).
    package var verificationFlags: UInt32 { tinyfire_tls_verify_flags(pointer) }

    package func saveSession<Trust>(into session: TLSSession<Trust>) -> Bool {
        tinyfire_tls_get_session(pointer, session.pointer) == 0
    }

    /// What the handshake negotiated, and the certificates as DER.
    package var details: TLSStreamDetails {
        TLSStreamDetails(
            version: String(cString: tinyfire_tls_version(pointer)),
            cipherSuite: String(cString: tinyfire_tls_ciphersuite(pointer)),
            resumed: tinyfire_tls_session_resumed(pointer) != 0,
            peerCertificates: derEntries(pointer, tinyfire_tls_peer_certificate),
            verifiedPath: derEntries(pointer, tinyfire_tls_verified_path))
    }

    /// Whether the leaf certificate names `address` (4 or 16 bytes) in an iPAddress SAN.
    package func peerHasIPAddress(_ address: [UInt8]) -> Bool {
        tinyfire_tls_peer_has_ip_address(pointer, address, address.count) != 0
    }

    package var plainDescriptor: Int32? { nil }
    package var holdsBufferedInput: Bool { true }
    package var endedWithoutCloseNotify: Bool { closedWithoutNotify }
    package var failuresAreTLSCodes: Bool { true }

    /// Sends close_notify (best effort: an idle connection about to close).
    package func shutdown() {
        _ = tinyfire_tls_close_notify(pointer)
    }
}

/// What a finished handshake negotiated, as mbedTLS reports it (TinyFire's `TLSDetails` is the
/// public form).
package struct TLSStreamDetails: Sendable {
    /// `TLSv1.2`, `TLSv1.3`.
    package var version: String
    /// The IANA name of the cipher suite.
    package var cipherSuite: String
    /// Whether the handshake resumed an earlier session.
    package var resumed: Bool
    /// The server's chain as sent, leaf first, DER.
    package var peerCertificates: [[UInt8]]
    /// The path mbedTLS built and verified, leaf first up to the trust anchor, DER.
    package var verifiedPath: [[UInt8]]
}
