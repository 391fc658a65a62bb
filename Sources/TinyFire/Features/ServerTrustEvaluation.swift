#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// What a server presented during the TLS handshake: its certificate chain (DER, leaf first).
public struct ServerTrust: Sendable {
    /// The chain as sent, leaf first, DER-encoded.
    public let certificates: [Data]

    /// Creates a value.
    /// - Parameter certificates: the chain, leaf first.
    public init(certificates: [Data]) {
        self.certificates = certificates
    }
}

/// Decides whether a server's certificate chain is trusted for a host, as Alamofire's
/// `ServerTrustEvaluating`.
public protocol ServerTrustEvaluating: Sendable {
    /// Evaluates.
    /// - Parameters:
    ///   - trust: what the server presented.
    ///   - host: the host connected to.
    /// - Throws: why the chain is not trusted.
    func evaluate(_ trust: ServerTrust, forHost host: String) throws
}

/// Maps hosts to evaluators, as Alamofire's `ServerTrustManager`. Host keys are exact names or
/// `*.example.com` wildcards (one label); exact names win.
///
/// TLS on mbedTLS is not in this build yet: https URLs are refused before any evaluator runs.
open class ServerTrustManager: @unchecked Sendable {
    /// Whether a host without an evaluator fails (default true).
    public let allHostsMustBeEvaluated: Bool
    /// Evaluators by host.
    public let evaluators: [String: any ServerTrustEvaluating]

    /// Creates a manager.
    /// - Parameters:
    ///   - allHostsMustBeEvaluated: fail hosts without an evaluator; default true.
    ///   - evaluators: evaluators by host or wildcard.
    public init(allHostsMustBeEvaluated: Bool = true, evaluators: [String: any ServerTrustEvaluating]) {
        self.allHostsMustBeEvaluated = allHostsMustBeEvaluated
        self.evaluators = evaluators
    }

    /// The evaluator for `host`.
    /// - Parameter host: the host.
    /// - Returns: the evaluator, or nil when none applies and that is allowed.
    /// - Throws: `TinyFireError.serverTrustEvaluationFailed(.noRequiredEvaluator)` when none
    ///   applies and all hosts must be evaluated.
    open func serverTrustEvaluator(forHost host: String) throws -> (any ServerTrustEvaluating)? {
        let host = host.lowercased()
        if let evaluator = evaluators[host] { return evaluator }
        if let dot = host.firstIndex(of: ".") {
            if let evaluator = evaluators["*" + host[dot...]] { return evaluator }
        }
        guard !allHostsMustBeEvaluated else {
            throw TinyFireError.serverTrustEvaluationFailed(reason: .noRequiredEvaluator(host: host))
        }
        return nil
    }
}
