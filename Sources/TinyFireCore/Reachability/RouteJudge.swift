import CTinyFireSystem

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// The interface traffic would leave through.
public struct ReachabilityConnection: Sendable, Equatable, CustomStringConvertible {
    /// The interface's name (`eth0`, `wlan0`, `wwan0`).
    public var interfaceName: String
    /// The kernel's interface index.
    public var interfaceIndex: Int32
    /// What kind of network it is.
    public var interfaceType: NetworkInterfaceType

    /// Creates a value.
    /// - Parameters:
    ///   - interfaceName: the name.
    ///   - interfaceIndex: the index.
    ///   - interfaceType: the kind.
    public init(interfaceName: String, interfaceIndex: Int32, interfaceType: NetworkInterfaceType) {
        self.interfaceName = interfaceName
        self.interfaceIndex = interfaceIndex
        self.interfaceType = interfaceType
    }

    /// `NAME TYPE`, e.g. `eth0 ethernet`.
    public var description: String { "\(interfaceName) \(interfaceType.rawValue)" }
}

/// Whether the network can be reached.
public enum ReachabilityStatus: Sendable, Equatable, CustomStringConvertible {
    /// Not evaluated yet, or the kernel could not be asked.
    case unknown
    /// No usable route.
    case notReachable
    /// Reachable through this interface.
    case reachable(ReachabilityConnection)

    /// `unknown`, `not-reachable`, or `reachable NAME TYPE`.
    public var description: String {
        switch self {
        case .unknown: return "unknown"
        case .notReachable: return "not-reachable"
        case .reachable(let connection): return "reachable \(connection)"
        }
    }

    /// Whether this is `.reachable`.
    public var isReachable: Bool {
        if case .reachable = self { return true }
        return false
    }
}

/// Judges reachability from the kernel's routing state, read on demand over rtnetlink: the
/// one implementation behind TinyFire's `NetworkReachabilityManager` (which watches on
/// Dispatch) and the agent's daemon (which watches from its own poll loop). No I/O until
/// `evaluate` is called, and no thread of its own: a host name is resolved on a short-lived
/// thread (`BlockingWork`) so that an evaluation never waits for DNS while the network is down.
///
/// - Without a host: reachable when the main table has a default route whose interface is up
///   (administratively up, carrier on) and some up interface holds a usable address of that
///   family (global scope, not tentative).
/// - With a host: the kernel is asked which route it would use to reach it (`ip route get`),
///   so policy routing and host or network routes without a default route count; the route's
///   interface must be up. A name that does not resolve yet is judged by the default route.
///
/// Memory: one query socket with a 32 KiB receive buffer, a routing snapshot bounded by
/// `RoutingSnapshot`'s limits while an evaluation runs, and the host's last addresses.
/// Thread-safe: evaluations are serialized.
package final class RouteJudge: Sendable {
    /// How long a resolved host address is reused before it is resolved again: 60 s.
    package static let hostResolutionInterval: Duration = .seconds(60)

    /// The host whose route is evaluated, or nil for "any default route".
    package let host: String?
    /// The network namespace judged (a `/run/netns/NAME` path), or nil for the process's own.
    package let networkNamespace: String?
    /// Types for interfaces by exact name, overriding the built-in rules.
    package let interfaceTypes: [String: NetworkInterfaceType]
    /// The query socket, held for a whole evaluation; nil after it failed (reopened next time).
    private let querySocket: Locked<NetlinkSocket?>
    private let resolution = Locked(Resolution())

    private struct Resolution {
        var addresses: [SocketAddress] = []
        var last: Instant?
        var resolving = false
    }

    /// Creates a judge and checks that netlink can be used.
    /// - Parameters:
    ///   - host: the host whose route counts (a name or an IP literal, brackets allowed), or nil.
    ///   - networkNamespace: a network namespace file (`/run/netns/NAME`, `/proc/PID/ns/net`)
    ///     to judge instead of the process's own. Interface types are then judged without sysfs
    ///     (which shows the process's namespace).
    ///   - interfaceTypes: types by interface name, before the built-in rules.
    /// - Throws: `NetworkReachabilityError` when the namespace or the socket cannot be opened.
    package init(host: String?, networkNamespace: String?, interfaceTypes: [String: NetworkInterfaceType] = [:])
        throws(NetworkReachabilityError)
    {
        self.host = host
        self.networkNamespace = networkNamespace
        self.interfaceTypes = interfaceTypes
        querySocket = Locked(try NetlinkSocket(namespace: networkNamespace, groups: 0, nonblocking: false))
        if let host, let literal = Self.numericAddress(host) {
            resolution.withLock { $0.addresses = [literal] }
        }
    }

    /// Opens a socket that receives the kernel's link, address and route events for this
    /// judge's namespace (non-blocking; poll its `fd`, then `drain()` it and evaluate).
    /// - Parameter receiveBuffer: SO_RCVBUF in bytes (an overrun means "read everything again").
    /// - Throws: `NetworkReachabilityError` when it cannot be opened.
    package func eventSocket(receiveBuffer: Int32) throws(NetworkReachabilityError) -> NetlinkSocket {
        try NetlinkSocket(
            namespace: networkNamespace, groups: tinyfire_nl_groups_reachability(), nonblocking: true, receiveBuffer: receiveBuffer)
    }

    /// Resolves a host name now, on this thread, when its addresses are not known yet (a
    /// one-shot judgment, which has no later evaluation to wait for). Nothing for an address
    /// literal, no host, or a name that does not resolve (judged by the default route then).
    package func resolveHost() {
        guard let host, Self.numericAddress(host) == nil, resolution.withLock({ $0.addresses.isEmpty }) else { return }
        guard case .success(let resolved) = DNSResolver.resolveNow(host: host, port: 0), !resolved.isEmpty else { return }
        resolution.withLock { state in
            state.addresses = resolved
            state.last = .now()
        }
    }

    /// Reads the routing state and judges it.
    /// - Parameter addressesChanged: called on another thread when a host name's resolution
    ///   brought new addresses (the caller evaluates again then).
    /// - Returns: the status, and the netlink failure that made it `.unknown`, if any.
    package func evaluate(addressesChanged: @escaping @Sendable () -> Void) -> (
        status: ReachabilityStatus, failure: NetworkReachabilityError?
    ) {
        let addresses = hostAddresses(changed: addressesChanged)
        return querySocket.withLock { held -> (status: ReachabilityStatus, failure: NetworkReachabilityError?) in
            do throws(NetworkReachabilityError) {
                let socket: NetlinkSocket
                if let open = held {
                    socket = open
                } else {
                    socket = try NetlinkSocket(namespace: networkNamespace, groups: 0, nonblocking: false)
                    held = socket
                }
                return (try judge(socket, addresses: addresses), nil)
            } catch {
                held = nil
                return (.unknown, error)
            }
        }
    }

    private func judge(_ socket: NetlinkSocket, addresses: [SocketAddress]) throws(NetworkReachabilityError) -> ReachabilityStatus {
        let snapshot = try socket.snapshot()
        guard host != nil, !addresses.isEmpty else {
            guard let link = snapshot.bestDefaultRouteInterface() else { return .notReachable }
            return reachable(link)
        }
        for address in addresses {
            guard let route = try socket.route(to: address) else { continue }
            if route.route_type == tinyfire_rtn_local, let link = snapshot.links[route.oif] { return reachable(link) }
            if let link = snapshot.links[route.oif], link.isUp { return reachable(link) }
        }
        return .notReachable
    }

    private func reachable(_ link: RoutingSnapshot.Link) -> ReachabilityStatus {
        .reachable(ReachabilityConnection(interfaceName: link.name, interfaceIndex: link.index, interfaceType: interfaceType(of: link)))
    }

    /// The host's addresses as last resolved. A name is resolved in the background at most once
    /// per `hostResolutionInterval` after a success, and `changed` is called when the answer
    /// differs from what was known.
    private func hostAddresses(changed: @escaping @Sendable () -> Void) -> [SocketAddress] {
        guard let host, Self.numericAddress(host) == nil else { return resolution.withLock { $0.addresses } }
        let now = Instant.now()
        let (addresses, start) = resolution.withLock { state -> ([SocketAddress], Bool) in
            let due = state.last.map { now.since($0) >= Self.hostResolutionInterval } ?? true
            let start = !state.resolving && (state.addresses.isEmpty || due)
            if start { state.resolving = true }
            return (state.addresses, start)
        }
        guard start else { return addresses }
        let resolution = resolution
        do {
            try BlockingWork.run(label: "fire-route-dns") {
                let result = DNSResolver.resolveNow(host: host, port: 0)
                let isNew = resolution.withLock { state -> Bool in
                    state.resolving = false
                    guard case .success(let resolved) = result, !resolved.isEmpty else { return false }
                    state.last = .now()
                    let isNew = !Self.sameAddresses(resolved, state.addresses)
                    state.addresses = resolved
                    return isNew
                }
                if isNew { changed() }
            }
        } catch {
            // No thread now: judged by what is known, resolved at the next evaluation.
            resolution.withLock { $0.resolving = false }
        }
        return addresses
    }

    private static func sameAddresses(_ a: [SocketAddress], _ b: [SocketAddress]) -> Bool {
        guard a.count == b.count else { return false }
        for index in 0..<a.count where a[index].description != b[index].description { return false }
        return true
    }

    /// The address when `host` is an IPv4 or IPv6 literal (brackets allowed).
    package static func numericAddress(_ host: String) -> SocketAddress? {
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
    /// `wireless`/`phy80211` entry, the USB driver of a modem) when judging the process's own
    /// namespace, then the hardware type and the name.
    package func interfaceType(of link: RoutingSnapshot.Link) -> NetworkInterfaceType {
        if let type = interfaceTypes[link.name] { return type }
        if networkNamespace == nil, let type = Self.sysfsType(name: link.name) { return type }
        return Self.interfaceType(name: link.name, hardwareType: link.hardwareType, kind: link.kind, isLoopback: link.isLoopback)
    }

    private static let cellularPrefixes = ["wwan", "ww", "rmnet", "ppp", "qmimux", "mhi"]
    private static let wifiPrefixes = ["wlan", "wl", "wifi", "ath", "mlan"]

    /// Judges by hardware type (ARPHRD_*), link kind and name alone.
    package static func interfaceType(name: String, hardwareType: UInt16, kind: String, isLoopback: Bool) -> NetworkInterfaceType {
        if isLoopback { return .other }
        let cellularName = cellularPrefixes.contains { name.hasPrefix($0) }
        switch hardwareType {
        case 512: return .cellular  // ARPHRD_PPP
        case 519: return .cellular  // ARPHRD_RAWIP (qmi_wwan raw-ip)
        case 801, 802, 803: return .wifi  // ARPHRD_IEEE80211*
        case 1:  // ARPHRD_ETHER
            if cellularName { return .cellular }
            if wifiPrefixes.contains(where: { name.hasPrefix($0) }) { return .wifi }
            return .ethernet
        default:
            if cellularName { return .cellular }
            if ["bridge", "vlan", "bond", "veth", "macvlan"].contains(kind) { return .ethernet }
            return .other
        }
    }

    /// USB network drivers that belong to modems or tethered phones.
    package static let cellularDrivers: Set<String> = [
        "qmi_wwan", "cdc_mbim", "huawei_cdc_ncm", "sierra_net", "rndis_host", "ipheth", "option", "GobiNet", "qcserial",
    ]

    private static func sysfsType(name: String) -> NetworkInterfaceType? {
        guard !name.isEmpty, !name.utf8.contains(UInt8(ascii: "/")), !name.hasPrefix(".") else { return nil }
        let base = "/sys/class/net/" + name
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
            let path = cStringToString(Array(target.prefix(length)))
            let driver = path.split(separator: "/").last.map { String($0) } ?? ""
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
