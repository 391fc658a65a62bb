#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

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
