#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

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

/// What a finished handshake negotiated, for metrics and `-v`.
public struct TLSDetails: Sendable, Equatable {
    /// `TLSv1.2`, `TLSv1.3`.
    public var version: String
    /// The IANA name of the cipher suite.
    public var cipherSuite: String
    /// Whether the handshake resumed an earlier session (abbreviated handshake).
    public var resumed: Bool
    /// The server's chain as sent, leaf first, DER (for a resumed handshake, as sent in the
    /// full handshake it resumed).
    public var peerCertificates: [Data]
    /// The path mbedTLS built and verified, leaf first up to the trust anchor, DER: what pins
    /// are checked against. Certificates the server sent that are not on it are not here.
    public var verifiedPath: [Data] = []
}
