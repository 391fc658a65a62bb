import Foundation
import Testing

/// The agent draining a backlog over a bad link it cannot see the end of: `fire-agent run` in a
/// network namespace whose veth drops 10 % of packets each way (iptables -m statistic), to a
/// relay that holds every chunk 100 ms each way before the recording server. What is measured
/// in `bench/slowlink.sh` is only asserted here as behaviour: every line arrives, few batches,
/// nothing doubled beyond what was in flight.
@Suite("Delivery over a lossy, slow link (network namespace, iptables loss, delaying relay)", .serialized)
struct SlowLinkTests {
    /// The repository (the relay is bench/slowlink.sh's own).
    static let root = URL(filePath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().path(percentEncoded: false)

    /// A TCP relay on `address:port` to 127.0.0.1:`target`, every chunk held `delay` seconds.
    func relay(address: String, target: Int, delay: Double) throws -> (ChildProcess, Int) {
        let port = freePort()
        let process = try ChildProcess(
            which("python3") ?? "/usr/bin/python3",
            [Self.root + "/bench/delay-relay.py", address, String(port), String(target), String(delay)])
        try waitForPort(port, host: address)
        return (process, port)
    }

    @Test(
        "120 spool files over 10 % loss and a 200 ms round trip: every line delivered, in a few filled batches, at most the batches in flight sent twice"
    )
    func drainOverBadLink() async throws {
        guard let iptables = which("iptables") ?? (access("/usr/sbin/iptables", X_OK) == 0 ? "/usr/sbin/iptables" : nil) else {
            throw FixtureError(description: "iptables is not installed (scripts/install-deps.sh installs it)")
        }
        let directory = try agentScratch("slowlink")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let namespace = try NetworkNamespace()
        defer { namespace.close() }
        for (chain, flag) in [("OUTPUT", "-o"), ("INPUT", "-i")] {
            let result = try runCapturingOutput(
                which("ip") ?? "/usr/sbin/ip",
                [
                    "netns", "exec", namespace.name, iptables, "-A", chain, flag, namespace.innerInterface, "-m", "statistic", "--mode",
                    "random",
                    "--probability", "0.1", "-j", "DROP",
                ])
            #expect(result.status == 0, "\(result.stderr)")
        }
        let recorder = try RecordingInflux(directory: directory)
        defer { recorder.stop() }
        recorder.open()
        let (relayProcess, relayPort) = try relay(address: namespace.hostAddress, target: recorder.port, delay: 0.1)
        defer { relayProcess.stop() }
        let files = 120
        let lines = 5
        try FileManager.default.createDirectory(atPath: directory + "/spool", withIntermediateDirectories: true)
        for index in 0..<files {
            let text = (0..<lines).map { line in
                let sequence = index * lines + line
                return "slow,file=f\(index) seq=\(sequence)i \(1_700_000_000_000_000_000 + sequence)\n"
            }.joined()
            try dropInSpool(text, as: String(format: "f%04d.lp", index), in: directory)
        }
        let collectorsOff =
            "cpu: false, memory: false, load: false, uptime: false, disk: false, network: false, thermal: false, pressure: false, agent: false"
        try """
        {
          device: { id: "slow-board" },
          server: { url: "http://\(namespace.hostAddress):\(relayPort)", connectTimeout: "5s", requestTimeout: "60s" },
          telemetry: { interval: "1h", syncInterval: "1s", jitter: 0, spoolDirectory: "spool", batch: { maxPoints: 100 },
                       collectors: { \(collectorsOff) }, influx: { database: "fleet", precision: "ns" } },
          queue: { directory: "queue", retry: { initial: "200ms", maximum: "2s" } },
          daemon: { statusFile: "status.json" },
        }
        """.write(toFile: directory + "/agent.json5", atomically: true, encoding: .utf8)
        let agent = try ChildProcess(
            which("ip") ?? "/usr/sbin/ip",
            ["netns", "exec", namespace.name, try fireAgentPath(), "run", "--config", directory + "/agent.json5"],
            stdout: .file(directory + "/agent.log"), stderr: .file(directory + "/agent.log"))
        defer { agent.stop() }
        func sequences() -> [Int] {
            ((try? recorder.lines()) ?? []).compactMap { line in
                guard let range = line.range(of: " seq="), let end = line[range.upperBound...].firstIndex(of: "i") else { return nil }
                return Int(line[range.upperBound..<end])
            }
        }
        let total = files * lines
        let drained = await drains { total - Set(sequences()).count }
        #expect(
            drained,
            "\(Set(sequences()).count) of \(total) lines: \((try? String(contentsOfFile: directory + "/agent.log", encoding: .utf8)) ?? "")"
        )
        agent.signal(SIGTERM)
        #expect(agent.wait() == 0)
        let seen = sequences()
        #expect(Set(seen).count == total, "lines lost")
        // Filled across files: 600 lines in batches of up to 100, not 120 batches; a batch sent
        // again (a cut connection) may double its lines, never more than the four in flight.
        #expect(seen.count - total <= 4 * 100, "\(seen.count - total) lines sent twice")
        #expect(recorder.requests() <= 6 + 8, "\(recorder.requests()) requests for 6 batches")
    }
}
