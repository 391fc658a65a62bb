import TinyFireCore

/// Runs the built-in collectors the config switches on, once per `collect`. A collector whose
/// file is missing or unreadable on this board is logged once and switched off for the rest of
/// the run; it never stops the others or the agent. Every point gets the device's tags
/// (`device` and the config's labels) and the one timestamp of the round.
///
/// Memory: the previous CPU sample (eight counters) and the points of one round.
package final class TelemetryCollector {
    private let files: SystemFiles
    private let tags: [String: String]
    private let logger: Logger
    private let enabled: AgentConfig.Collectors
    private var previousCPU: SystemCollectors.CPUTimes?
    /// Collectors switched off after a failure, with the reason (for status).
    package private(set) var stopped: [String: String] = [:]
    /// The agent's own figures (queue depth, drops, …), asked for each round.
    private let agentHealth: () -> [String: Point.Value]

    /// Creates the collector set.
    /// - Parameters:
    ///   - collectors: which to run.
    ///   - tags: tags for every point.
    ///   - files: where /proc and /sys are.
    ///   - logger: where failures are logged (once each).
    ///   - agentHealth: the agent's own figures for the `fire_agent` measurement.
    package init(
        collectors: AgentConfig.Collectors, tags: [String: String], files: SystemFiles = SystemFiles(), logger: Logger,
        agentHealth: @escaping () -> [String: Point.Value] = { [:] }
    ) {
        self.enabled = collectors
        self.tags = tags
        self.files = files
        self.logger = logger
        self.agentHealth = agentHealth
    }

    /// One round: every enabled collector's points, stamped `timestamp` (ns since the epoch).
    package func collect(timestamp: Int64) -> [Point] {
        var points: [Point] = []
        func point(_ measurement: String, _ fields: [String: Point.Value], extra: [String: String] = [:]) {
            guard !fields.isEmpty else { return }
            // By hand: Dictionary.merging casts dynamically, which Embedded Swift cannot.
            var pointTags = tags
            for (key, value) in extra { pointTags[key] = value }
            points.append(Point(measurement: measurement, tags: pointTags, fields: fields, timestamp: timestamp))
        }
        if enabled.cpu {
            run("cpu", file: "/proc/stat") { text in
                guard let now = SystemCollectors.parseCPU(text) else { return false }
                if let previousCPU, let usage = SystemCollectors.cpuUsage(from: previousCPU, to: now) {
                    point("cpu", usage, extra: ["cpu": "cpu-total"])
                }
                previousCPU = now
                return true
            }
        }
        if enabled.memory {
            run("memory", file: "/proc/meminfo") { text in
                guard let fields = SystemCollectors.memory(text) else { return false }
                point("mem", fields)
                return true
            }
        }
        var system: [String: Point.Value] = [:]
        if enabled.load {
            run("load", file: "/proc/loadavg") { text in
                guard let fields = SystemCollectors.load(text) else { return false }
                for (key, value) in fields { system[key] = value }
                return true
            }
        }
        if enabled.uptime {
            run("uptime", file: "/proc/uptime") { text in
                guard let fields = SystemCollectors.uptime(text) else { return false }
                for (key, value) in fields { system[key] = value }
                return true
            }
        }
        point("system", system)
        if enabled.network {
            run("network", file: "/proc/net/dev") { text in
                guard let interfaces = SystemCollectors.network(text) else { return false }
                for name in interfaces.keys.sorted() { point("net", interfaces[name] ?? [:], extra: ["interface": name]) }
                return true
            }
        }
        if enabled.disk {
            run("disk", file: "/proc/self/mounts") { text in
                let mounts = SystemCollectors.realMounts(text)
                for mount in mounts {
                    guard let fields = SystemCollectors.diskUsage(files.root + mount.path) else { continue }
                    point("disk", fields, extra: ["path": mount.path, "disk_device": mount.device, "fstype": mount.type])
                }
                return true
            }
        }
        if enabled.thermal && stopped["thermal"] == nil { collectThermal(point: point) }
        if enabled.pressure {
            for resource in ["cpu", "memory", "io"] {
                run("pressure", file: "/proc/pressure/\(resource)") { text in
                    guard let kinds = SystemCollectors.pressure(text) else { return false }
                    for kind in kinds.keys.sorted() { point("pressure", kinds[kind] ?? [:], extra: ["resource": resource, "type": kind]) }
                    return true
                }
            }
        }
        if enabled.agent { point("fire_agent", agentHealth()) }
        return points
    }

    private func collectThermal(point: (String, [String: Point.Value], [String: String]) -> Void) {
        let zones = files.list("/sys/class/thermal").filter { $0.hasPrefix("thermal_zone") }
        guard !zones.isEmpty else {
            stop("thermal", "no /sys/class/thermal/thermal_zone* on this board")
            return
        }
        for zone in zones {
            // A zone whose sensor is not ready (EAGAIN, EINVAL) is skipped this round.
            guard let text = files.read("/sys/class/thermal/\(zone)/temp"), let celsius = SystemCollectors.temperature(text) else {
                continue
            }
            let type = files.read("/sys/class/thermal/\(zone)/type")?.trimmed() ?? zone
            point("temp", ["temp": .float(celsius)], ["sensor": type.isEmpty ? zone : type, "zone": zone])
        }
    }

    /// Reads `file` and hands it to `parse`; a missing file or text it cannot parse stops the
    /// collector (logged once). A stopped collector is not run again.
    private func run(_ name: String, file: String, _ parse: (String) -> Bool) {
        guard stopped[name] == nil else { return }
        guard let text = files.read(file) else {
            stop(name, "cannot read \(file)")
            return
        }
        if !parse(text) { stop(name, "\(file) is not in the expected format") }
    }

    private func stop(_ name: String, _ reason: String) {
        guard stopped[name] == nil else { return }
        stopped[name] = reason
        logger.warning("collector stopped", metadata: ["collector": "\(name)", "reason": "\(reason)"])
    }
}
