import CTinyFireSystem

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// A failure of the rtnetlink socket behind reachability (`RouteJudge`, TinyFire's
/// `NetworkReachabilityManager`, the agent's daemon).
public struct NetworkReachabilityError: Error, Sendable, CustomStringConvertible {
    /// What was being done: "open a netlink socket", "enter network namespace /run/netns/x", …
    public var operation: String
    /// The errno value.
    public var code: Int32

    /// Creates a value.
    /// - Parameters:
    ///   - operation: what was being done.
    ///   - code: the errno value.
    public init(operation: String, code: Int32) {
        self.operation = operation
        self.code = code
    }

    /// `cannot OPERATION: strerror(code)`.
    public var description: String { "cannot \(operation): \(errnoMessage(code))" }
}

/// One rtnetlink socket; owns its descriptor and one receive buffer.
///
/// Memory: the receive buffer (`bufferSize`, 32 KiB) plus the socket's kernel receive buffer
/// (`receiveBuffer` bytes when set).
/// Not thread-safe: each socket is used by one thread at a time.
package final class NetlinkSocket: @unchecked Sendable {
    package static let bufferSize = 32 * 1024
    /// How many times a dump the kernel marks as interrupted is started again.
    package static let dumpRestartLimit = 5

    package let fd: Int32
    private var sequence: UInt32 = 0
    private var buffer = [UInt8](repeating: 0, count: NetlinkSocket.bufferSize)

    /// Opens a socket.
    /// - Parameters:
    ///   - namespace: a network namespace file (`/run/netns/NAME`) or nil for the caller's.
    ///   - groups: multicast groups to join (0 for a query socket).
    ///   - nonblocking: event sockets are non-blocking; query sockets block with a timeout.
    ///   - receiveBuffer: SO_RCVBUF in bytes, or 0 for the system default.
    /// - Throws: `NetworkReachabilityError` naming the namespace or the socket call.
    package init(namespace: String?, groups: UInt32, nonblocking: Bool, receiveBuffer: Int32 = 0) throws(NetworkReachabilityError) {
        let result = tinyfire_nl_open(namespace, groups, nonblocking ? 1 : 0, 2000, receiveBuffer)
        guard result >= 0 else {
            let operation = namespace.map { "open a netlink socket in network namespace \($0)" } ?? "open a netlink socket"
            throw NetworkReachabilityError(operation: operation, code: -result)
        }
        fd = result
    }

    deinit { close(fd) }

    /// Reads the kernel's links, addresses and routes into a new snapshot. A dump the kernel
    /// marks as interrupted (the tables changed meanwhile) is started again, up to
    /// `dumpRestartLimit` times.
    /// - Throws: `NetworkReachabilityError` when sending or receiving fails.
    package func snapshot() throws(NetworkReachabilityError) -> RoutingSnapshot {
        var attempt = 0
        while true {
            var snapshot = RoutingSnapshot()
            var interrupted = false
            for type in [tinyfire_rtm_getlink, tinyfire_rtm_getaddr, tinyfire_rtm_getroute] {
                interrupted = try dump(type) { snapshot.apply($0) } || interrupted
            }
            attempt += 1
            if !interrupted || attempt > Self.dumpRestartLimit { return snapshot }
        }
    }

    /// Sends one dump request and hands each answer to `handle`. Returns whether the kernel
    /// flagged the dump as interrupted.
    private func dump(_ type: UInt16, handle: (tinyfire_nl_item) -> Void) throws(NetworkReachabilityError) -> Bool {
        sequence &+= 1
        let seq = sequence
        let sent = tinyfire_nl_request_dump(fd, type, UInt8(AF_UNSPEC), seq)
        guard sent == 0 else { throw NetworkReachabilityError(operation: "send a netlink dump request", code: -sent) }
        var interrupted = false
        while true {
            let count = receive()
            guard count > 0 else {
                throw NetworkReachabilityError(operation: "read a netlink dump", code: count == 0 ? EPROTO : Int32(-count))
            }
            var done = false
            try decode(count: Int(count)) { item throws(NetworkReachabilityError) in
                guard item.seq == seq else { return }
                if item.msg_flags & tinyfire_nlm_f_dump_intr != 0 { interrupted = true }
                if item.msg_type == tinyfire_nlmsg_done {
                    done = true
                } else if item.msg_type == tinyfire_nlmsg_error {
                    if item.error != 0 { throw NetworkReachabilityError(operation: "dump the routing tables", code: -item.error) }
                } else {
                    handle(item)
                }
            }
            if done { return interrupted }
        }
    }

    /// The kernel's answer to "which route reaches this address" (`ip route get`): the route,
    /// or nil when the kernel has none (network unreachable, prohibited, blackhole).
    /// - Throws: `NetworkReachabilityError` when the socket fails.
    package func route(to address: SocketAddress) throws(NetworkReachabilityError) -> tinyfire_nl_item? {
        sequence &+= 1
        let seq = sequence
        var storage = address.storage
        let sent = withUnsafePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { tinyfire_nl_request_route(fd, $0, seq) }
        }
        guard sent == 0 else { throw NetworkReachabilityError(operation: "send a netlink route lookup", code: -sent) }
        while true {
            let count = receive()
            guard count > 0 else {
                throw NetworkReachabilityError(operation: "read a netlink route lookup", code: count == 0 ? EPROTO : Int32(-count))
            }
            var answer: tinyfire_nl_item?
            var refused = false
            try decode(count: Int(count)) { item throws(NetworkReachabilityError) in
                guard item.seq == seq else { return }
                if item.msg_type == tinyfire_nlmsg_error {
                    refused = item.error != 0
                } else if item.msg_type == tinyfire_rtm_newroute {
                    answer = item
                }
            }
            if refused { return nil }
            if let answer { return answer.route_type == tinyfire_rtn_unicast || answer.route_type == tinyfire_rtn_local ? answer : nil }
        }
    }

    /// What draining a non-blocking event socket found.
    package enum DrainResult: Equatable {
        /// This many messages were read (0: nothing was waiting).
        case messages(Int)
        /// The kernel dropped messages (ENOBUFS): the caller's view must be rebuilt.
        case overrun
        /// The socket failed with this errno.
        case failed(Int32)
    }

    /// Reads every waiting message of an event socket and counts them.
    package func drain() -> DrainResult {
        var messages = 0
        while true {
            let count = receive()
            if count == -Int(EAGAIN) || count == -Int(EWOULDBLOCK) { return .messages(messages) }
            if count == -Int(ENOBUFS) { return .overrun }
            if count <= 0 { return .failed(count == 0 ? EPROTO : Int32(-count)) }
            var offset = 0
            var item = tinyfire_nl_item()
            while buffer.withUnsafeBufferPointer({ tinyfire_nl_next($0.baseAddress, count, &offset, &item) }) == 1 {
                messages += 1
            }
        }
    }

    private func receive() -> Int {
        buffer.withUnsafeMutableBufferPointer { tinyfire_nl_receive(fd, $0.baseAddress, $0.count) }
    }

    private func decode(count: Int, _ body: (tinyfire_nl_item) throws(NetworkReachabilityError) -> Void) throws(NetworkReachabilityError) {
        var offset = 0
        var item = tinyfire_nl_item()
        while true {
            let status = buffer.withUnsafeBufferPointer { tinyfire_nl_next($0.baseAddress, count, &offset, &item) }
            if status == 0 { return }
            guard status == 1 else { throw NetworkReachabilityError(operation: "decode a netlink message", code: EBADMSG) }
            try body(item)
        }
    }
}

/// The part of the kernel's routing state that reachability depends on: links, which links
/// have a usable address of each family, and the default routes of the main table. Built
/// from dump answers; no I/O.
///
/// Memory: at most `linkLimit` links, `addressLimit` usable addresses and `routeLimit`
/// default routes are kept; routes that are not default routes are not stored at all.
package struct RoutingSnapshot: Sendable, Equatable {
    package static let linkLimit = 1024
    package static let addressLimit = 4096
    package static let routeLimit = 256

    /// One network interface.
    package struct Link: Sendable, Equatable {
        package var index: Int32
        package var name: String
        package var flags: UInt32
        package var hardwareType: UInt16
        package var kind: String

        /// Administratively up with its carrier on (IFF_UP and IFF_RUNNING).
        package var isUp: Bool { flags & tinyfire_iff_up != 0 && flags & tinyfire_iff_running != 0 }
        package var isLoopback: Bool { flags & tinyfire_iff_loopback != 0 }
    }

    /// A route to 0.0.0.0/0 or ::/0.
    package struct DefaultRoute: Sendable, Equatable {
        package var family: Int32
        package var interfaces: [Int32]
        package var metric: UInt32
    }

    package var links: [Int32: Link] = [:]
    /// Interface index → address family → usable addresses (global scope, not tentative).
    package var usableAddresses: [Int32: [Int32: Int]] = [:]
    package var defaultRoutes: [DefaultRoute] = []
    private var addressCount = 0

    /// An empty snapshot, for `apply` to fill.
    package init() {}

    /// Adds one dump answer.
    package mutating func apply(_ item: tinyfire_nl_item) {
        switch item.msg_type {
        case tinyfire_rtm_newlink:
            guard links.count < Self.linkLimit || links[item.ifindex] != nil else { return }
            var name = item.ifname
            var kind = item.kind
            links[item.ifindex] = Link(
                index: item.ifindex, name: Self.string(&name), flags: item.ifflags, hardwareType: item.arphrd,
                kind: Self.string(&kind))
        case tinyfire_rtm_newaddr:
            let usable =
                item.scope != tinyfire_rt_scope_host && item.scope != tinyfire_rt_scope_link
                && item.addr_flags & (tinyfire_ifa_f_tentative | tinyfire_ifa_f_dadfailed) == 0
            guard usable, addressCount < Self.addressLimit else { return }
            addressCount += 1
            usableAddresses[item.ifindex, default: [:]][Int32(item.family), default: 0] += 1
        case tinyfire_rtm_newroute:
            guard item.prefixlen == 0, item.table == tinyfire_rt_table_main, item.route_type == tinyfire_rtn_unicast,
                defaultRoutes.count < Self.routeLimit
            else { return }
            var hops = item.nexthop_oifs
            let multipath = withUnsafeBytes(of: &hops) { Array($0.bindMemory(to: Int32.self).prefix(Int(min(item.nexthop_count, 4)))) }
            var interfaces = multipath.isEmpty ? [item.oif] : multipath.filter { $0 != 0 }
            if item.route_flags & (tinyfire_rtnh_f_linkdown | tinyfire_rtnh_f_dead) != 0 { interfaces = [] }
            defaultRoutes.append(DefaultRoute(family: Int32(item.family), interfaces: interfaces, metric: item.priority))
        default:
            break
        }
    }

    /// Whether some up, non-loopback interface has a usable address of `family`.
    package func hasUsableAddress(family: Int32) -> Bool {
        usableAddresses.contains { index, families in
            guard let link = links[index], link.isUp, !link.isLoopback else { return false }
            return (families[family] ?? 0) > 0
        }
    }

    /// The interface of the best default route that can carry traffic: its interface is up,
    /// and an address of its family exists to send from. Lowest metric wins; IPv4 first on a
    /// tie.
    package func bestDefaultRouteInterface() -> Link? {
        let ordered = defaultRoutes.sorted { ($0.metric, $0.family == AF_INET ? 0 : 1) < ($1.metric, $1.family == AF_INET ? 0 : 1) }
        for route in ordered where hasUsableAddress(family: route.family) {
            for index in route.interfaces {
                if let link = links[index], link.isUp, !link.isLoopback { return link }
            }
        }
        return nil
    }

    private static func string<T>(_ tuple: inout T) -> String {
        withUnsafeBytes(of: &tuple) { raw in
            String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
        }
    }
}
