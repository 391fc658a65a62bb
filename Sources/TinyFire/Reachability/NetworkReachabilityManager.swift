import Dispatch
import Logging
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// Watches whether the network can be reached, as Alamofire's `NetworkReachabilityManager`,
/// from the kernel's own view: an rtnetlink socket reports every change of links, IPv4/IPv6
/// addresses and routes, and the manager re-reads the routing state when something changed.
/// No polling: with nothing changing, nothing runs.
///
/// - The plain form (`init?()`) is reachable when the main routing table has a default route
///   whose interface is up (administratively up, carrier on) and some up interface holds a
///   usable address of that family (global scope, not tentative).
/// - The host form (`init?(host:)`) asks the kernel which route it would use to reach the
///   host (`ip route get`), so policy routing and host or network routes without a default
///   route count; the route's interface must be up.
///
/// A burst of netlink events (a link going down removes addresses and routes in one go) is
/// debounced into one evaluation (`debounce`, 50 ms by default), and listeners hear only of
/// changes. When the kernel drops events (the socket's buffer overran), the state is re-read
/// in full. IPv4 route deletions that follow a link or address change are not announced by
/// the kernel, which is why every evaluation reads the tables again instead of patching a copy.
///
/// Memory: one 32 KiB receive buffer per socket (an event socket while listening, a query
/// socket for evaluations), a 256 KiB kernel receive buffer for events, and a routing snapshot
/// bounded by `RoutingSnapshot`'s limits (1,024 links, 4,096 addresses, 256 default routes).
public final class NetworkReachabilityManager: Sendable {
    /// The kind of network an interface reaches (the core's type: the agent's config names them).
    public typealias InterfaceType = NetworkInterfaceType

    /// The interface traffic would leave through (the core's type).
    public typealias ConnectionType = ReachabilityConnection

    /// Whether the network can be reached (the core's type: `.unknown`, `.notReachable`,
    /// `.reachable(ConnectionType)`).
    public typealias NetworkReachabilityStatus = ReachabilityStatus

    /// Called with each new status.
    public typealias Listener = @Sendable (NetworkReachabilityStatus) -> Void

    /// How long events are gathered before the state is evaluated: 50 ms.
    public static let defaultDebounce: Duration = .milliseconds(50)
    /// The event socket's kernel receive buffer: 256 KiB. Overruns trigger a full re-read.
    public static let eventReceiveBuffer: Int32 = 256 * 1024
    /// How long a resolved host address is reused before it is resolved again: 60 s.
    public static let hostResolutionInterval: Duration = RouteJudge.hostResolutionInterval

    /// The host whose route is evaluated, or nil for "any default route".
    public var host: String? { judge.host }
    /// The network namespace watched (a `/run/netns/NAME` path), or nil for the process's own.
    public var networkNamespace: String? { judge.networkNamespace }
    let debounce: Duration
    let logger: Logger
    /// Reads and judges the routing state (the core's, shared with the agent's daemon).
    private let judge: RouteJudge
    private let queue = DispatchQueue(label: "org.tinyfire.reachability")
    private let state = Mutex(State())

    private struct State {
        var listener: Listener?
        var listenerQueue: DispatchQueue?
        var observers: [UInt64: @Sendable (NetworkReachabilityStatus) -> Void] = [:]
        var nextObserverID: UInt64 = 0
        var source: EventSource?
        var status: NetworkReachabilityStatus = .unknown
        var evaluated = false
        var evaluationScheduled = false
        var overruns = 0
        var evaluations = 0
    }

    /// How many evaluations ran (tests check that events arrived even when nothing changed).
    var evaluationCount: Int { state.withLock { $0.evaluations } }

    /// Runs `body` on the manager's queue, holding off event handling meanwhile (tests use it
    /// to make the kernel overrun the event socket).
    func performOnQueue<T>(_ body: () throws -> T) rethrows -> T {
        try queue.sync(execute: body)
    }

    /// How many times the kernel dropped events and the state was read again.
    var overrunCount: Int { state.withLock { $0.overruns } }
    /// SO_RCVBUF of the event socket.
    let eventReceiveBuffer: Int32

    /// Watches any default route of the process's network namespace; nil when no netlink
    /// socket can be opened.
    public convenience init?() {
        try? self.init(host: nil)
    }

    /// Watches the route to `host` (a name or an IP literal); nil when no netlink socket can
    /// be opened. A name that does not resolve yet is judged by the default route and resolved
    /// again on later changes.
    /// - Parameter host: the host.
    public convenience init?(host: String) {
        try? self.init(host: Optional(host))
    }

    /// Creates a manager and checks that netlink can be used.
    /// - Parameters:
    ///   - host: the host whose route counts, or nil for any default route.
    ///   - networkNamespace: a network namespace file (`/run/netns/NAME`, `/proc/PID/ns/net`)
    ///     to watch instead of the process's own. Interface types are then judged without
    ///     sysfs (which shows the process's namespace).
    ///   - interfaceTypes: types for interfaces by exact name, overriding the built-in rules.
    ///   - debounce: how long events are gathered; default `defaultDebounce`.
    ///   - logger: where socket failures and re-reads are logged.
    /// - Throws: `NetworkReachabilityError` when the namespace or the socket cannot be opened.
    public convenience init(
        host: String?, networkNamespace: String? = nil, interfaceTypes: [String: InterfaceType] = [:],
        debounce: Duration = NetworkReachabilityManager.defaultDebounce,
        logger: Logger = Logger(label: "org.tinyfire.reachability")
    ) throws(NetworkReachabilityError) {
        try self.init(
            host: host, networkNamespace: networkNamespace, interfaceTypes: interfaceTypes, debounce: debounce, logger: logger,
            eventReceiveBuffer: Self.eventReceiveBuffer)
    }

    init(
        host: String?, networkNamespace: String?, interfaceTypes: [String: InterfaceType], debounce: Duration, logger: Logger,
        eventReceiveBuffer: Int32
    ) throws(NetworkReachabilityError) {
        judge = try RouteJudge(host: host, networkNamespace: networkNamespace, interfaceTypes: interfaceTypes)
        self.debounce = debounce
        self.logger = logger
        self.eventReceiveBuffer = eventReceiveBuffer
    }

    deinit {
        let source = state.withLock { $0.source }
        source?.source.cancel()
    }

    /// The current status. While listening, the last evaluated one; otherwise the routing
    /// state is read now (a few system calls).
    public var status: NetworkReachabilityStatus {
        let (listening, current) = state.withLock { ($0.source != nil && $0.evaluated, $0.status) }
        if listening { return current }
        return queue.sync { evaluate() }
    }

    /// Whether the status is `.reachable`.
    public var isReachable: Bool { status.isReachable }

    /// Whether the status is `.reachable` through a cellular interface.
    public var isReachableOnCellular: Bool {
        if case .reachable(let connection) = status { return connection.interfaceType == .cellular }
        return false
    }

    /// Whether the status is `.reachable` through Ethernet or Wi-Fi.
    public var isReachableOnEthernetOrWiFi: Bool {
        if case .reachable(let connection) = status { return [.ethernet, .wifi].contains(connection.interfaceType) }
        return false
    }

    /// Starts watching and calls `listener` with the current status, then with each change.
    /// A second call replaces the listener.
    /// - Parameters:
    ///   - queue: where `listener` runs; default a serial queue of the manager (daemons have no
    ///     main queue).
    ///   - listener: called with each status.
    /// - Returns: whether watching started (false when the event socket cannot be opened; the
    ///   reason is logged).
    @discardableResult
    public func startListening(onQueue queue: DispatchQueue? = nil, onUpdatePerforming listener: @escaping Listener) -> Bool {
        let listenerQueue = queue ?? DispatchQueue(label: "org.tinyfire.reachability.listener")
        state.withLock {
            $0.listener = listener
            $0.listenerQueue = listenerQueue
        }
        switch startMonitoring() {
        case .failed: return false
        case .started: return true  // the first evaluation notifies everyone
        case .alreadyRunning:
            self.queue.async { [self] in
                let (status, evaluated) = state.withLock { ($0.status, $0.evaluated) }
                if evaluated { listenerQueue.async { listener(status) } }
            }
            return true
        }
    }

    /// Stops calling the listener; the event socket closes when nothing else watches.
    public func stopListening() {
        let stop = state.withLock {
            $0.listener = nil
            $0.listenerQueue = nil
            return $0.observers.isEmpty
        }
        if stop { stopMonitoring() }
    }

    /// Adds an internal observer (the offline queue, `OfflineRetrier`); it is called on the
    /// manager's queue with the current status, then with each change. Returns its token.
    func addObserver(_ observer: @escaping @Sendable (NetworkReachabilityStatus) -> Void) -> UInt64? {
        let id = state.withLock {
            $0.nextObserverID += 1
            $0.observers[$0.nextObserverID] = observer
            return $0.nextObserverID
        }
        switch startMonitoring() {
        case .failed:
            _ = state.withLock { $0.observers.removeValue(forKey: id) }
            return nil
        case .started: return id
        case .alreadyRunning:
            queue.async { [self] in
                let (status, evaluated) = state.withLock { ($0.status, $0.evaluated) }
                if evaluated { observer(status) }
            }
            return id
        }
    }

    /// Removes an observer added with `addObserver`.
    func removeObserver(_ id: UInt64) {
        let stop = state.withLock {
            $0.observers.removeValue(forKey: id)
            return $0.observers.isEmpty && $0.listener == nil
        }
        if stop { stopMonitoring() }
    }

    // MARK: - Watching

    private enum MonitoringStart { case started, alreadyRunning, failed }

    private func startMonitoring() -> MonitoringStart {
        if state.withLock({ $0.source != nil }) { return .alreadyRunning }
        let events: NetlinkSocket
        do {
            events = try judge.eventSocket(receiveBuffer: eventReceiveBuffer)
        } catch {
            logger.error("reachability: \(error)")
            return .failed
        }
        let source = DispatchSource.makeReadSource(fileDescriptor: events.fd, queue: queue)
        source.setEventHandler { [weak self] in
            guard let self else { return }
            switch events.drain() {
            case .messages(0): break
            case .messages: self.scheduleEvaluation()
            case .overrun:
                self.state.withLock { $0.overruns += 1 }
                self.logger.notice("reachability: netlink events were dropped (buffer overrun); reading the routing state again")
                self.scheduleEvaluation()
            case .failed(let code):
                self.logger.error("reachability: netlink event socket failed: \(errnoMessage(code))")
                self.scheduleEvaluation()
            }
        }
        // The handler keeps the socket open until the source is gone.
        source.setCancelHandler { withExtendedLifetime(events) {} }
        let box = EventSource(source)
        let installed = state.withLock {
            guard $0.source == nil else { return false }
            $0.source = box
            $0.evaluated = false
            return true
        }
        guard installed else { return .alreadyRunning }
        source.resume()
        queue.async { [self] in runEvaluation(notifyAlways: true) }
        return .started
    }

    private func stopMonitoring() {
        let source = state.withLock {
            let source = $0.source
            $0.source = nil
            $0.evaluated = false
            return source
        }
        source?.source.cancel()
    }

    private func scheduleEvaluation() {
        let schedule = state.withLock {
            guard !$0.evaluationScheduled else { return false }
            $0.evaluationScheduled = true
            return true
        }
        guard schedule else { return }
        queue.asyncAfter(deadline: .now() + .nanoseconds(Int(clamping: debounce.nanosecondsClamped))) { [weak self] in
            guard let self else { return }
            self.state.withLock { $0.evaluationScheduled = false }
            self.runEvaluation(notifyAlways: false)
        }
    }

    /// Evaluates and notifies when the status changed (or always, after starting). Runs on `queue`.
    private func runEvaluation(notifyAlways: Bool) {
        guard state.withLock({ $0.source != nil }) else { return }
        let status = evaluate()
        let (listener, listenerQueue, observers, changed) = state.withLock {
            let changed = notifyAlways || !$0.evaluated || $0.status != status
            $0.status = status
            $0.evaluated = true
            $0.evaluations += 1
            return ($0.listener, $0.listenerQueue, Array($0.observers.values), changed)
        }
        guard changed else { return }
        logger.debug("reachability: \(status)")
        if let listener, let listenerQueue { listenerQueue.async { listener(status) } }
        for observer in observers { observer(status) }
    }

    /// Reads the routing state and judges it (the core's `RouteJudge`). Runs on `queue`; a host
    /// name's new addresses schedule another evaluation.
    private func evaluate() -> NetworkReachabilityStatus {
        let (status, failure) = judge.evaluate { [weak self] in
            guard let self else { return }
            self.queue.async { self.scheduleEvaluation() }
        }
        if let failure { logger.error("reachability: \(failure)") }
        return status
    }

    // MARK: - Interface types

    /// Judges by hardware type (ARPHRD_*), link kind and name alone (the core's rules).
    static func interfaceType(name: String, hardwareType: UInt16, kind: String, isLoopback: Bool) -> InterfaceType {
        RouteJudge.interfaceType(name: name, hardwareType: hardwareType, kind: kind, isLoopback: isLoopback)
    }
}

/// A read source, handed between threads only under the manager's lock.
private final class EventSource: @unchecked Sendable {
    let source: any DispatchSourceRead
    init(_ source: any DispatchSourceRead) { self.source = source }
}
