import Dispatch
import Synchronization

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// Holds a request that failed for lack of network until the network is back, then retries
/// it, as Alamofire's `OfflineRetrier` — with a `NetworkReachabilityManager` (the kernel's
/// links and routes over netlink) where Alamofire has `NWPathMonitor`.
///
/// When a request fails with an offline error (`isOfflineError`, by default
/// `TransferError.isNetworkUnavailable`):
/// - if the monitor says reachable and the request has not been retried yet, it is retried at
///   once (the network came back between the failure and now);
/// - otherwise it waits for the monitor to report a change to reachable, then retries; a
///   request that failed while the monitor already said reachable (a host whose route exists
///   but does not answer) therefore waits for a real change instead of retrying in a loop;
/// - after `maximumWait` without that, it fails with its original error (`.doNotRetry`), so a
///   next retrier — an `OfflineQueueDeferrer`, say — gets its turn.
///
/// Other errors are `.doNotRetry` at once. Memory: one entry per waiting request, released on
/// retry or timeout; the monitor is observed only while some request waits.
public final class OfflineRetrier: RequestInterceptor, Sendable {
    /// 5 seconds, as Alamofire.
    public static let defaultWait: Duration = .seconds(5)

    /// A `TinyFireError` or `TransferError` whose transfer failure says the network is
    /// missing (`TransferError.isNetworkUnavailable`); anything else is not.
    public static let defaultIsOfflineError: @Sendable (_ error: any Error) -> Bool = { error in
        if let transfer = (error as? TinyFireError)?.transferError ?? (error as? TransferError) {
            return transfer.isNetworkUnavailable
        }
        return false
    }

    /// What tells the network is back.
    public let monitor: NetworkReachabilityManager
    /// How long a request waits for the network before failing with its error.
    public let maximumWait: Duration
    private let isOfflineError: @Sendable (_ error: any Error) -> Bool
    private let queue = DispatchQueue(label: "org.tinyfire.offline-retrier")
    private let state = Mutex(State())

    private struct Waiter {
        var completion: @Sendable (RetryResult) -> Void
        var lastSeen: NetworkReachabilityManager.NetworkReachabilityStatus
    }

    private struct State {
        var waiters: [UInt64: Waiter] = [:]
        var nextID: UInt64 = 0
        var observer: UInt64?
    }

    /// Creates a retrier.
    /// - Parameters:
    ///   - monitor: the reachability manager to follow (one can serve many retriers and an
    ///     `OfflineQueue`); for a single server, one made with `init(host:)` judges the route
    ///     to that server.
    ///   - maximumWait: how long to wait for the network; default `defaultWait`.
    ///   - isOfflineError: which errors mean "no network"; others are not retried here.
    public init(
        monitor: NetworkReachabilityManager, maximumWait: Duration = OfflineRetrier.defaultWait,
        isOfflineError: @escaping @Sendable (_ error: any Error) -> Bool = OfflineRetrier.defaultIsOfflineError
    ) {
        self.monitor = monitor
        self.maximumWait = maximumWait
        self.isOfflineError = isOfflineError
    }

    /// Creates a retrier that follows the default routes of the process's network namespace;
    /// nil when no netlink socket can be opened.
    /// - Parameters:
    ///   - maximumWait: how long to wait for the network; default `defaultWait`.
    ///   - isOfflineError: which errors mean "no network".
    public convenience init?(
        maximumWait: Duration = OfflineRetrier.defaultWait,
        isOfflineError: @escaping @Sendable (_ error: any Error) -> Bool = OfflineRetrier.defaultIsOfflineError
    ) {
        guard let monitor = NetworkReachabilityManager() else { return nil }
        self.init(monitor: monitor, maximumWait: maximumWait, isOfflineError: isOfflineError)
    }

    deinit {
        if let observer = state.withLock({ $0.observer }) { monitor.removeObserver(observer) }
    }

    /// Requests waiting for the network now.
    public var waitingCount: Int { state.withLock { $0.waiters.count } }

    /// Retries at once, after the network comes back, or not at all; see the type's notes.
    /// - Parameters:
    ///   - request: the failed request.
    ///   - session: its session.
    ///   - error: why it failed.
    ///   - completion: the decision, called once on the retrier's queue.
    public func retry(
        _ request: Request, for session: Session, dueTo error: any Error, completion: @escaping @Sendable (RetryResult) -> Void
    ) {
        guard isOfflineError(error) else {
            completion(.doNotRetry)
            return
        }
        let current = monitor.status
        if case .reachable = current, request.retryCount == 0 {
            queue.async { completion(.retry) }
            return
        }
        let (id, needsObserver) = state.withLock {
            $0.nextID += 1
            $0.waiters[$0.nextID] = Waiter(completion: completion, lastSeen: current)
            return ($0.nextID, $0.observer == nil)
        }
        if needsObserver { observe() }
        queue.asyncAfter(deadline: .now() + .nanoseconds(Int(clamping: maximumWait.nanosecondsClamped))) { [weak self] in
            self?.finish(id, with: .doNotRetry)
        }
    }

    private func observe() {
        let token = monitor.addObserver { [weak self] status in self?.statusChanged(status) }
        let stale = state.withLock { state -> UInt64? in
            guard state.observer == nil, !state.waiters.isEmpty else { return token }
            state.observer = token
            return nil
        }
        if let stale { monitor.removeObserver(stale) }
        if token == nil {
            // No netlink: nothing will report the network back; the waiters time out.
            monitor.logger.error("offline retrier: cannot watch reachability; waiting requests fail after \(maximumWait)")
        }
    }

    /// A report from the monitor: the current status when observing starts, then each change.
    private func statusChanged(_ status: NetworkReachabilityManager.NetworkReachabilityStatus) {
        let ready = state.withLock { state -> [UInt64] in
            var ready: [UInt64] = []
            for (id, waiter) in state.waiters {
                if case .reachable = status, status != waiter.lastSeen {
                    ready.append(id)
                } else {
                    state.waiters[id]?.lastSeen = status
                }
            }
            return ready
        }
        for id in ready { finish(id, with: .retry) }
    }

    private func finish(_ id: UInt64, with result: RetryResult) {
        let (waiter, observer) = state.withLock { state -> (Waiter?, UInt64?) in
            let waiter = state.waiters.removeValue(forKey: id)
            guard state.waiters.isEmpty, let observer = state.observer else { return (waiter, nil) }
            state.observer = nil
            return (waiter, observer)
        }
        if let observer { monitor.removeObserver(observer) }
        if let waiter { queue.async { waiter.completion(result) } }
    }
}

extension RequestInterceptor where Self == OfflineRetrier {
    /// An `OfflineRetrier` following `monitor`.
    /// - Parameters:
    ///   - monitor: the reachability manager.
    ///   - maximumWait: how long to wait for the network.
    ///   - isOfflineError: which errors mean "no network".
    /// - Returns: the retrier.
    public static func offlineRetrier(
        monitor: NetworkReachabilityManager, maximumWait: Duration = OfflineRetrier.defaultWait,
        isOfflineError: @escaping @Sendable (_ error: any Error) -> Bool = OfflineRetrier.defaultIsOfflineError
    ) -> OfflineRetrier {
        OfflineRetrier(monitor: monitor, maximumWait: maximumWait, isOfflineError: isOfflineError)
    }
}
