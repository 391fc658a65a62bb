import Dispatch

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// Why a request that its retriers would retry again ended instead: it was retried
/// `SessionConfiguration.maxRetries` times already. The `retryError` of the
/// `.requestRetryFailed` it fails with; the `originalError` is the last attempt's.
public struct RetryLimitReached: Error, CustomStringConvertible, Sendable {
    /// The session's `maxRetries`.
    public let limit: Int
    /// Says the limit.
    public var description: String { "the request was retried \(limit) times, the session's maxRetries: not retried again" }
}

/// Retries failed requests with exponential backoff, as Alamofire's `RetryPolicy`.
///
/// A request is retried while `retryCount < retryLimit`, when its method is retryable and
/// either its response status is retryable (that needs `validate()`, which turns the status into
/// an error) or its transfer failed in a retryable way. The delay before retry n (from 0) is
/// `exponentialBackoffBase^n × exponentialBackoffScale` seconds: 0.5 s, 1 s, 2 s, … by default.
open class RetryPolicy: RequestInterceptor, @unchecked Sendable {
    /// 2 retries.
    public static let defaultRetryLimit: UInt = 2
    /// Base 2.
    public static let defaultExponentialBackoffBase: UInt = 2
    /// Scale 0.5 s.
    public static let defaultExponentialBackoffScale: Double = 0.5
    /// Idempotent methods: DELETE, GET, HEAD, OPTIONS, PUT, TRACE (and QUERY).
    public static let defaultRetryableHTTPMethods: Set<HTTPMethod> = [.delete, .get, .head, .options, .put, .trace, .query]
    /// 408, 500, 502, 503, 504.
    public static let defaultRetryableHTTPStatusCodes: Set<Int> = [408, 500, 502, 503, 504]
    /// Name resolution, connect, timeouts, low speed, lost connections, invalid responses and
    /// failed decoding: what Alamofire's default `URLError` codes mean on TinyFire.
    public static let defaultRetryableTransferFailures: Set<TransferFailureKind> = [
        .nameResolutionFailed, .connectFailed, .timedOut, .lowSpeed, .connectionLost, .invalidResponse, .contentDecodingFailed,
    ]

    /// Most retries per request.
    public let retryLimit: UInt
    /// Backoff base.
    public let exponentialBackoffBase: UInt
    /// Backoff scale, seconds.
    public let exponentialBackoffScale: Double
    /// Methods that may be retried.
    public let retryableHTTPMethods: Set<HTTPMethod>
    /// Statuses that trigger a retry.
    public let retryableHTTPStatusCodes: Set<Int>
    /// Transfer failures that trigger a retry.
    public let retryableTransferFailures: Set<TransferFailureKind>

    /// Creates a policy; every parameter defaults to the named static.
    /// - Parameters:
    ///   - retryLimit: most retries.
    ///   - exponentialBackoffBase: base, at least 2.
    ///   - exponentialBackoffScale: scale in seconds.
    ///   - retryableHTTPMethods: methods.
    ///   - retryableHTTPStatusCodes: statuses.
    ///   - retryableTransferFailures: transfer failures.
    public init(
        retryLimit: UInt = RetryPolicy.defaultRetryLimit,
        exponentialBackoffBase: UInt = RetryPolicy.defaultExponentialBackoffBase,
        exponentialBackoffScale: Double = RetryPolicy.defaultExponentialBackoffScale,
        retryableHTTPMethods: Set<HTTPMethod> = RetryPolicy.defaultRetryableHTTPMethods,
        retryableHTTPStatusCodes: Set<Int> = RetryPolicy.defaultRetryableHTTPStatusCodes,
        retryableTransferFailures: Set<TransferFailureKind> = RetryPolicy.defaultRetryableTransferFailures
    ) {
        self.retryLimit = retryLimit
        self.exponentialBackoffBase = max(2, exponentialBackoffBase)
        self.exponentialBackoffScale = exponentialBackoffScale
        self.retryableHTTPMethods = retryableHTTPMethods
        self.retryableHTTPStatusCodes = retryableHTTPStatusCodes
        self.retryableTransferFailures = retryableTransferFailures
    }

    /// Retries with the backoff delay when `shouldRetry` says so and the limit allows.
    /// - Parameters:
    ///   - request: the request.
    ///   - session: the session.
    ///   - error: the error.
    ///   - completion: the decision.
    open func retry(_ request: Request, for session: Session, dueTo error: any Error, completion: @escaping @Sendable (RetryResult) -> Void)
    {
        if request.retryCount < retryLimit, shouldRetry(request: request, dueTo: error) {
            var factor = 1.0
            for _ in 0..<request.retryCount { factor *= Double(exponentialBackoffBase) }
            completion(.retryWithDelay(factor * exponentialBackoffScale))
        } else {
            completion(.doNotRetry)
        }
    }

    /// Whether the method is retryable and the status or the transfer failure is.
    /// - Parameters:
    ///   - request: the request.
    ///   - error: the error.
    /// - Returns: the answer.
    open func shouldRetry(request: Request, dueTo error: any Error) -> Bool {
        let method = request.request?.method ?? .get
        guard retryableHTTPMethods.contains(method) else { return false }
        if let status = request.response?.status.code, retryableHTTPStatusCodes.contains(status) { return true }
        if let transfer = (error as? TinyFireError)?.transferError ?? (error as? TransferError) {
            return retryableTransferFailures.contains(transfer.kind)
        }
        return false
    }
}

/// Retries only requests whose connection was lost, as Alamofire's `ConnectionLostRetryPolicy`.
open class ConnectionLostRetryPolicy: RetryPolicy, @unchecked Sendable {
    /// Creates the policy.
    /// - Parameters:
    ///   - retryLimit: most retries.
    ///   - exponentialBackoffBase: base.
    ///   - exponentialBackoffScale: scale in seconds.
    ///   - retryableHTTPMethods: methods.
    public init(
        retryLimit: UInt = RetryPolicy.defaultRetryLimit,
        exponentialBackoffBase: UInt = RetryPolicy.defaultExponentialBackoffBase,
        exponentialBackoffScale: Double = RetryPolicy.defaultExponentialBackoffScale,
        retryableHTTPMethods: Set<HTTPMethod> = RetryPolicy.defaultRetryableHTTPMethods
    ) {
        super.init(
            retryLimit: retryLimit, exponentialBackoffBase: exponentialBackoffBase, exponentialBackoffScale: exponentialBackoffScale,
            retryableHTTPMethods: retryableHTTPMethods, retryableHTTPStatusCodes: [], retryableTransferFailures: [.connectionLost])
    }
}

extension RequestInterceptor where Self == RetryPolicy {
    /// A `RetryPolicy` with the defaults.
    public static var retryPolicy: RetryPolicy { RetryPolicy() }

    /// A `RetryPolicy`.
    /// - Parameters:
    ///   - retryLimit: most retries.
    ///   - exponentialBackoffBase: base.
    ///   - exponentialBackoffScale: scale.
    ///   - retryableHTTPMethods: methods.
    ///   - retryableHTTPStatusCodes: statuses.
    ///   - retryableTransferFailures: transfer failures.
    /// - Returns: the policy.
    public static func retryPolicy(
        retryLimit: UInt = RetryPolicy.defaultRetryLimit,
        exponentialBackoffBase: UInt = RetryPolicy.defaultExponentialBackoffBase,
        exponentialBackoffScale: Double = RetryPolicy.defaultExponentialBackoffScale,
        retryableHTTPMethods: Set<HTTPMethod> = RetryPolicy.defaultRetryableHTTPMethods,
        retryableHTTPStatusCodes: Set<Int> = RetryPolicy.defaultRetryableHTTPStatusCodes,
        retryableTransferFailures: Set<TransferFailureKind> = RetryPolicy.defaultRetryableTransferFailures
    ) -> RetryPolicy {
        RetryPolicy(
            retryLimit: retryLimit, exponentialBackoffBase: exponentialBackoffBase, exponentialBackoffScale: exponentialBackoffScale,
            retryableHTTPMethods: retryableHTTPMethods, retryableHTTPStatusCodes: retryableHTTPStatusCodes,
            retryableTransferFailures: retryableTransferFailures)
    }
}

extension RequestInterceptor where Self == ConnectionLostRetryPolicy {
    /// A `ConnectionLostRetryPolicy` with the defaults.
    public static var connectionLostRetryPolicy: ConnectionLostRetryPolicy { ConnectionLostRetryPolicy() }

    /// A `ConnectionLostRetryPolicy`, as Alamofire's `.connectionLostRetryPolicy(…)`.
    /// - Parameters:
    ///   - retryLimit: most retries; default 2.
    ///   - exponentialBackoffBase: base; default 2.
    ///   - exponentialBackoffScale: scale in seconds; default 0.5.
    ///   - retryableHTTPMethods: methods; default the idempotent ones.
    /// - Returns: the policy.
    public static func connectionLostRetryPolicy(
        retryLimit: UInt = RetryPolicy.defaultRetryLimit, exponentialBackoffBase: UInt = RetryPolicy.defaultExponentialBackoffBase,
        exponentialBackoffScale: Double = RetryPolicy.defaultExponentialBackoffScale,
        retryableHTTPMethods: Set<HTTPMethod> = RetryPolicy.defaultRetryableHTTPMethods
    ) -> ConnectionLostRetryPolicy {
        ConnectionLostRetryPolicy(
            retryLimit: retryLimit, exponentialBackoffBase: exponentialBackoffBase, exponentialBackoffScale: exponentialBackoffScale,
            retryableHTTPMethods: retryableHTTPMethods)
    }
}
