import Foundation
import Testing
import TinyFireCore

@testable import FireAgent

/// The Embedded fire-agent (cross/embedded/build.sh: the core and FireAgent in Embedded
/// Swift, static, no Swift runtime) for one architecture, run natively or under qemu-user.
struct EmbeddedAgent: CustomTestStringConvertible, Sendable {
    let arch: String
    var testDescription: String { arch }

    static let all = [EmbeddedAgent(arch: "x86_64"), EmbeddedAgent(arch: "armv7"), EmbeddedAgent(arch: "aarch64")]

    /// `.build-embedded/ARCH/fire-agent`, which cross/embedded/check.sh builds (scripts/test.sh
    /// runs it before the tests).
    var binary: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent(".build-embedded/\(arch)/fire-agent").path
    }

    /// Runs the binary with `arguments` (under qemu-arm-static or qemu-aarch64-static for ARM).
    func run(_ arguments: [String], environment: [String: String]? = nil) throws -> CLIResult {
        let (program, all) = try command(arguments)
        return try runCapturingOutput(program, all, environment: environment)
    }

    /// The program and arguments that run the binary with `arguments`: the binary itself, or
    /// qemu-user with the binary first. qemu-user passes signals on to the program it runs.
    func command(_ arguments: [String]) throws -> (String, [String]) {
        guard FileManager.default.isExecutableFile(atPath: binary) else {
            throw FixtureError(description: "no Embedded fire-agent at \(binary): cross/embedded/check.sh \(arch) builds it")
        }
        let emulator: String? =
            switch arch {
            case "armv7": "qemu-arm-static"
            case "aarch64": "qemu-aarch64-static"
            default: nil
            }
        guard let emulator else { return (binary, arguments) }
        guard let qemu = which(emulator) else { throw FixtureError(description: "\(emulator) is not installed (qemu-user-static)") }
        return (qemu, [binary] + arguments)
    }
}

@Suite("the Embedded fire-agent (armv7 and aarch64 under qemu) against influxd: sync, status, config, usage", .serialized)
struct EmbeddedAgentTests {
    func write(_ text: String, to path: String, mode: Int = 0o600) throws {
        try Data(text.utf8).write(to: URL(filePath: path))
        chmod(path, mode_t(mode))
    }

    @Test(
        "sync --once: the board's points and a spool file reach influxd once; an outage keeps them queued (exit 75) until it ends",
        arguments: EmbeddedAgent.all)
    func sync(_ agent: EmbeddedAgent) throws {
        let influx = try InfluxFixture()
        let directory = try agentScratch("embedded-sync-\(agent.arch)")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try FileManager.default.createDirectory(atPath: directory + "/spool", withIntermediateDirectories: true)
        try write(
            """
            { device: { id: "board-\(agent.arch)", labels: { site: "lab" } },
              server: { url: "\(influx.base)", connectTimeout: "2s", requestTimeout: "20s" },
              telemetry: { influx: { database: "fleet", precision: "ns" }, spoolDirectory: "spool" },
              queue: { directory: "queue" } }
            """, to: directory + "/agent.json5")
        let config = directory + "/agent.json5"
        try dropInSpool("app,unit=a requests=5i 1700000000000000000\napp value=hot\napp,unit=b requests=7i\n", as: "app.lp", in: directory)
        let first = try agent.run(["sync", "--once", "--config", config], environment: environmentWithoutProxies())
        let line = String(decoding: first.stdout, as: UTF8.self)
        #expect(first.status == 0, "\(first.stderr)")
        #expect(line.contains("spooled 2 lines (1 rejected)") && line.contains("remaining 0"), "\(line)")
        #expect(try influx.count("app", field: "requests") == 2)
        let tagged = try influx.rows(#"SELECT "total" FROM "mem" WHERE "device" = 'board-\#(agent.arch)' AND "site" = 'lab'"#)
        #expect(tagged.count == 1)
        let measurements = try influx.measurements()
        for expected in ["mem", "system", "fire_agent"] { #expect(measurements.contains(expected), "\(measurements)") }
        #expect(try String(contentsOfFile: directory + "/spool/rejected/app.lp", encoding: .utf8).contains("app value=hot"))

        // influxd down: the batch stays queued, exit 75 saying why; back up: delivered once.
        influx.stop()
        try dropInSpool("probe n=1i 1700000000000000001\n", as: "p.lp", in: directory)
        let down = try agent.run(["sync", "--once", "--config", config], environment: environmentWithoutProxies())
        #expect(down.status == 75 && down.stderr.contains("fire-agent: delivery stopped:"), "\(down.status) \(down.stderr)")
        try influx.start()
        let up = try agent.run(["sync", "--once", "--config", config], environment: environmentWithoutProxies())
        #expect(up.status == 0, "\(up.stderr)")
        #expect(try influx.count("probe", field: "n") == 1)
        #expect(try influx.count("app", field: "requests") == 2)
    }

    @Test(
        "status, config check and show, queue list and stats, and the refusals of every command print what the full-Swift fire-agent prints for the same files, with its exit statuses",
        arguments: EmbeddedAgent.all)
    func sameAsHost(_ agent: EmbeddedAgent) throws {
        let directory = try agentScratch("embedded-same-\(agent.arch)")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        // A status as a running daemon (this process) wrote it a moment ago.
        let now = WallTime(secondsSince1970: WallTime.now().secondsSince1970)
        var status = AgentStatus(
            state: "running", pid: getpid(), version: "0.1.0", startedAt: now.adding(.seconds(-3600)), updatedAt: now,
            nextUpdateBy: now.adding(.seconds(600)), configFile: directory + "/agent.json5", configLoadedAt: now.adding(.seconds(-3600)),
            reachability: "reachable eth0 ethernet", clock: "trusted",
            queue: .init(
                records: 2, bytes: 900, oldestAgeSeconds: 12.5, delivered: 41, dropped: 0, rejected: 0, discarded: 1, quarantined: 0,
                headFailures: 2, lastFailure: "POST http://db/write failed: Connection refused"),
            deadLetters: 1, rejectedSpoolLines: 3, stoppedCollectors: ["thermal": "/sys/class/thermal: no zones"])
        status.lastDelivery = .init(at: now, result: "failed", reason: "Connection refused")
        try status.write(to: directory + "/status.json")
        let stopped = directory + "/stopped.json"
        status.state = "stopped"
        status.nextUpdateBy = nil
        try status.write(to: stopped)
        try write(
            "{ device: { id: \"b\" }, server: { url: \"http://127.0.0.1:1\" }, queue: { directory: \"q\" } }",
            to: directory + "/agent.json5")
        try write("{ device: { id: 7 }, server: { url: \"ftp://x\" }, telemetry: { intervl: \"10s\" } }", to: directory + "/bad.json5")
        // Secrets `config show` masks (or shows), defaults filled in, a firmware section.
        let key = try runCapturingOutput(
            "/bin/sh", ["-c", "openssl ecparam -genkey -name prime256v1 | openssl ec -pubout -out '\(directory)/k.pub'"])
        #expect(key.status == 0, "\(key.stderr)")
        try write(
            """
            { device: { id: "s", labels: { site: "lab" } }, server: { url: "http://127.0.0.1:1", pins: [] },
              telemetry: { influx: { database: "fleet", username: "u", password: "change-me" } },
              network: { proxy: "http://p:secret@127.0.0.1:3128" }, queue: { directory: "q" },
              firmware: { manifestURL: "https://u.example/m.json", keys: ["\(directory)/k.pub"], deviceType: "gw",
                          versionFile: "/etc/version", install: ["/bin/true", "{file}"], installWindow: ["Mon-Fri 02:00-04:00"] } }
            """, to: directory + "/secrets.json5")
        // A FIFO where a file should be: refused at once by both, never waited on.
        #expect(mkfifo(directory + "/fifo", 0o600) == 0)
        let cases: [[String]] = [
            ["status", "--status-file", directory + "/status.json", "--json"],
            ["status", "--status-file", directory + "/fifo"],
            ["config", "check", directory + "/fifo"],
            ["status", "--status-file", stopped],
            ["status", "--status-file", directory + "/missing.json"],
            ["config", "check", directory + "/agent.json5"],
            ["config", "check", directory + "/bad.json5"],
            ["config", "check", "--config", directory + "/missing.json5"],
            ["status", "--bogus"],
            ["sync"],
            ["config", "check", "a", "b"],
            ["run", "--config", directory + "/bad.json5"],
            ["run", "--config", directory + "/missing.json5"],
            ["run", "--bogus"],
            ["run", "extra"],
            ["reachability", "--netns", directory + "/no-such-namespace"],
            ["reachability", "--bogus"],
            ["queue", "list"],
            ["queue", "list", "--dir", directory, "--limit", "x"],
            ["queue", "stats", "--dir", directory + "/no-queue"],
            ["queue", "bogus"],
            ["queue", "list", "--dir", directory, "--limit", "-1"],
            ["status", "--config"],
            ["status", "--status-file"],
            ["run", "--config"],
            ["sync", "--config", "-x"],
            ["reachability", "--host"],
            ["reachability", "--netns"],
            ["config", "check", "--config"],
            ["config", "show", "--config", directory + "/secrets.json5"],
            ["config", "show", "--config", directory + "/secrets.json5", "--show-secrets"],
            ["config", "show", "--config", directory + "/bad.json5"],
            ["config", "show", "--bogus"],
            ["config"],
            ["config", "bogus"],
            ["firmware"],
            ["firmware", "bogus"],
            ["firmware", "update"],
            ["firmware", "update", "--config", directory + "/agent.json5", "--once"],
            ["firmware", "verify"],
            ["--version"],
        ]
        for arguments in cases {
            let embedded = try agent.run(arguments, environment: environmentWithoutProxies())
            let host = try fireAgent(arguments, environment: environmentWithoutProxies())
            #expect(embedded.status == host.status, "\(arguments): \(embedded.status) vs \(host.status)")
            // Ages are counted from each run's own now: a second may pass between the two.
            let embeddedText = Self.withoutAges(String(decoding: embedded.stdout, as: UTF8.self))
            let hostText = Self.withoutAges(String(decoding: host.stdout, as: UTF8.self))
            #expect(embeddedText == hostText, "\(arguments): \(embeddedText) vs \(hostText)")
            #expect(embedded.stderr == host.stderr, "\(arguments): \(embedded.stderr) vs \(host.stderr)")
        }
        // A queue the host's `queue add` filled (a body file among the records): the same lines,
        // ages masked (two runs, two moments).
        let queue = directory + "/queue"
        let added = try fireAgent(["queue", "add", "--dir", queue, "http://127.0.0.1:1/in?n={n}", "-d", "body {n}", "--repeat", "3"])
        #expect(added.status == 0, "\(added.stderr)")
        try write("file body", to: directory + "/body.bin")
        #expect(
            try fireAgent(["queue", "add", "--dir", queue, "-X", "PUT", "http://127.0.0.1:1/f", "-d", "@" + directory + "/body.bin"]).status
                == 0)
        func withoutAges(_ data: Data) -> String {
            String(decoding: data, as: UTF8.self).replacingOccurrences(
                of: #"(?m)^(\d+) \d+\.\d "#, with: "$1 _ ", options: .regularExpression
            )
            .replacingOccurrences(of: #"oldest_age_s=\d+\.\d"#, with: "oldest_age_s=_", options: .regularExpression)
        }
        for arguments in [
            ["queue", "list", "--dir", queue], ["queue", "list", "--dir", queue, "--limit", "2"], ["queue", "stats", "--dir", queue],
        ] {
            let embedded = try agent.run(arguments)
            let host = try fireAgent(arguments)
            #expect(embedded.status == 0 && host.status == 0, "\(arguments): \(embedded.stderr) \(host.stderr)")
            #expect(withoutAges(embedded.stdout) == withoutAges(host.stdout), "\(arguments): \(withoutAges(embedded.stdout))")
        }
        #expect(withoutAges(try agent.run(["queue", "list", "--dir", queue]).stdout).split(separator: "\n").count == 4)

        // The text for people, with the seconds it counts taken out (two runs, two moments).
        let text = try agent.run(["status", "--status-file", directory + "/status.json"])
        let hostText = try fireAgent(["status", "--status-file", directory + "/status.json"])
        func withoutSeconds(_ data: Data) -> String { Self.withoutAges(String(decoding: data, as: UTF8.self)) }
        #expect(text.status == 0 && hostText.status == 0)
        #expect(withoutSeconds(text.stdout) == withoutSeconds(hostText.stdout), "\(withoutSeconds(text.stdout))")
    }

    @Test(
        "reachability: the namespace's routes as one line and an exit status, --host, and --watch printing each change, as the full-Swift fire-agent",
        arguments: EmbeddedAgent.all)
    func reachability(_ agent: EmbeddedAgent) throws {
        let ns = try NetworkNamespace()
        for arguments in [["reachability", "--netns", ns.path], ["reachability", "--netns", ns.path, "--host", "203.0.113.5"]] {
            let embedded = try agent.run(arguments)
            let host = try fireAgent(arguments)
            #expect(embedded.status == 1 && host.status == 1, "\(arguments): \(embedded.status) vs \(host.status)")
            #expect(embedded.stdoutText == "not-reachable\n" && embedded.stdout == host.stdout, "\(embedded.stdoutText)")
        }
        try ns.inside(["route", "add", "203.0.113.5/32", "via", ns.hostAddress])
        let routed = try agent.run(["reachability", "--netns", ns.path, "--host", "203.0.113.5"])
        #expect(routed.status == 0 && routed.stdoutText == "reachable \(ns.innerInterface) ethernet\n", "\(routed.stdoutText)")
        // Still no default route: the plain form says so.
        #expect(try agent.run(["reachability", "--netns", ns.path]).status == 1)

        let (program, all) = try agent.command(["reachability", "--watch", "--netns", ns.path])
        try expectWatchSequence(program, all, in: ns)
    }

    /// `text` with the ages `status` counts to now (`(12 s ago)`) as `_`: two runs, two moments.
    static func withoutAges(_ text: String) -> String {
        text.replacing(/\([0-9]+ s ago\)/, with: "(_ s ago)")
    }
}
