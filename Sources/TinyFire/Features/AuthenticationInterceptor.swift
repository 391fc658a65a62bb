import Dispatch
import HTTPTypes
import Synchronization

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// A credential an `Authenticator` applies to requests (an OAuth token pair, say).
public protocol AuthenticationCredential: Sendable {
    /// Whether it must be refreshed before the next request (e.g. it expires within a minute).
    var requiresRefresh: Bool { get }
}

/// Applies and refreshes credentials for `AuthenticationInterceptor`, as Alamofire's
/// `Authenticator`.
public protocol Authenticator: AnyObject, Sendable {
    /// The credential type.
    associatedtype Credential: AuthenticationCredential

    /// Puts the credential on the request (usually an `Authorization` header).
    /// - Parameters:
    ///   - credential: the credential.
    ///   - urlRequest: the request.
    func apply(_ credential: Credential, to urlRequest: inout URLRequest)

    /// Gets a new credential, then calls `completion` once, from any thread.
    /// - Parameters:
    ///   - credential: the current one.
    ///   - session: the session.
    ///   - completion: the new credential, or why there is none.
    func refresh(_ credential: Credential, for session: Session, completion: @escaping @Sendable (Result<Credential, any Error>) -> Void)

    /// Whether the request failed because its credential was refused (usually a 401).
    /// - Parameters:
    ///   - urlRequest: the request.
    ///   - response: the response.
    ///   - error: the error.
    /// - Returns: the answer.
    func didRequest(_ urlRequest: URLRequest, with response: HTTPURLResponse, failDueToAuthenticationError error: any Error) -> Bool

    /// Whether the request carried `credential` (so a refresh is due), rather than an older one
    /// (so retrying with the current one is enough).
    /// - Parameters:
    ///   - urlRequest: the request.
    ///   - credential: the current credential.
    /// - Returns: the answer.
    func isRequest(_ urlRequest: URLRequest, authenticatedWith credential: Credential) -> Bool
}

/// Why `AuthenticationInterceptor` failed a request.
public enum AuthenticationError: Error, Sendable, CustomStringConvertible {
    /// There is no credential to apply.
    case missingCredential
    /// More refreshes than the refresh window allows: a refresh loop.
    case excessiveRefresh

    /// What went wrong.
    public var description: String {
        switch self {
        case .missingCredential: return "no authentication credential to apply"
        case .excessiveRefresh: return "credential refreshed too often within the refresh window (refresh loop)"
        }
    }
}

/// Authenticates requests with a credential and refreshes it when it expires or is refused, as
/// Alamofire's `AuthenticationInterceptor`.
///
/// One refresh runs at a time: requests that need the credential meanwhile wait, and when it
/// arrives they are adapted or retried in the order they arrived. More than
/// `refreshWindow.maximumAttempts` refreshes within `refreshWindow.interval` seconds fail
/// the waiting requests with `AuthenticationError.excessiveRefresh`.
public final class AuthenticationInterceptor<AuthenticatorType: Authenticator>: RequestInterceptor, @unchecked Sendable {
    /// The credential type.
    public typealias Credential = AuthenticatorType.Credential

    /// Bounds on refreshes: at most `maximumAttempts` within `interval` seconds.
    public struct RefreshWindow: Sendable {
        /// The window, seconds (default 30).
        public let interval: TimeInterval
        /// Most refreshes in the window (default 5).
        public let maximumAttempts: Int

        /// Creates a window.
        /// - Parameters:
        ///   - interval: seconds; default 30.
        ///   - maximumAttempts: default 5.
        public init(interval: TimeInterval = 30, maximumAttempts: Int = 5) {
            self.interval = interval
            self.maximumAttempts = maximumAttempts
        }
    }

    private enum AdaptAction {
        case fail(any Error), apply(Credential), refresh(Credential), wait
    }

    private enum RefreshStart {
        case alreadyRunning, excessive, start
    }

    private enum RetryAction {
        case done(RetryResult), refresh(Credential), wait
    }

    private struct AdaptOperation {
        let urlRequest: URLRequest
        let completion: @Sendable (Result<URLRequest, any Error>) -> Void
    }

    private struct State {
        var credential: Credential?
        var isRefreshing = false
        var refreshTimestamps: [Instant] = []
        var adaptOperations: [AdaptOperation] = []
        var requestsToRetry: [@Sendable (RetryResult) -> Void] = []
    }

    /// The authenticator.
    public let authenticator: AuthenticatorType
    /// The refresh bound, or nil for none.
    public let refreshWindow: RefreshWindow?
    private let state: Mutex<State>

    /// The current credential; set it after a login.
    public var credential: Credential? {
        get { state.withLock { $0.credential } }
        set { state.withLock { $0.credential = newValue } }
    }

    /// Creates the interceptor.
    /// - Parameters:
    ///   - authenticator: applies and refreshes.
    ///   - credential: the starting credential, if known.
    ///   - refreshWindow: the refresh bound; default 5 in 30 s.
    public init(authenticator: AuthenticatorType, credential: Credential? = nil, refreshWindow: RefreshWindow? = RefreshWindow()) {
        self.authenticator = authenticator
        self.refreshWindow = refreshWindow
        self.state = Mutex(State(credential: credential))
    }

    /// Applies the credential, refreshing it first when it requires that.
    /// - Parameters:
    ///   - urlRequest: the request.
    ///   - session: the session.
    ///   - completion: the authenticated request, or the error.
    public func adapt(
        _ urlRequest: URLRequest, for session: Session, completion: @escaping @Sendable (Result<URLRequest, any Error>) -> Void
    ) {
        let action = state.withLock { state -> AdaptAction in
            guard let credential = state.credential else { return .fail(AuthenticationError.missingCredential) }
            if state.isRefreshing {
                state.adaptOperations.append(AdaptOperation(urlRequest: urlRequest, completion: completion))
                return .wait
            }
            guard credential.requiresRefresh else { return .apply(credential) }
            state.adaptOperations.append(AdaptOperation(urlRequest: urlRequest, completion: completion))
            return .refresh(credential)
        }
        switch action {
        case .fail(let error): completion(.failure(error))
        case .apply(let credential):
            var request = urlRequest
            authenticator.apply(credential, to: &request)
            completion(.success(request))
        case .refresh(let credential): refresh(credential, for: session)
        case .wait: break
        }
    }

    /// Retries requests refused for authentication, refreshing the credential when the request
    /// carried the current one.
    /// - Parameters:
    ///   - request: the request.
    ///   - session: the session.
    ///   - error: the error.
    ///   - completion: the decision.
    public func retry(
        _ request: Request, for session: Session, dueTo error: any Error, completion: @escaping @Sendable (RetryResult) -> Void
    ) {
        guard let urlRequest = request.request, let response = request.response,
            authenticator.didRequest(urlRequest, with: response, failDueToAuthenticationError: error)
        else {
            completion(.doNotRetry)
            return
        }
        let action = state.withLock { state -> RetryAction in
            guard let credential = state.credential else { return .done(.doNotRetryWithError(AuthenticationError.missingCredential)) }
            guard authenticator.isRequest(urlRequest, authenticatedWith: credential) else { return .done(.retry) }
            state.requestsToRetry.append(completion)
            return state.isRefreshing ? .wait : .refresh(credential)
        }
        switch action {
        case .done(let result): completion(result)
        case .refresh(let credential): refresh(credential, for: session)
        case .wait: break
        }
    }

    private func refresh(_ credential: Credential, for session: Session) {
        let now = Instant.now()
        let start = state.withLock { state -> RefreshStart in
            guard !state.isRefreshing else { return .alreadyRunning }
            if let window = refreshWindow {
                let interval = Duration.milliseconds(Int64(window.interval * 1000))
                state.refreshTimestamps.removeAll { now.since($0) >= interval }
                if state.refreshTimestamps.count >= window.maximumAttempts { return .excessive }
            }
            state.refreshTimestamps.append(now)
            state.isRefreshing = true
            return .start
        }
        switch start {
        case .alreadyRunning: break
        case .excessive: handleRefresh(.failure(AuthenticationError.excessiveRefresh), for: session)
        case .start: authenticator.refresh(credential, for: session) { [self] result in handleRefresh(result, for: session) }
        }
    }

    /// A refresh ended: waiting retries go ahead (or fail with its error), and waiting adapts
    /// are run again from the start, as Alamofire replays them: a new credential that itself
    /// requires a refresh refreshes again, up to the refresh window, so a credential that never
    /// stops needing one fails with `.excessiveRefresh` instead of being applied.
    private func handleRefresh(_ result: Result<Credential, any Error>, for session: Session) {
        let (adaptOperations, requestsToRetry) = state.withLock { state in
            state.isRefreshing = false
            if case .success(let credential) = result { state.credential = credential }
            defer {
                state.adaptOperations = []
                state.requestsToRetry = []
            }
            return (state.adaptOperations, state.requestsToRetry)
        }
        switch result {
        case .success:
            for retry in requestsToRetry { retry(.retry) }
            for operation in adaptOperations { adapt(operation.urlRequest, for: session, completion: operation.completion) }
        case .failure(let error):
            for retry in requestsToRetry { retry(.doNotRetryWithError(error)) }
            for operation in adaptOperations { operation.completion(.failure(error)) }
        }
    }
}
