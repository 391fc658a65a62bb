import Foundation
import Synchronization

/// A network namespace made for one test, joined to the host by a veth pair:
/// `hostInterface` (10.X.Y.1/24, in the test process's namespace) and `innerInterface`
/// (10.X.Y.2/24, inside). Needs root (CI runs as root). Deleted on `close()` or deinit.
final class NetworkNamespace: @unchecked Sendable {
    private static let counter = Mutex(0)

    let name: String
    let hostInterface: String
    let innerInterface: String
    let hostAddress: String
    let innerAddress: String
    private var closed = false

    /// The file `setns(2)` and `NetworkReachabilityManager(networkNamespace:)` take.
    var path: String { "/run/netns/\(name)" }

    /// Creates the namespace with its links up and addresses set, and no default route.
    init() throws {
        let number = Self.counter.withLock {
            $0 += 1
            return $0
        }
        let pid = Int(getpid()) % 100_000
        name = "tinyfire-\(pid)-\(number)"
        hostInterface = "tfh\(pid)n\(number)"
        innerInterface = "tfi\(pid)n\(number)"
        let subnet = "10.\(100 + number % 100).\(pid % 250)"
        hostAddress = "\(subnet).1"
        innerAddress = "\(subnet).2"
        removeLeftovers()
        try runIP(["netns", "add", name])
        do {
            try runIP(["link", "add", hostInterface, "type", "veth", "peer", "name", innerInterface, "netns", name])
            try runIP(["addr", "add", "\(hostAddress)/24", "dev", hostInterface])
            try runIP(["link", "set", hostInterface, "up"])
            try inside(["link", "set", "lo", "up"])
            try inside(["addr", "add", "\(innerAddress)/24", "dev", innerInterface])
            try inside(["link", "set", innerInterface, "up"])
            try waitForCarrier()
        } catch {
            close()
            throw error
        }
    }

    deinit { close() }

    /// Waits (up to 10 s) until both ends of the veth pair are operationally up. The kernel
    /// raises IFF_RUNNING through its link watcher, which may lag `link set up` by up to a
    /// second under load; a test that starts listening before then sees "not reachable" first.
    private func waitForCarrier() throws {
        let deadline = ContinuousClock.now + .seconds(10)
        while true {
            let host = try runIP(["-o", "link", "show", "dev", hostInterface])
            let inner = try runIP(["-n", name, "-o", "link", "show", "dev", innerInterface])
            if host.contains("state UP"), inner.contains("state UP") { return }
            guard ContinuousClock.now < deadline else {
                throw FixtureError(description: "veth \(hostInterface)/\(innerInterface) did not come up within 10 s: \(inner)")
            }
            Thread.sleep(forTimeInterval: 0.02)
        }
    }

    /// Runs `ip -n NAME ARGS`.
    func inside(_ arguments: [String]) throws {
        try runIP(["-n", name] + arguments)
    }

    /// Runs a whole `ip -batch` script inside the namespace at once (a burst of changes).
    func insideBatch(_ lines: [String]) throws {
        let script = FileManager.default.temporaryDirectory.appendingPathComponent("\(name)-batch-\(UUID().uuidString)")
        try (lines.joined(separator: "\n") + "\n").write(to: script, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: script) }
        try runIP(["-n", name, "-batch", script.path])
    }

    /// A namespace or link with this name was left by an earlier run that died before closing
    /// it: the name holds this process's pid and a number it has not used yet, so whoever made
    /// it has exited. Removed, so that the test does not depend on the state of the machine.
    private func removeLeftovers() {
        if FileManager.default.fileExists(atPath: path) {
            _ = try? runIP(["netns", "del", name])
        }
        if (try? runIP(["-o", "link", "show", "dev", hostInterface])) != nil {
            _ = try? runIP(["link", "del", hostInterface])
        }
    }

    /// Deletes the namespace (and with it both ends of the veth pair).
    func close() {
        guard !closed else { return }
        closed = true
        _ = try? runIP(["netns", "del", name])
        _ = try? runIP(["link", "del", hostInterface])
    }
}

/// Runs `ip ARGS`; throws with its stderr when it fails.
@discardableResult
func runIP(_ arguments: [String]) throws -> String {
    guard let ip = which("ip") else { throw FixtureError(description: "ip(8) not found (Debian: iproute2)") }
    return try runCommand(ip, arguments)
}
