import Foundation
import Synchronization
import Testing

@testable import TinyFire

/// Collects a listener's updates; tests wait for the next one with a deadline.
final class StatusRecorder: Sendable {
    private let updates = Mutex<[ReachabilityStatus]>([])
    private let consumed = Mutex(0)

    func record(_ status: ReachabilityStatus) { updates.withLock { $0.append(status) } }

    var all: [ReachabilityStatus] { updates.withLock { $0 } }

    /// The next update not returned before, waiting up to `timeout`; nil when none came.
    func next(within timeout: Duration = .seconds(30)) -> ReachabilityStatus? {
        let deadline = ContinuousClock.now + timeout
        while true {
            let index = consumed.withLock { $0 }
            if let status = updates.withLock({ $0.count > index ? $0[index] : nil }) {
                consumed.withLock { $0 += 1 }
                return status
            }
            if ContinuousClock.now >= deadline { return nil }
            Thread.sleep(forTimeInterval: 0.01)
        }
    }

    /// Updates that arrived and were not returned by `next`.
    var unread: [ReachabilityStatus] {
        let index = consumed.withLock { $0 }
        return updates.withLock { Array($0.dropFirst(index)) }
    }
}

extension ReachabilityStatus {
    var interfaceName: String? {
        if case .reachable(let connection) = self { return connection.interfaceName }
        return nil
    }
}

@Suite("Reachability in network namespaces", .serialized)
struct ReachabilityTests {
    /// A listening manager on `namespace` and its recorder, with the first update consumed.
    private func listen(
        _ namespace: NetworkNamespace, host: String? = nil, receiveBuffer: Int32 = NetworkReachabilityManager.eventReceiveBuffer
    ) throws -> (NetworkReachabilityManager, StatusRecorder, ReachabilityStatus) {
        let manager = try NetworkReachabilityManager(
            host: host, networkNamespace: namespace.path, interfaceTypes: [:], debounce: NetworkReachabilityManager.defaultDebounce,
            logger: .init(label: "test"), eventReceiveBuffer: receiveBuffer)
        let recorder = StatusRecorder()
        #expect(manager.startListening { recorder.record($0) })
        let first = try #require(recorder.next(), "no initial status")
        return (manager, recorder, first)
    }

    @Test("link down and up, carrier lost and back: each change reported as it happens")
    func linkDownAndUp() throws {
        let ns = try NetworkNamespace()
        try ns.inside(["route", "add", "default", "via", ns.hostAddress])
        let (manager, recorder, first) = try listen(ns)
        defer { manager.stopListening() }
        #expect(
            first
                == .reachable(
                    .init(interfaceName: ns.innerInterface, interfaceIndex: try #require(indexOf(first)), interfaceType: .ethernet)))
        #expect(manager.isReachable && manager.isReachableOnEthernetOrWiFi && !manager.isReachableOnCellular)

        try ns.inside(["link", "set", ns.innerInterface, "down"])
        #expect(recorder.next() == .notReachable)
        #expect(!manager.isReachable)
        // Admin-down flushed the IPv4 default route (without a netlink message for it): the
        // link coming back alone is still not reachable; the route coming back is.
        try ns.inside(["link", "set", ns.innerInterface, "up"])
        try ns.inside(["route", "add", "default", "via", ns.hostAddress])
        #expect(recorder.next()?.interfaceName == ns.innerInterface)

        // The far end goes down: carrier lost on our side, the route stays but cannot carry.
        try runIP(["link", "set", ns.hostInterface, "down"])
        #expect(recorder.next() == .notReachable)
        try runIP(["link", "set", ns.hostInterface, "up"])
        #expect(recorder.next()?.interfaceName == ns.innerInterface)
        Thread.sleep(forTimeInterval: 0.3)
        #expect(recorder.unread.isEmpty, "unexpected updates: \(recorder.unread)")
    }

    @Test("address removed and added back")
    func addressRemoved() throws {
        let ns = try NetworkNamespace()
        try ns.inside(["route", "add", "default", "via", ns.hostAddress])
        let (manager, recorder, first) = try listen(ns)
        defer { manager.stopListening() }
        #expect(first.interfaceName == ns.innerInterface)
        try ns.inside(["addr", "del", "\(ns.innerAddress)/24", "dev", ns.innerInterface])
        #expect(recorder.next() == .notReachable)
        try ns.inside(["addr", "add", "\(ns.innerAddress)/24", "dev", ns.innerInterface])
        try ns.inside(["route", "add", "default", "via", ns.hostAddress])
        #expect(recorder.next()?.interfaceName == ns.innerInterface)
    }

    @Test("default route removed and added")
    func defaultRouteRemovedAndAdded() throws {
        let ns = try NetworkNamespace()
        let (manager, recorder, first) = try listen(ns)
        defer { manager.stopListening() }
        #expect(first == .notReachable)
        try ns.inside(["route", "add", "default", "via", ns.hostAddress])
        #expect(recorder.next()?.interfaceName == ns.innerInterface)
        try ns.inside(["route", "del", "default"])
        #expect(recorder.next() == .notReachable)
        try ns.inside(["route", "add", "default", "via", ns.hostAddress, "metric", "50"])
        #expect(recorder.next()?.interfaceName == ns.innerInterface)
    }

    @Test("IPv6 only: a default route over a global IPv6 address, and a host route to an IPv6 host")
    func ipv6Only() throws {
        let ns = try NetworkNamespace()
        try ns.inside(["addr", "del", "\(ns.innerAddress)/24", "dev", ns.innerInterface])
        let prefix = "fd7e:\(String(getpid() % 0xffff, radix: 16))::"
        try runIP(["-6", "addr", "add", "\(prefix)1/64", "dev", ns.hostInterface, "nodad"])
        try ns.inside(["-6", "addr", "add", "\(prefix)2/64", "dev", ns.innerInterface, "nodad"])
        let (manager, recorder, first) = try listen(ns)
        defer { manager.stopListening() }
        #expect(first == .notReachable)
        try ns.inside(["-6", "route", "add", "default", "via", "\(prefix)1"])
        #expect(recorder.next()?.interfaceName == ns.innerInterface)
        let host = try NetworkReachabilityManager(host: "[2001:db8::7]", networkNamespace: ns.path)
        #expect(host.status.interfaceName == ns.innerInterface)
        try ns.inside(["-6", "route", "del", "default"])
        #expect(recorder.next() == .notReachable)
        #expect(host.status == .notReachable)
    }

    @Test("a host route alone: the host form is reachable, the default-route form is not")
    func hostRouteOnly() throws {
        let ns = try NetworkNamespace()
        try ns.inside(["route", "add", "192.0.2.77/32", "via", ns.hostAddress])
        let (plain, plainRecorder, plainFirst) = try listen(ns)
        defer { plain.stopListening() }
        let (hosted, hostRecorder, hostFirst) = try listen(ns, host: "192.0.2.77")
        defer { hosted.stopListening() }
        #expect(plainFirst == .notReachable)
        #expect(hostFirst.interfaceName == ns.innerInterface)
        let other = try NetworkReachabilityManager(host: "192.0.2.78", networkNamespace: ns.path)
        #expect(other.status == .notReachable)

        try ns.inside(["route", "del", "192.0.2.77/32"])
        #expect(hostRecorder.next() == .notReachable)
        // A default route makes both reachable; the host form follows it too.
        try ns.inside(["route", "add", "default", "via", ns.hostAddress])
        #expect(hostRecorder.next()?.interfaceName == ns.innerInterface)
        #expect(plainRecorder.next()?.interfaceName == ns.innerInterface)
        #expect(other.status.interfaceName == ns.innerInterface)
        // An unreachable-type route for the host wins over the default route.
        try ns.inside(["route", "add", "unreachable", "192.0.2.77/32"])
        #expect(hostRecorder.next() == .notReachable)
        Thread.sleep(forTimeInterval: 0.3)
        #expect(plainRecorder.unread.isEmpty, "the default-route form changed: \(plainRecorder.unread)")
    }

    @Test("netlink events that change nothing report nothing")
    func nothingReportedWhenNothingChanged() throws {
        let ns = try NetworkNamespace()
        try ns.inside(["route", "add", "default", "via", ns.hostAddress])
        let (manager, recorder, first) = try listen(ns)
        defer { manager.stopListening() }
        #expect(first.interfaceName == ns.innerInterface)
        Thread.sleep(forTimeInterval: 0.3)
        let before = manager.evaluationCount
        #expect(recorder.unread.isEmpty)
        // Events arrive (an extra address, a route elsewhere) but the answer stays the same.
        try ns.inside(["addr", "add", "10.250.9.9/32", "dev", "lo"])
        try ns.inside(["route", "add", "198.51.100.0/24", "via", ns.hostAddress])
        // Wait for the manager to have evaluated those events (however slowly), then look.
        waitUntil { manager.evaluationCount > before }
        #expect(manager.evaluationCount > before, "no netlink event arrived at all")
        #expect(recorder.next(within: .milliseconds(300)) == nil, "reported without a change: \(recorder.all)")
    }

    @Test("a burst of changes is one update")
    func burstIsDebounced() throws {
        let ns = try NetworkNamespace()
        try ns.inside(["route", "add", "default", "via", ns.hostAddress])
        let (manager, recorder, first) = try listen(ns)
        defer { manager.stopListening() }
        // Reachable first: otherwise the burst's outcome equals the first status and no update comes.
        #expect(first.interfaceName == ns.innerInterface)
        try ns.insideBatch([
            "route del default",
            "addr del \(ns.innerAddress)/24 dev \(ns.innerInterface)",
            "addr add \(ns.innerAddress)/24 dev \(ns.innerInterface)",
            "link set \(ns.innerInterface) down",
        ])
        #expect(recorder.next() == .notReachable)
        Thread.sleep(forTimeInterval: 0.5)
        #expect(recorder.unread.isEmpty, "more than one update for one burst: \(recorder.all)")
    }

    @Test("a netlink buffer overrun is answered by reading everything again")
    func overrunResyncs() throws {
        let ns = try NetworkNamespace()
        try ns.inside(["route", "add", "default", "via", ns.hostAddress])
        // The smallest receive buffer the kernel allows, and the manager held up while 600
        // changes happen: the kernel must drop events.
        let (manager, recorder, first) = try listen(ns, receiveBuffer: 1)
        defer { manager.stopListening() }
        #expect(first.interfaceName == ns.innerInterface)
        var lines = (0..<600).map { "addr add 10.251.\($0 / 250).\($0 % 250 + 1)/32 dev lo" }
        lines.append("route del default")
        try manager.performOnQueue { try ns.insideBatch(lines) }
        #expect(recorder.next() == .notReachable)
        #expect(manager.overrunCount >= 1)
    }

    @Test("fire-agent reachability: one line, exit status, --host and --watch")
    func command() throws {
        let ns = try NetworkNamespace()
        let down = try fireAgent(["reachability", "--netns", ns.path])
        #expect(down.status == 1)
        #expect(String(decoding: down.stdout, as: UTF8.self) == "not-reachable\n")
        try ns.inside(["route", "add", "203.0.113.5/32", "via", ns.hostAddress])
        let host = try fireAgent(["reachability", "--netns", ns.path, "--host", "203.0.113.5"])
        #expect(host.status == 0)
        #expect(String(decoding: host.stdout, as: UTF8.self) == "reachable \(ns.innerInterface) ethernet\n")
        let missing = try fireAgent(["reachability", "--netns", "/run/netns/does-not-exist"])
        #expect(missing.status == 99)
        #expect(missing.stderr.contains("/run/netns/does-not-exist"))

        try expectWatchSequence(try fireAgentPath(), ["reachability", "--watch", "--netns", ns.path], in: ns)
    }

    @Test(
        "interface types from hardware type, kind and name",
        arguments: [
            ("eth0", UInt16(1), "", InterfaceTypeCase.ethernet),
            ("enp3s0", 1, "", .ethernet),
            ("veth12", 1, "veth", .ethernet),
            ("wlan0", 1, "", .wifi),
            ("wlp2s0", 1, "", .wifi),
            ("wwan0", 1, "", .cellular),
            ("wwan0", 519, "", .cellular),
            ("rmnet_data0", 65534, "", .cellular),
            ("ppp0", 512, "", .cellular),
            ("mon0", 803, "", .wifi),
            ("tun0", 65534, "tun", .other),
            ("wg0", 65534, "wireguard", .other),
            ("br0", 1, "bridge", .ethernet),
        ])
    func interfaceTypes(name: String, hardwareType: UInt16, kind: String, expected: InterfaceTypeCase) {
        let type = NetworkReachabilityManager.interfaceType(name: name, hardwareType: hardwareType, kind: kind, isLoopback: false)
        #expect(type.rawValue == expected.rawValue)
    }

    private func indexOf(_ status: ReachabilityStatus) -> Int32? {
        if case .reachable(let connection) = status { return connection.interfaceIndex }
        return nil
    }
}

/// Mirrors `NetworkReachabilityManager.InterfaceType` for test arguments (which must be
/// Sendable and printable).
enum InterfaceTypeCase: String, Sendable, CustomTestStringConvertible {
    case ethernet, wifi, cellular, other
    var testDescription: String { rawValue }
}

/// A child process whose stdout is read line by line as it comes.
final class LineReadingProcess: @unchecked Sendable {
    private let process: ChildProcess
    private let lines = Mutex<[String]>([])
    private let consumed = Mutex(0)

    init(_ executable: String, _ arguments: [String]) throws {
        process = try ChildProcess(executable, arguments, stdout: .pipe)
        let fd = process.stdoutPipe
        let child = process
        Thread.detachNewThread { [self] in
            var pending: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 4096)
            while true {
                let n = read(fd, &buffer, buffer.count)
                if n < 0 && errno == EINTR { continue }
                if n <= 0 { break }
                pending += buffer[0..<n]
                while let newline = pending.firstIndex(of: 0x0A) {
                    let line = String(decoding: pending[..<newline], as: UTF8.self)
                    pending.removeSubrange(...newline)
                    self.lines.withLock { $0.append(line) }
                }
            }
            child.closePipes()
        }
    }

    /// The next line, waiting up to `timeout`.
    func nextLine(within timeout: Duration = .seconds(30)) -> String? {
        let deadline = ContinuousClock.now + timeout
        while true {
            let index = consumed.withLock { $0 }
            if let line = lines.withLock({ $0.count > index ? $0[index] : nil }) {
                consumed.withLock { $0 += 1 }
                return line
            }
            if ContinuousClock.now >= deadline { return nil }
            Thread.sleep(forTimeInterval: 0.01)
        }
    }

    func terminate() {
        process.stop()
    }
}

/// `PROGRAM ARGUMENTS` (a `reachability --watch` in `ns`) through a default route coming and
/// the link going down: one line per change, and nothing more. Both builds of fire-agent are held
/// to it (ReachabilityTests, EmbeddedAgentTests).
func expectWatchSequence(_ program: String, _ arguments: [String], in ns: NetworkNamespace) throws {
    let watcher = try LineReadingProcess(program, arguments)
    defer { watcher.terminate() }
    #expect(watcher.nextLine() == "not-reachable")
    try ns.inside(["route", "add", "default", "via", ns.hostAddress])
    #expect(watcher.nextLine() == "reachable \(ns.innerInterface) ethernet")
    try ns.inside(["link", "set", ns.innerInterface, "down"])
    #expect(watcher.nextLine() == "not-reachable")
    #expect(watcher.nextLine(within: .milliseconds(300)) == nil)
}
