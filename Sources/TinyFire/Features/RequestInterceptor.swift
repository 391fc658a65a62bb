import Dispatch

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// What an adapter knows about the request it adapts.
public struct RequestAdapterState: Sendable {
    /// The `Request.id` of the request being adapted.
    public let requestID: UUID
    /// The session running it.
    public let session: Session
}

/// Changes a request before each attempt (the first and every retry), as Alamofire's
/// `RequestAdapter`: add a token, sign, rewrite the URL.
public protocol RequestAdapter: Sendable {
    /// Adapts `urlRequest`, then calls `completion` once, from any thread.
    /// - Parameters:
    ///   - urlRequest: the request as created (adapters see the initial request on every
    ///     attempt, not the previous attempt's adapted one).
    ///   - session: the session.
    ///   - completion: the adapted request, or an error that fails the request with
    ///     `TinyFireError.requestAdaptationFailed`.
    func adapt(_ urlRequest: URLRequest, for session: Session, completion: @escaping @Sendable (Result<URLRequest, any Error>) -> Void)

    /// Adapts with the request's identity; by default calls `adapt(_:for:completion:)`.
    /// - Parameters:
    ///   - urlRequest: the request.
    ///   - state: request id and session.
    ///   - completion: the outcome.
    func adapt(
        _ urlRequest: URLRequest, using state: RequestAdapterState, completion: @escaping @Sendable (Result<URLRequest, any Error>) -> Void)
}

extension RequestAdapter {
    /// Calls `adapt(_:for:completion:)`.
    /// - Parameters:
    ///   - urlRequest: the request.
    ///   - state: request id and session.
    ///   - completion: the outcome.
    public func adapt(
        _ urlRequest: URLRequest, using state: RequestAdapterState, completion: @escaping @Sendable (Result<URLRequest, any Error>) -> Void
    ) {
        adapt(urlRequest, for: state.session, completion: completion)
    }
}

/// What to do with a request that failed.
public enum RetryResult: Sendable {
    /// Retry now.
    case retry
    /// Retry after this many seconds.
    case retryWithDelay(TimeInterval)
    /// Let it fail with its error.
    case doNotRetry
    /// Let it fail with `TinyFireError.requestRetryFailed(retryError:originalError:)`.
    case doNotRetryWithError(any Error)

    var delay: TimeInterval? {
        if case .retryWithDelay(let delay) = self { return delay }
        return nil
    }

    /// Whether the request is retried (now or after a delay).
    public var retryRequired: Bool {
        switch self {
        case .retry, .retryWithDelay: return true
        case .doNotRetry, .doNotRetryWithError: return false
        }
    }

    /// The error of `.doNotRetryWithError`.
    public var error: (any Error)? {
        if case .doNotRetryWithError(let error) = self { return error }
        return nil
    }
}

/// Decides whether a failed request runs again, as Alamofire's `RequestRetrier`. Asked after
/// a transfer error, a validation error or a serialization error.
public protocol RequestRetrier: Sendable {
    /// Decides, then calls `completion` once, from any thread.
    /// - Parameters:
    ///   - request: the request; `retryCount` says how many retries it had.
    ///   - session: the session.
    ///   - error: why it failed.
    ///   - completion: the decision.
    func retry(_ request: Request, for session: Session, dueTo error: any Error, completion: @escaping @Sendable (RetryResult) -> Void)
}

/// Both an adapter and a retrier; the default implementations pass the request through and
/// never retry.
public protocol RequestInterceptor: RequestAdapter, RequestRetrier {}

extension RequestInterceptor {
    /// Passes the request through unchanged.
    /// - Parameters:
    ///   - urlRequest: the request.
    ///   - session: the session.
    ///   - completion: called with `urlRequest`.
    public func adapt(
        _ urlRequest: URLRequest, for session: Session, completion: @escaping @Sendable (Result<URLRequest, any Error>) -> Void
    ) {
        completion(.success(urlRequest))
    }

    /// Never retries.
    /// - Parameters:
    ///   - request: the request.
    ///   - session: the session.
    ///   - error: the error.
    ///   - completion: called with `.doNotRetry`.
    public func retry(
        _ request: Request, for session: Session, dueTo error: any Error, completion: @escaping @Sendable (RetryResult) -> Void
    ) {
        completion(.doNotRetry)
    }
}

/// An adapter closure.
public typealias AdaptHandler =
    @Sendable (URLRequest, Session, _ completion: @escaping @Sendable (Result<URLRequest, any Error>) -> Void) -> Void
/// A retrier closure.
public typealias RetryHandler =
    @Sendable (Request, Session, any Error, _ completion: @escaping @Sendable (RetryResult) -> Void) -> Void

/// A `RequestInterceptor` whose adaptation is a closure.
public final class Adapter: RequestInterceptor {
    private let adaptHandler: AdaptHandler

    /// Creates an adapter.
    /// - Parameter adaptHandler: the closure.
    public init(_ adaptHandler: @escaping AdaptHandler) {
        self.adaptHandler = adaptHandler
    }

    /// Runs the closure.
    /// - Parameters:
    ///   - urlRequest: the request.
    ///   - session: the session.
    ///   - completion: the outcome.
    public func adapt(
        _ urlRequest: URLRequest, for session: Session, completion: @escaping @Sendable (Result<URLRequest, any Error>) -> Void
    ) {
        adaptHandler(urlRequest, session, completion)
    }
}

/// A `RequestInterceptor` whose retry decision is a closure.
public final class Retrier: RequestInterceptor {
    private let retryHandler: RetryHandler

    /// Creates a retrier.
    /// - Parameter retryHandler: the closure.
    public init(_ retryHandler: @escaping RetryHandler) {
        self.retryHandler = retryHandler
    }

    /// Runs the closure.
    /// - Parameters:
    ///   - request: the request.
    ///   - session: the session.
    ///   - error: the error.
    ///   - completion: the decision.
    public func retry(
        _ request: Request, for session: Session, dueTo error: any Error, completion: @escaping @Sendable (RetryResult) -> Void
    ) {
        retryHandler(request, session, error, completion)
    }
}

/// Several adapters and retriers as one, as Alamofire's `Interceptor`.
///
/// Adapters run in order, each on the previous one's output; the first failure stops the
/// chain. Retriers are asked in order; the first that answers anything but `.doNotRetry`
/// decides. `interceptors` act as both and come after `adapters`/`retriers`.
public final class Interceptor: RequestInterceptor {
    /// The adapters, in order.
    public let adapters: [any RequestAdapter]
    /// The retriers, in order.
    public let retriers: [any RequestRetrier]

    /// Creates an interceptor from closures.
    /// - Parameters:
    ///   - adaptHandler: the adapter closure.
    ///   - retryHandler: the retrier closure.
    public init(adaptHandler: @escaping AdaptHandler, retryHandler: @escaping RetryHandler) {
        adapters = [Adapter(adaptHandler)]
        retriers = [Retrier(retryHandler)]
    }

    /// Creates an interceptor from one adapter and one retrier.
    /// - Parameters:
    ///   - adapter: the adapter.
    ///   - retrier: the retrier.
    public init(adapter: any RequestAdapter, retrier: any RequestRetrier) {
        adapters = [adapter]
        retriers = [retrier]
    }

    /// Creates an interceptor from lists.
    /// - Parameters:
    ///   - adapters: adapters, run first.
    ///   - retriers: retriers, asked first.
    ///   - interceptors: both; their adapters and retriers follow.
    public init(adapters: [any RequestAdapter] = [], retriers: [any RequestRetrier] = [], interceptors: [any RequestInterceptor] = []) {
        self.adapters = adapters + interceptors
        self.retriers = retriers + interceptors
    }

    /// Runs the adapters in order.
    /// - Parameters:
    ///   - urlRequest: the request.
    ///   - session: the session.
    ///   - completion: the final request or the first error.
    public func adapt(
        _ urlRequest: URLRequest, for session: Session, completion: @escaping @Sendable (Result<URLRequest, any Error>) -> Void
    ) {
        adapt(urlRequest, pending: adapters[...], completion: completion) { adapter, request, next in
            adapter.adapt(request, for: session, completion: next)
        }
    }

    /// Runs the adapters in order, passing the request's identity.
    /// - Parameters:
    ///   - urlRequest: the request.
    ///   - state: request id and session.
    ///   - completion: the final request or the first error.
    public func adapt(
        _ urlRequest: URLRequest, using state: RequestAdapterState, completion: @escaping @Sendable (Result<URLRequest, any Error>) -> Void
    ) {
        adapt(urlRequest, pending: adapters[...], completion: completion) { adapter, request, next in
            adapter.adapt(request, using: state, completion: next)
        }
    }

    private func adapt(
        _ urlRequest: URLRequest, pending: ArraySlice<any RequestAdapter>,
        completion: @escaping @Sendable (Result<URLRequest, any Error>) -> Void,
        step: @escaping @Sendable (any RequestAdapter, URLRequest, @escaping @Sendable (Result<URLRequest, any Error>) -> Void) -> Void
    ) {
        guard let adapter = pending.first else {
            completion(.success(urlRequest))
            return
        }
        let rest = pending.dropFirst()
        step(adapter, urlRequest) { [self] result in
            switch result {
            case .success(let adapted): adapt(adapted, pending: rest, completion: completion, step: step)
            case .failure: completion(result)
            }
        }
    }

    /// Asks the retriers in order.
    /// - Parameters:
    ///   - request: the request.
    ///   - session: the session.
    ///   - error: the error.
    ///   - completion: the first decision other than `.doNotRetry`, or `.doNotRetry`.
    public func retry(
        _ request: Request, for session: Session, dueTo error: any Error, completion: @escaping @Sendable (RetryResult) -> Void
    ) {
        retry(request, for: session, dueTo: error, pending: retriers[...], completion: completion)
    }

    private func retry(
        _ request: Request, for session: Session, dueTo error: any Error, pending: ArraySlice<any RequestRetrier>,
        completion: @escaping @Sendable (RetryResult) -> Void
    ) {
        guard let retrier = pending.first else {
            completion(.doNotRetry)
            return
        }
        let rest = pending.dropFirst()
        retrier.retry(request, for: session, dueTo: error) { [self] result in
            switch result {
            case .doNotRetry: retry(request, for: session, dueTo: error, pending: rest, completion: completion)
            default: completion(result)
            }
        }
    }
}

extension RequestInterceptor where Self == Adapter {
    /// An adapter from a closure.
    /// - Parameter adaptHandler: the closure.
    /// - Returns: the adapter.
    public static func adapter(using adaptHandler: @escaping AdaptHandler) -> Adapter { Adapter(adaptHandler) }
}

extension RequestAdapter where Self == Adapter {
    /// An adapter from a closure, where a `RequestAdapter` is expected (`Interceptor(adapters:)`).
    /// - Parameter adaptHandler: the closure.
    /// - Returns: the adapter.
    public static func adapter(using adaptHandler: @escaping AdaptHandler) -> Adapter { Adapter(adaptHandler) }
}

extension RequestRetrier where Self == Retrier {
    /// A retrier from a closure, where a `RequestRetrier` is expected (`Interceptor(retriers:)`).
    /// - Parameter retryHandler: the closure.
    /// - Returns: the retrier.
    public static func retrier(using retryHandler: @escaping RetryHandler) -> Retrier { Retrier(retryHandler) }
}

extension RequestInterceptor where Self == Retrier {
    /// A retrier from a closure.
    /// - Parameter retryHandler: the closure.
    /// - Returns: the retrier.
    public static func retrier(using retryHandler: @escaping RetryHandler) -> Retrier { Retrier(retryHandler) }
}

extension RequestInterceptor where Self == Interceptor {
    /// An interceptor from closures.
    /// - Parameters:
    ///   - adapter: the adapter closure.
    ///   - retrier: the retrier closure.
    /// - Returns: the interceptor.
    public static func interceptor(adapter: @escaping AdaptHandler, retrier: @escaping RetryHandler) -> Interceptor {
        Interceptor(adaptHandler: adapter, retryHandler: retrier)
    }

    /// An interceptor from lists.
    /// - Parameters:
    ///   - adapters: adapters.
    ///   - retriers: retriers.
    ///   - interceptors: both.
    /// - Returns: the interceptor.
    public static func interceptor(
        adapters: [any RequestAdapter] = [], retriers: [any RequestRetrier] = [], interceptors: [any RequestInterceptor] = []
    ) -> Interceptor {
        Interceptor(adapters: adapters, retriers: retriers, interceptors: interceptors)
    }
}
