#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

// The core's TLS (TinyFireCore/Security/TLS.swift) in TinyFire's terms: its errors as
// `TinyFireError`, its DER as `Data` and `Certificate`.

extension TLSContext {
    /// Loads `configuration`; a refusal is `.invalidTLSConfiguration` with mbedTLS's reason.
    static func load(_ configuration: TLSConfiguration) throws(TinyFireError) -> TLSContext {
        do throws(TLSSetupError) {
            return try TLSContext(configuration)
        } catch {
            throw .invalidTLSConfiguration(reason: error.reason)
        }
    }

    /// The trust anchors mbedTLS loaded, for evaluators that verify a chain again (revocation).
    var anchorCertificates: [Certificate] { anchorDER.map { Certificate(der: Data($0)) } }
}

extension TLSStream {
    /// A client stream over `lower`; a refusal is `.invalidTLSConfiguration`.
    static func open(context: TLSContext, over lower: any ByteStream, serverName: String?) throws(TinyFireError) -> TLSStream {
        do throws(TLSSetupError) {
            return try TLSStream(context: context, over: lower, serverName: serverName)
        } catch {
            throw .invalidTLSConfiguration(reason: error.reason)
        }
    }

    /// What the handshake negotiated, in the public form.
    var negotiated: TLSDetails { TLSDetails(details) }
}

extension TLSDetails {
    /// The core's details in the public form (DER as `Data`).
    init(_ details: TLSStreamDetails) {
        self.init(
            version: details.version, cipherSuite: details.cipherSuite, resumed: details.resumed,
            peerCertificates: details.peerCertificates.map { Data($0) }, verifiedPath: details.verifiedPath.map { Data($0) })
    }
}
