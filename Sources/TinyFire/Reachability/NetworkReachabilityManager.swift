import CTinyFireSystem
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

    /// The interface traffic would leave through.
    public struct ConnectionType: Sendable, Equatable, CustomStringConvertible {
        /// The interface's name (`eth0`, `wlan0`, `wwan0`).
        public var interfaceName: String
        /// The kernel's interface index.
        public var interfaceIndex: Int32
        /// What kind of network it is.
        public var interfaceType: InterfaceType

        /// Creates a value.
        /// - Parameters:
        ///   - interfaceName: the name.
        ///   - interfaceIndex: the index.
        ///   - interfaceType: the kind.
        public init(interfaceName: String, interfaceIndex: Int32, interfaceType: InterfaceType) {
            self.interfaceName = interfaceName
            self.interfaceIndex = interfaceIndex
            self.interfaceType = interfaceType
        }

        /// `NAME TYPE`, e.g. `eth0 ethernet`.
        public var description: String { "\(interfaceName) \(interfaceType.rawValue)" }
    }

    /// Whether the network can be reached.
    public enum NetworkReachabilityStatus: Sendable, Equatable, CustomStringConvertible {
        /// Not evaluated yet, or the kernel could not be asked.
        case unknown
        /// No usable route.
        case notReachable
        /// Reachable through this interface.
        case reachable(ConnectionType)

        /// `unknown`, `not-reachable`, or `reachable NAME TYPE`.
        public var description: String {
            switch self {
            case .unknown: return "unknown"
            case .notReachable: return "not-reachable"
            case .reachable(let connection): return "reachable \(connection)"
            }
        }
    }

    /// Called with each new status.
    public typealias Listener = @Sendable (NetworkReachabilityStatus) -> Void

    /// How long events are gathered before the state is evaluated: 50 ms.
    public static let defaultDebounce: Duration = .milliseconds(50)
    /// The event socket's kernel receive buffer: 256 KiB. Overruns trigger a full re-read.
    public static let eventReceiveBuffer: Int32 = 256 * 1024
    /// How long a resolved host address is reused before it is resolved again: 60 s.
    public static let hostResolutionInterval: Duration = .seconds(60)

    /// The host whose route is evaluated, or nil for "any default route".
    public let host: String?
    /// The network namespace watched (a `/run/netns/NAME` path), or nil for the process's own.
    public let networkNamespace: String?
    let debounce: Duration
    let interfaceTypes: [String: InterfaceType]
    let logger: Logger
    private let queue = DispatchQueue(label: "org.tinyfire.reachability")
    private let resolverQueue = DispatchQueue(label: "org.tinyfire.reachability.resolver")
    private let state = Mutex(State())

    private struct State {
        var listener: Listener?
        var listenerQueue: DispatchQueue?
        var observers: [UInt64: @Sendable (NetworkReachabilityStatus) -> Void] = [:]
        var nextObserverID: UInt64 = 0
        var source: EventSource?
        var querySocket: NetlinkSocket?
        var status: NetworkReachabilityStatus = .unknown
        var evaluated = false
        var evaluationScheduled = false
        var hostAddresses: [SocketAddress] = []
        var lastResolution: ContinuousClock.Instant?
        var resolving = false
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
        self.host = host
        self.networkNamespace = networkNamespace
        self.interfaceTypes = interfaceTypes
        self.debounce = debounce
        self.logger = logger
        self.eventReceiveBuffer = eventReceiveBuffer
        let probe = try NetlinkSocket(namespace: networkNamespace, groups: 0, nonblocking: false)
        if let host, let literal = Self.numericAddress(host) {
            state.withLock { $0.hostAddresses = [literal] }
        }
        state.withLock { $0.querySocket = probe }
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
    public var isReachable: Bool {
        if case .reachable = status { return true }
        return false
    }

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
            events = try NetlinkSocket(
                namespace: networkNamespace, groups: tinyfire_nl_groups_reachability(), nonblocking: true,
                receiveBuffer: eventReceiveBuffer)
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

    /// Reads the routing state and judges it. Runs on `queue`.
    private func evaluate() -> NetworkReachabilityStatus {
        do {
            let socket = try querySocket()
            let snapshot = try socket.snapshot()
            let addresses = hostAddresses()
            guard host != nil, !addresses.isEmpty else {
                return snapshot.bestDefaultRouteInterface().map(reachable) ?? .notReachable
            }
            for address in addresses {
                guard let route = try socket.route(to: address) else { continue }
                if route.route_type == tinyfire_rtn_local, let link = snapshot.links[route.oif] { return reachable(link) }
                if let link = snapshot.links[route.oif], link.isUp { return reachable(link) }
            }
            return .notReachable
        } catch {
            logger.error("reachability: \(error)")
            state.withLock { $0.querySocket = nil }
            return .unknown
        }
    }

    private func querySocket() throws(NetworkReachabilityError) -> NetlinkSocket {
        if let socket = state.withLock({ $0.querySocket }) { return socket }
        let socket = try NetlinkSocket(namespace: networkNamespace, groups: 0, nonblocking: false)
        state.withLock { $0.querySocket = socket }
        return socket
    }

    private func reachable(_ link: RoutingSnapshot.Link) -> NetworkReachabilityStatus {
        .reachable(
            ConnectionType(interfaceName: link.name, interfaceIndex: link.index, interfaceType: interfaceType(of: link)))
    }

    /// The host's addresses as last resolved. A name is resolved in the background (never on
    /// the evaluation path, which must not wait for DNS while the network is down), at most
    /// once per `hostResolutionInterval` after a success; the evaluation that follows a new
    /// answer is scheduled then.
    private func hostAddresses() -> [SocketAddress] {
        guard let host, Self.numericAddress(host) == nil else { return state.withLock { $0.hostAddresses } }
        let (addresses, start) = state.withLock { state -> ([SocketAddress], Bool) in
            let due = state.lastResolution.map { $0.duration(to: .now) >= Self.hostResolutionInterval } ?? true
            let start = !state.resolving && (state.hostAddresses.isEmpty || due)
            if start { state.resolving = true }
            return (state.hostAddresses, start)
        }
        if start {
            resolverQueue.async { [weak self] in
                let result = DNSResolver.resolveNow(host: host, port: 0)
                guard let self else { return }
                let changed = self.state.withLock { state -> Bool in
                    state.resolving = false
                    guard case .success(let resolved) = result, !resolved.isEmpty else { return false }
                    state.lastResolution = .now
                    let changed = resolved.map(\.description) != state.hostAddresses.map(\.description)
                    state.hostAddresses = resolved
                    return changed
                }
                if changed { self.queue.async { self.scheduleEvaluation() } }
            }
        }
        return addresses
    }

    /// The address when `host` is an IPv4 or IPv6 literal.
    static func numericAddress(_ host: String) -> SocketAddress? {
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        guard let bytes = IPAddressBytes.parse(bare) else { return nil }
        var storage = sockaddr_storage()
        if bytes.count == 4 {
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            withUnsafeMutableBytes(of: &address.sin_addr) { $0.copyBytes(from: bytes) }
            withUnsafeMutableBytes(of: &storage) { raw in withUnsafeBytes(of: address) { raw.copyMemory(from: $0) } }
            return SocketAddress(storage: storage, length: socklen_t(MemoryLayout<sockaddr_in>.size))
        }
        var address = sockaddr_in6()
        address.sin6_family = sa_family_t(AF_INET6)
        withUnsafeMutableBytes(of: &address.sin6_addr) { $0.copyBytes(from: bytes) }
        withUnsafeMutableBytes(of: &storage) { raw in withUnsafeBytes(of: address) { raw.copyMemory(from: $0) } }
        return SocketAddress(storage: storage, length: socklen_t(MemoryLayout<sockaddr_in6>.size))
    }

    // MARK: - Interface types

    /// The type of `link`: an explicit override, then sysfs (`DEVTYPE=wlan|wwan`, a
    /// `wireless`/`phy80211` entry, the USB driver of a modem) when watching the process's own
    /// namespace, then the hardware type and the name.
    func interfaceType(of link: RoutingSnapshot.Link) -> InterfaceType {
        if let type = interfaceTypes[link.name] { return type }
        if networkNamespace == nil, let type = Self.sysfsType(name: link.name) { return type }
        return Self.interfaceType(name: link.name, hardwareType: link.hardwareType, kind: link.kind, isLoopback: link.isLoopback)
    }

    /// Judges by hardware type (ARPHRD_*), link kind and name alone.
    static func interfaceType(name: String, hardwareType: UInt16, kind: String, isLoopback: Bool) -> InterfaceType {
        if isLoopback { return .other }
        let cellularPrefixes = ["wwan", "ww", "rmnet", "ppp", "qmimux", "mhi"]
        let wifiPrefixes = ["wlan", "wl", "wifi", "ath", "mlan"]
        switch hardwareType {
        case 512: return .cellular  // ARPHRD_PPP
        case 519: return .cellular  // ARPHRD_RAWIP (qmi_wwan raw-ip)
        case 801, 802, 803: return .wifi  // ARPHRD_IEEE80211*
        case 1:  // ARPHRD_ETHER
            if cellularPrefixes.contains(where: name.hasPrefix) { return .cellular }
            if wifiPrefixes.contains(where: name.hasPrefix) { return .wifi }
            return .ethernet
        default:
            if cellularPrefixes.contains(where: name.hasPrefix) { return .cellular }
            if ["bridge", "vlan", "bond", "veth", "macvlan"].contains(kind) { return .ethernet }
            return .other
        }
    }

    /// USB network drivers that belong to modems or tethered phones.
    static let cellularDrivers: Set<String> = [
        "qmi_wwan", "cdc_mbim", "huawei_cdc_ncm", "sierra_net", "rndis_host", "ipheth", "option", "GobiNet", "qcserial",
    ]

    private static func sysfsType(name: String) -> InterfaceType? {
        guard !name.isEmpty, !name.contains("/"), !name.hasPrefix(".") else { return nil }
        let base = "/sys/class/net/\(name)"
        if let uevent = readSmallFile(base + "/uevent") {
            for line in uevent.split(separator: "\n") where line.hasPrefix("DEVTYPE=") {
                switch line.dropFirst("DEVTYPE=".count) {
                case "wlan": return .wifi
                case "wwan": return .cellular
                default: break
                }
            }
        }
        if access(base + "/wireless", F_OK) == 0 || access(base + "/phy80211", F_OK) == 0 { return .wifi }
        var target = [CChar](repeating: 0, count: 256)
        let length = readlink(base + "/device/driver", &target, target.count - 1)
        if length > 0 {
            let driver = cStringToString(Array(target.prefix(length))).split(separator: "/").last.map(String.init) ?? ""
            if cellularDrivers.contains(driver) { return .cellular }
        }
        return nil
    }

    private static func readSmallFile(_ path: String) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes = [UInt8](repeating: 0, count: 4096)
        let count = read(fd, &bytes, bytes.count)
        guard count > 0 else { return nil }
        return String(decoding: bytes.prefix(count), as: UTF8.self)
    }
}

/// A read source, handed between threads only under the manager's lock.
private final class EventSource: @unchecked Sendable {
    let source: any DispatchSourceRead
    init(_ source: any DispatchSourceRead) { self.source = source }
}
