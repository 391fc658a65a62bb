import Foundation
import Testing
import TinyFire

@testable import FireAgent

/// `fire-agent run` of the Embedded binary (x86_64 natively, armv7 and aarch64 under qemu-user)
/// against influxd, signalled as systemd and operators signal it: what DaemonTests ask of the
/// full-Swift binary, with the same configs, helpers and expected texts.
@Suite(
    "the Embedded fire-agent's daemon (armv7 and aarch64 under qemu) against influxd: schedule, outage, reload, systemd, routes",
    .serialized)
struct EmbeddedDaemonTests {
    /// DaemonTests' configs, waits and log helpers.
    let host = DaemonTests()

    func start(_ agent: EmbeddedAgent, _ arguments: [String], environment: [String: String], log: String, namespace: String? = nil)
        throws -> ChildProcess
    {
        var (program, all) = try agent.command(arguments)
        if let namespace {
            // ip execs the program inside the namespace: the child is the agent (or qemu) itself.
            all = ["netns", "exec", namespace, program] + all
            program = which("ip") ?? "/usr/sbin/ip"
        }
        return try ChildProcess(program, all, environment: environment, stdout: .file(log), stderr: .file(log))
    }

    @Test(
        "run: collects and syncs on schedule, a spool file arrives once; an outage shows in status and every point arrives once after; systemd's READY, WATCHDOG, RELOADING and STOPPING; a bad reload keeps the config, a good one takes; SIGTERM stops",
        arguments: EmbeddedAgent.all)
    func daemon(_ agent: EmbeddedAgent) async throws {
        let influx = try InfluxFixture()
        let directory = try agentScratch("embedded-run-\(agent.arch)")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = try host.writeConfig(server: influx.base, in: directory)
        let socket = directory + "/notify"
        let listener = try DatagramListener(path: socket)
        let log = directory + "/log"
        let process = try start(
            agent, ["run", "--config", path], environment: host.inherited(["NOTIFY_SOCKET": socket, "WATCHDOG_USEC": "2000000"]),
            log: log)
        defer { process.stop() }
        #expect(listener.receive() == "READY=1\nSTATUS=running", "\(host.log(directory))")
        #expect(host.nextMessage(listener, startingWith: "WATCHDOG=1") == "WATCHDOG=1")

        // The schedule: collection repeats, the spool file arrives once, the status says so.
        try dropInSpool(host.points("app", round: 1, count: 30), as: "app.lp", in: directory)
        #expect(
            await eventually(within: .seconds(120)) { (try? influx.count("app", field: "v")) == 30 },
            "the spool file did not arrive: \(host.log(directory))")
        #expect(await eventually(within: .seconds(120)) { (try? influx.count("mem", field: "total")) ?? 0 >= 2 }, "no repeated collection")
        let tagged = try influx.rows(#"SELECT "total" FROM "mem" WHERE "device" = 'board-9' AND "site" = 'lab'"#)
        #expect(!tagged.isEmpty)
        #expect(await eventually { host.status(directory)?.lastSuccessfulDelivery != nil })
        let running = try #require(host.status(directory))
        #expect(running.state == "running" && running.configFile == path && running.clock != nil, "\(running)")

        // influxd down: status shows the failure and the queue; back up: every point once.
        influx.stop()
        for round in 0..<3 {
            try dropInSpool(host.points("probe", round: round, count: 20), as: "p\(round).lp", in: directory)
        }
        #expect(
            await eventually(within: .seconds(120)) {
                guard let status = host.status(directory) else { return false }
                return status.queue.records >= 3 && status.lastDelivery?.result == "failed" && status.queue.lastFailure != nil
            }, "status did not show the outage: \(String(describing: host.status(directory)))")
        let shown = try agent.run(["status", "--config", path])
        #expect(shown.status == 0 && shown.stdoutText.contains("failing ("), "\(shown.stdoutText)")
        try influx.start()
        #expect(
            await drains { (try? influx.count("probe", field: "v")).map { max(60 - $0, 0) } },
            "the probes did not all arrive: \(host.log(directory))")
        #expect(try influx.count("probe", field: "v") == 60)

        // A broken file: refused with its reason, the running config kept.
        let loadedAt = try #require(host.status(directory)).configLoadedAt
        try Data("{ server: { url: \"ftp://nowhere\" } ".utf8).write(to: URL(filePath: path))
        process.signal(SIGHUP)
        #expect(host.nextMessage(listener, startingWith: "RELOADING=1") != nil)
        #expect(host.nextMessage(listener, startingWith: "READY=1") == "READY=1\nSTATUS=running (reload refused)")
        #expect(await eventually { host.status(directory)?.reloadError?.contains("agent.json5") == true })
        #expect(host.log(directory).contains("config reload refused; the running config is kept"))
        // A good file with a new label: taken, and new points carry it.
        try host.writeConfig(server: influx.base, in: directory, labels: "site: \"lab\", rack: \"r2\"")
        process.signal(SIGHUP)
        #expect(host.nextMessage(listener, startingWith: "READY=1") == "READY=1\nSTATUS=running")
        #expect(
            await eventually { host.status(directory).map { $0.reloadError == nil && $0.configLoadedAt > loadedAt } ?? false })
        #expect(
            await eventually(within: .seconds(120)) {
                ((try? influx.rows(#"SELECT "total" FROM "mem" WHERE "rack" = 'r2'"#))?.count ?? 0) >= 1
            }, "the reloaded labels are not on new points: \(host.log(directory))")

        process.signal(SIGTERM)
        #expect(host.nextMessage(listener, startingWith: "STOPPING=1") != nil)
        #expect(process.wait() == 0, "\(host.log(directory))")
        let stopped = try agent.run(["status", "--config", path])
        #expect(stopped.status == 69 && stopped.stdoutText.contains("not running (stopped)"), "\(stopped.stdoutText)")
        #expect(try influx.count("app", field: "v") == 30)
    }

    @Test(
        "the route to the server prohibited, then back (its own network namespace): nothing is taken meanwhile, and the route's return syncs at once",
        arguments: EmbeddedAgent.all)
    func routeBack(_ agent: EmbeddedAgent) async throws {
        let influx = try InfluxFixture()
        let directory = try agentScratch("embedded-route-\(agent.arch)")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        // The agent runs inside the namespace and reaches influxd through a relay on the host's
        // end of the veth pair; the test takes the route to that address away and gives it back.
        let ns = try NetworkNamespace()
        let (relay, relayPort) = try SlowLinkTests().relay(address: ns.hostAddress, target: influx.port, delay: 0)
        defer { relay.stop() }
        try ns.inside(["route", "add", "prohibit", "\(ns.hostAddress)/32"])
        var text = try String(
            contentsOfFile: try host.writeConfig(server: "http://\(ns.hostAddress):\(relayPort)", in: directory), encoding: .utf8)
        text = text.replacingOccurrences(of: "syncInterval: \"1s\"", with: "syncInterval: \"1h\"")
        let path = directory + "/agent.json5"
        try Data(text.utf8).write(to: URL(filePath: path))
        let process = try start(
            agent, ["run", "--config", path], environment: host.inherited(), log: directory + "/log", namespace: ns.name)
        defer { process.stop() }
        #expect(
            await eventually(within: .seconds(60)) { host.status(directory)?.reachability == "not-reachable" },
            "\(String(describing: host.status(directory))) \(host.log(directory))")
        try dropInSpool(host.points("route_back", round: 1, count: 7), as: "r.lp", in: directory)
        // The first scheduled sync is an hour away and the route is gone: nothing is taken.
        try await Task.sleep(for: .seconds(2))
        #expect(FileManager.default.fileExists(atPath: directory + "/spool/r.lp"))
        try ns.inside(["route", "del", "prohibit", "\(ns.hostAddress)/32"])
        #expect(
            await eventually(within: .seconds(60)) { (try? influx.count("route_back", field: "v")) == 7 },
            "no sync when the route came back: \(host.log(directory))")
        #expect(host.status(directory)?.reachability.hasPrefix("reachable \(ns.innerInterface) ethernet") == true)
        process.signal(SIGTERM)
        #expect(process.wait() == 0, "\(host.log(directory))")
    }

    @Test(
        "SIGTERM while a delivery hangs: exit within daemon.stopTimeout, and the batch stays queued, not lost", arguments: EmbeddedAgent.all
    )
    func sigtermBound(_ agent: EmbeddedAgent) async throws {
        let silent = try SilentListener()
        let directory = try agentScratch("embedded-sigterm-\(agent.arch)")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = try host.writeConfig(server: "http://127.0.0.1:\(silent.port)", in: directory)
        let text = try String(contentsOfFile: path, encoding: .utf8)
        try Data(text.replacingOccurrences(of: "connectTimeout: \"2s\"", with: "connectTimeout: \"2s\", idleTimeout: \"1h\"").utf8)
            .write(to: URL(filePath: path))
        try dropInSpool(host.points("held", round: 1, count: 10), as: "held.lp", in: directory)
        let process = try start(agent, ["run", "--config", path], environment: host.inherited(), log: directory + "/log")
        defer { process.stop() }
        #expect(
            await eventually(within: .seconds(60)) { (try? FileManager.default.contentsOfDirectory(atPath: directory + "/spool")) == [] })
        #expect(await eventually(within: .seconds(60)) { silent.acceptedOrPending })
        try await Task.sleep(for: .seconds(0.3))
        let sent = ContinuousClock.now
        process.signal(SIGTERM)
        let status = process.wait()
        let took = ContinuousClock.now - sent
        #expect(status == 0, "\(host.log(directory))")
        #expect(took < .seconds(30), "SIGTERM took \(took)")
        #expect(host.log(directory).contains("still in flight after daemon.stopTimeout"), "\(host.log(directory))")
        let queue = try OfflineQueue(directory: directory + "/queue")
        defer { queue.close() }
        #expect(queue.records().contains { $0.url.contains("/write") }, "the batch in flight was lost")
        #expect(host.status(directory)?.state == "stopped")
    }
}
