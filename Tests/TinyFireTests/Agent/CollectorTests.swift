import Foundation
import Synchronization
import Testing

@testable import FireAgent

@Suite("fire-agent telemetry: collectors and line protocol")
struct CollectorTests {
    /// A fake board: /proc and /sys files under a temporary root.
    func board(_ files: [String: String]) throws -> String {
        let root = FileManager.default.temporaryDirectory.appending(path: "tinyfire-board-\(UUID().uuidString)").path
        for (path, text) in files {
            let url = URL(filePath: root + path)
            try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
            try Data(text.utf8).write(to: url)
        }
        return root
    }

    @Test("CPU percentages come from /proc/stat deltas; memory, load, uptime, network, pressure and thermal parse as Telegraf names them")
    func parsers() throws {
        let before = try #require(SystemCollectors.parseCPU("cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 2 3 4\n"))
        let after = try #require(SystemCollectors.parseCPU("cpu  200 0 100 1600 100 0 0 0 0 0\n"))
        let usage = try #require(SystemCollectors.cpuUsage(from: before, to: after))
        #expect(usage["usage_user"] == .float(10) && usage["usage_idle"] == .float(80) && usage["usage_iowait"] == .float(5))
        #expect(SystemCollectors.cpuUsage(from: after, to: before) == nil, "counters that went back (a reboot) give nothing")
        let memory = try #require(SystemCollectors.memory("MemTotal: 1000 kB\nMemFree: 200 kB\nMemAvailable: 600 kB\nCached: 100 kB\n"))
        #expect(memory["total"] == .integer(1_024_000) && memory["available"] == .integer(614_400))
        #expect(memory["used_percent"] == .float(40))
        #expect(SystemCollectors.load("0.50 1.25 2.00 3/120 999\n") == ["load1": .float(0.5), "load5": .float(1.25), "load15": .float(2)])
        #expect(SystemCollectors.uptime("12345.67 2000.00\n") == ["uptime": .integer(12345)])
        let dev = """
            Inter-|   Receive                                                |  Transmit
             face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
                lo: 999 9 0 0 0 0 0 0 999 9 0 0 0 0 0 0
              eth0: 1000 10 1 2 0 0 0 0 2000 20 3 4 0 0 0 0
            """
        let interfaces = try #require(SystemCollectors.network(dev))
        #expect(interfaces.keys.sorted() == ["eth0"])
        #expect(interfaces["eth0"]?["bytes_recv"] == .integer(1000) && interfaces["eth0"]?["drop_out"] == .integer(4))
        let psi = try #require(
            SystemCollectors.pressure("some avg10=1.50 avg60=0.25 avg300=0.00 total=123\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"))
        #expect(psi["some"]?["avg10"] == .float(1.5) && psi["some"]?["total"] == .integer(123) && psi["full"] != nil)
        #expect(SystemCollectors.temperature("48312\n") == 48.312)
        let mounts = SystemCollectors.realMounts(
            "proc /proc proc rw 0 0\n/dev/mmcblk0p2 / ext4 rw 0 0\ntmpfs /run tmpfs rw 0 0\n/dev/sda1 /mnt/my\\040disk vfat rw 0 0\n/dev/mmcblk0p2 / ext4 rw 0 0\n"
        )
        #expect(mounts.map(\.path) == ["/", "/mnt/my disk"])
        #expect(SystemCollectors.parseCPU("nonsense") == nil && SystemCollectors.memory("x") == nil)
    }

    @Test("a collector whose file is missing logs once and stops; the others go on; every point has the device tags and one timestamp")
    func missingFilesStopOnce() throws {
        let root = try board([
            "/proc/stat": "cpu  100 0 50 800 50 0 0 0 0 0\n",
            "/proc/meminfo": "MemTotal: 1000 kB\nMemFree: 200 kB\nMemAvailable: 600 kB\n",
            "/proc/loadavg": "0.10 0.20 0.30 1/50 10\n",
            "/proc/uptime": "100.5 90.0\n",
            "/sys/class/thermal/thermal_zone0/temp": "45000\n",
            "/sys/class/thermal/thermal_zone0/type": "cpu-thermal\n",
        ])
        defer { try? FileManager.default.removeItem(atPath: root) }
        let logs = LogCapture()
        let collector = TelemetryCollector(
            collectors: AgentConfig.Collectors(), tags: ["device": "b1", "site": "x"], files: SystemFiles(root: root),
            logger: logs.agentLogger, agentHealth: { ["queue_records": .integer(3)] })
        let first = collector.collect(timestamp: 1_000_000_000)
        let second = collector.collect(timestamp: 2_000_000_000)
        #expect(Set(first.map(\.measurement)) == ["mem", "system", "temp", "fire_agent"], "no CPU before a delta")
        #expect(Set(second.map(\.measurement)) == ["mem", "system", "temp", "fire_agent"], "no CPU time passed on a frozen board")
        #expect(first.allSatisfy { $0.tags["device"] == "b1" && $0.tags["site"] == "x" && $0.timestamp == 1_000_000_000 })
        #expect(first.first { $0.measurement == "temp" }?.tags["sensor"] == "cpu-thermal")
        #expect(Set(collector.stopped.keys) == ["network", "disk", "pressure"])
        let stops = logs.messages.filter { $0.contains("collector stopped") }
        #expect(stops.count == 3, "each stop is logged once: \(stops)")
    }

    @Test("on this machine's real /proc every round yields points, CPU from the second round")
    func realSystem() {
        let collector = TelemetryCollector(collectors: AgentConfig.Collectors(), tags: ["device": "ci"], logger: LogCapture().agentLogger)
        let first = collector.collect(timestamp: 1)
        usleep(50_000)
        let second = collector.collect(timestamp: 2)
        #expect(first.contains { $0.measurement == "mem" } && first.contains { $0.measurement == "system" })
        #expect(second.contains { $0.measurement == "cpu" })
        #expect(second.contains { $0.measurement == "disk" && $0.tags["path"] == "/" } || second.contains { $0.measurement == "disk" })
        // The board's `device` tag is every point's, disk points included: the mount's device
        // is `disk_device`, so two boards' disks are two series.
        #expect(second.allSatisfy { $0.tags["device"] == "ci" }, "\(second.filter { $0.tags["device"] != "ci" }.map(\.tags))")
        #expect(second.filter { $0.measurement == "disk" }.allSatisfy { $0.tags["disk_device"]?.isEmpty == false })
        for point in second { #expect(LineProtocol.encode(point, precision: .ns).map { LineProtocol.problem(in: $0[...]) } == .some(nil)) }
    }

    @Test("line protocol: escaping, types, precision, and checks of lines other programs wrote")
    func lineProtocol() {
        let point = Point(
            measurement: "my meas,x", tags: ["host": "a b", "k=1": "v,2", "empty": ""],
            fields: ["f": .float(1.5), "n": .integer(-3), "s": .string("say \"hi\" \\ ok"), "b": .bool(true), "bad": .float(.nan)],
            timestamp: 1_700_000_000_123_456_789)
        let line = LineProtocol.encode(point, precision: .ms)
        #expect(line == #"my\ meas\,x,host=a\ b,k\=1=v\,2 b=true,f=1.5,n=-3i,s="say \"hi\" \\ ok" 1700000000123"#)
        #expect(LineProtocol.problem(in: line![...]) == nil)
        #expect(LineProtocol.encode(Point(measurement: "m", fields: ["x": .float(.infinity)], timestamp: 0), precision: .s) == nil)
        #expect(
            LineProtocol.encode(Point(measurement: "m", fields: ["x": .float(2)], timestamp: 5_000_000_000), precision: .s) == "m x=2.0 5")
        // Floats as Swift writes them (shortest round trip); core-check expects the same bytes
        // from the Embedded build on every target.
        let floats = Point(
            measurement: "m", fields: ["a": .float(0.1), "b": .float(1e-7), "c": .float(1e20), "d": .float(-0.25)], timestamp: 0)
        #expect(LineProtocol.encode(floats, precision: .ns) == "m a=0.1,b=1e-07,c=1e+20,d=-0.25 0")
        let valid = ["weather,loc=us temp=82 1465839830100400200", "w temp=1i", "w t=\"a b\",u=true", "w,a=b c=1.5e3 -5"]
        for text in valid { #expect(LineProtocol.problem(in: text[...]) == nil, "\(text)") }
        let invalid: [(String, String)] = [
            ("", "missing measurement"), ("weather", "missing fields"), ("weather temp", "a field needs key=value"),
            ("weather temp=hot", "'hot' is not a field value"), ("weather,loc temp=1", "a tag needs key=value"),
            ("weather temp=1 12:00", "the timestamp must be an integer"), ("weather temp=\"open", "string field never closed"),
            ("weather,loc= temp=1", "empty tag value"),
        ]
        for (text, reason) in invalid {
            let problem = LineProtocol.problem(in: text[...])
            #expect(problem?.contains(reason) == true, "\(text): \(String(describing: problem))")
        }
    }
}

extension LogCapture {
    /// The agent's logger, recording `message key=value …` lines here (keys sorted).
    var agentLogger: Logger {
        Logger(
            label: "test",
            output: LogOutput { _, message, metadata in
                let fields = metadata.sorted { $0.key < $1.key }.map { field -> String in
                    if case .string(let text) = field.value { return "\(field.key)=\(text)" }
                    return "\(field.key)=\(field.value.json)"
                }
                self.append("\(message) \(fields.joined(separator: " "))")
            }, level: .trace)
    }
}
