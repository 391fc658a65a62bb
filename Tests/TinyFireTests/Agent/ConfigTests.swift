import Foundation
import Testing
import TinyFireCore

@testable import FireAgent

@Suite("fire-agent config: one JSON5 file, refused with key paths")
struct ConfigTests {
    /// A minimal valid document with `extra` spliced into its top level.
    func document(_ extra: String = "", server: String = #"url: "https://fleet.example:8086""#, influx: String = #"database: "fleet""#)
        -> String
    {
        "{ device: { id: 'board-1' }, server: { \(server) }, telemetry: { influx: { \(influx) } }, \(extra) }"
    }

    func problems(_ text: String) -> [String] {
        do {
            _ = try AgentConfig.parse(Data(text.utf8), file: "test.json5", machineIDPath: "/nonexistent", environment: { _ in nil })
            return []
        } catch {
            return error.problems.map(\.description)
        }
    }

    @Test("the samples in etc/ pass config check, and show prints defaults with secrets masked")
    func samples() throws {
        let root = URL(filePath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        // Installed as OPERATIONS.md says: mode 0600 (the full sample holds a password).
        let installed = try agentScratch("samples")
        defer { try? FileManager.default.removeItem(atPath: installed) }
        for sample in ["etc/fire-agent.minimal.json5", "etc/fire-agent.json5"] {
            let path = installed + "/" + (sample as NSString).lastPathComponent
            try FileManager.default.copyItem(atPath: root.appending(path: sample).path, toPath: path)
            chmod(path, 0o600)
            let result = try fireAgent(["config", "check", path])
            #expect(result.status == 0, "\(sample): \(result.stderr)")
            #expect(String(decoding: result.stdout, as: UTF8.self).contains(": ok"))
        }
        let full = installed + "/fire-agent.json5"
        let shown = String(decoding: try fireAgent(["config", "show", "--config", full]).stdout, as: UTF8.self)
        #expect(shown.contains(#""password": "********""#))
        #expect(!shown.contains("change-me"))
        #expect(shown.contains(#""maxRecordAge": "7d""#))
        let secrets = String(decoding: try fireAgent(["config", "show", "--show-secrets", "--config", full]).stdout, as: UTF8.self)
        #expect(secrets.contains(#""password": "change-me""#))
        // What show prints is itself a valid config with the same meaning.
        let again = try AgentConfig.parse(Data(secrets.utf8), file: "shown.json5")
        let original = try AgentConfig.load(path: full)
        #expect(again.rendered(maskingSecrets: false) == original.rendered(maskingSecrets: false))
    }

    @Test("each kind of bad value is named by its key path, all of them at once")
    func badValues() {
        let cases: [(String, String)] = [
            (document("sever: {}"), #"sever: unknown key; did you mean "server"?"#),
            (document("telemetry2: 1"), #"telemetry2: unknown key; did you mean "telemetry"?"#),
            (
                document(server: #"url: "https://x", conectTimeout: 5"#),
                #"server.conectTimeout: unknown key; did you mean "connectTimeout"?"#
            ),
            (
                document(server: #"url: "ftp://fleet.example""#),
                #"server.url: "ftp://fleet.example" is not an http:// or https:// URL with a host"#
            ),
            (document(server: ""), "server.url: is required"),
            (document(server: "url: 8086"), "server.url: must be a string, not a number"),
            (document(server: #"url: "https://x", connectTimeout: "soon""#), "server.connectTimeout: must be a duration"),
            (document(server: #"url: "https://x", pins: ["sha256//abc"]"#), "server.pins[0]:"),
            (document(influx: ""), "telemetry.influx.database: is required"),
            (document(influx: #"version: 2, org: "acme", bucket: "b""#), "telemetry.influx.token: is required"),
            (document(influx: #"database: "d", token: "t""#), "telemetry.influx.token: is for version 2"),
            (document(influx: #"database: "d", version: 3"#), "telemetry.influx.version: 3 is out of range 1…2"),
            (document(influx: #"database: "d", precision: "sec""#), #"telemetry.influx.precision: must be one of"#),
            (document(influx: #"database: "d", username: "u""#), "telemetry.influx.password: is required with the other credential"),
            (document(#"logging: { format: "jsn" }"#), #"logging.format: must be one of "text", "json" (got "jsn"); did you mean "json"?"#),
            (document(#"logging: { level: "verbose" }"#), "logging.level: must be one of"),
            (document("queue: { maxBytes: '10KiB' }"), "queue.maxBytes: \"10KiB\" is out of range 1MiB…"),
            (document("queue: { maxRecords: 2.5 }"), "queue.maxRecords: must be a whole number, not a fraction"),
            ("{ device: 7, server: { url: 'https://x' }, telemetry: { influx: { database: 'd' } } }", "device: must be an object"),
            (document("server: {}"), #"line 1, column 123: the key "server" appears twice in this object"#),
            (document(#""s\u0065rver": {}"#), #"line 1, column 123: the key "server" appears twice in this object"#),
            (document(#"'\x73erver': {}"#), #"line 1, column 123: the key "server" appears twice in this object"#),
            (
                "{ server: { url: 'https://x' }, telemetry: { influx: { database: 'd' }, interval: 0 } }",
                "telemetry.interval: 0 is out of range 1s…"
            ),
            (
                "{ server: { url: 'https://x' }, telemetry: { influx: { database: 'd' }, batch: { maxPoints: 'many' } } }",
                "telemetry.batch.maxPoints: must be a whole number, not a string"
            ),
            (
                "{ server: { url: 'https://x' }, telemetry: { influx: { database: 'd' } } }",
                "device.id: is not set and /nonexistent is missing"
            ),
            (
                "{ device: { id: 'a', labels: { _x: 'y' } }, server: { url: 'https://x' }, telemetry: { influx: { database: 'd' } } }",
                "device.labels._x: tag names starting with '_' are reserved"
            ),
            (
                document("queue: { retry: { initial: '10s', maximum: '2s' } }"),
                "queue.retry.maximum: 2s is shorter than queue.retry.initial"
            ),
            (document("daemon: { stopTimeout: '1h' }"), "daemon.stopTimeout: \"1h\" is out of range 1s…10m"),
            (document("daemon: { statusFil: '/x' }"), #"daemon.statusFil: unknown key; did you mean "statusFile"?"#),
            ("[1, 2]", "the document must be an object"),
        ]
        for (text, expected) in cases {
            let found = problems(text)
            #expect(found.contains { $0.hasPrefix(expected) }, "expected \(expected)\n in \(found)\n for \(text)")
        }
        // Several problems are reported together.
        let many = problems(#"{ sever: {}, server: { url: "gopher://x" }, telemetry: { interval: -1, influx: {} } }"#)
        #expect(many.count >= 4, "\(many)")
        #expect(problems(document()).isEmpty)
    }

    @Test("network: the proxy from the file or the environment; each bad value named by its key path, the password masked")
    func network() throws {
        let cases: [(String, String)] = [
            (document("network: { proxy: 'socks5://fleet:hunter2@gw:1080' }"), "network.proxy: socks5://fleet:***@gw:1080: SOCKS"),
            (document("network: { proxy: 'http://fleet:hunter2@gw:99999' }"), "network.proxy: http://fleet:***@gw:99999: port"),
            (document("network: { proxy: 3128 }"), "network.proxy: must be a string, not a number"),
            (
                document("network: { proxy: 'http://gw:3128', noProxy: ['ok.example', '10.0.0.0/40'] }"),
                "network.noProxy[1]: \"10.0.0.0/40\""
            ),
            (document("network: { proxy: 'http://gw:3128', noProxy: 'a,b' }"), "network.noProxy: must be an array"),
            (document("network: { proxy: 'http://gw:3128', proxyCAFile: '/nonexistent/ca.pem' }"), "network.proxyCAFile:"),
            (
                document("network: { proxy: 'http://gw:3128', proxyCAFile: '/etc/hostname' }"),
                "network.proxyCAFile: is for an https:// proxy"
            ),
            (document("network: { proxi: 'http://gw:3128' }"), #"network.proxi: unknown key; did you mean "proxy"?"#),
        ]
        for (text, expected) in cases {
            let found = problems(text)
            #expect(found.contains { $0.hasPrefix(expected) }, "expected \(expected)\n in \(found)\n for \(text)")
            #expect(!found.joined().contains("hunter2"))
        }
        func parse(_ text: String, _ variables: [String: String]) throws -> AgentConfig {
            try AgentConfig.parse(Data(text.utf8), file: "test.json5", machineIDPath: "/nonexistent", environment: { variables[$0] })
        }
        // Absent: the environment, as curl reads it.
        let fromEnvironment = try parse(document(), ["https_proxy": "http://gw:3128", "no_proxy": "10.0.0.0/8"])
        #expect(!fromEnvironment.network.proxyFromConfig && fromEnvironment.network.proxy.https?.displayURL == "http://gw:3128")
        #expect(fromEnvironment.network.proxy.noProxy.matches(host: "10.1.1.1"))
        let fleet = try #require(AbsoluteURL("https://fleet.example:8086"))
        #expect(fromEnvironment.network.routeHost(for: fleet) == "gw")
        #expect(problems(document()).isEmpty)
        do {
            _ = try parse(document(), ["https_proxy": "http://[::1"])
            Issue.record("a malformed https_proxy was accepted")
        } catch let error as ConfigError {
            let found = error.problems.map(\.description)
            #expect(found.contains { $0.hasPrefix("network.proxy: is not set, and the environment's proxy is malformed: https_proxy") })
        }
        // The file wins; "" means no proxy whatever the environment says.
        let fromFile = try parse(
            document("network: { proxy: 'http://fleet:s3cret%40x@gw:3128', noProxy: ['.corp.example', '::1'] }"),
            ["https_proxy": "http://other:1"])
        #expect(fromFile.network.proxyFromConfig && fromFile.network.proxy.https?.credentials?.password == "s3cret@x")
        #expect(fromFile.network.proxy.proxy(forScheme: "https", host: "db.corp.example") == nil)
        let none = try parse(document("network: { proxy: '' }"), ["https_proxy": "http://other:1"])
        #expect(none.network.proxy == .direct)
        // show masks the password and round-trips with --show-secrets.
        let shown = fromFile.rendered()
        #expect(shown.contains("http://fleet:***@gw:3128") && !shown.contains("s3cret"))
        let again = try parse(fromFile.rendered(maskingSecrets: false), [:])
        #expect(again.network.proxy == fromFile.network.proxy)
        #expect(try parse(fromEnvironment.rendered(maskingSecrets: false), [:]).network.proxy == .direct)
    }

    @Test("syntax errors say line and column; JSON5 comments, trailing commas and unquoted keys are fine")
    func syntax() {
        let broken = "{\n  server: {\n    url: \"https://x\"\n    idleTimeout: 5,\n  },\n}"
        #expect(problems(broken).first?.hasPrefix("line 4, column 5: expected ',' or '}'") == true, "\(problems(broken))")
        #expect(problems("{ a: [1,, 2] }").first?.contains("two commas") == true)
        #expect(problems("{ a: 'open }").first?.contains("string never closed") == true)
        #expect(problems("{ a: yes }").first?.contains("'yes' is not a value") == true)
        #expect(problems("{ /* never closed").first?.contains("comment never closed") == true)
        let fine = """
            // a comment
            {
              device: { id: 'd', },  /* block */
              server: { url: "https://x", },
              telemetry: { influx: { database: 'd', }, jitter: 0x0, },
            }
            """
        #expect(problems(fine).isEmpty, "\(problems(fine))")
    }

    @Test(
        "another user's key, a password in a config others can read, a firmware key others can write and an open queue directory are refused by path"
    )
    func ownership() throws {
        let directory = try agentScratch("ownership")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let (otherUser, otherGroup) = try SpoolAttacker.ids()
        // A 0600 client key that belongs to another user.
        let key = directory + "/device.key"
        try Data("key".utf8).write(to: URL(filePath: key))
        try Data("cert".utf8).write(to: URL(filePath: directory + "/device.pem"))
        chmod(key, 0o600)
        #expect(chown(key, otherUser, otherGroup) == 0)
        let keyConfig = directory + "/key.json5"
        try Data(document(server: #"url: "https://x", clientCertificate: "device.pem", clientKey: "device.key""#).utf8)
            .write(to: URL(filePath: keyConfig))
        let foreignKey = try fireAgent(["config", "check", keyConfig])
        #expect(
            foreignKey.status == 78 && foreignKey.stderr.contains("server.clientKey: \(key) is owned by uid \(otherUser)"),
            "\(foreignKey.stderr)")
        // A password in a config that group or others can read.
        let secretConfig = directory + "/secret.json5"
        try Data(document(influx: #"database: "d", username: "u", password: "p""#).utf8).write(to: URL(filePath: secretConfig))
        chmod(secretConfig, 0o644)
        let readable = try fireAgent(["config", "check", secretConfig])
        #expect(readable.status == 78, "\(readable.stderr)")
        #expect(
            readable.stderr.contains(
                "telemetry.influx.password: is in this file, and \(secretConfig) is readable or writable by group or others (mode 0644)"),
            "\(readable.stderr)")
        chmod(secretConfig, 0o600)
        #expect(try fireAgent(["config", "check", secretConfig]).status == 0)
        // A firmware key that others may replace.
        let vendor = try VendorKeys("ownership")
        defer { vendor.remove() }
        try vendor.makeEC("ec")
        let pub = directory + "/vendor.pub"
        try FileManager.default.copyItem(atPath: vendor.directory + "/ec.pub", toPath: pub)
        chmod(pub, 0o666)
        let firmwareText = document(
            #"firmware: { manifestURL: "https://u.example/m.json", keys: ["vendor.pub"], deviceType: "gw", versionFile: "/etc/v", install: ["i", "{file}"] }"#
        )
        let firmwareProblems = problemsLoading(firmwareText, in: directory)
        #expect(
            firmwareProblems.contains { $0.hasPrefix("firmware.keys[0]: \(pub) is writable by group or others (mode 0666)") },
            "\(firmwareProblems)")
        chmod(pub, 0o644)
        #expect(problemsLoading(firmwareText, in: directory).isEmpty)
        // The agent does not start on a queue directory others can write, nor below one that
        // others can write without the sticky bit.
        let queue = directory + "/state/queue"
        try FileManager.default.createDirectory(atPath: queue, withIntermediateDirectories: true)
        let agentText = document(#"queue: { directory: "state/queue" },"#)
        chmod(queue, 0o777)
        #expect(throws: AgentError.self) { try agentStarting(agentText, in: directory) }
        do {
            try agentStarting(agentText, in: directory)
        } catch {
            #expect("\(error)".hasPrefix("queue.directory: \(queue) is writable by group or others (mode 0777)"), "\(error)")
        }
        chmod(queue, 0o700)
        chmod(directory + "/state", 0o777)
        do {
            try agentStarting(agentText, in: directory)
            Issue.record("started below a world-writable directory without the sticky bit")
        } catch {
            #expect("\(error)".contains("\(directory)/state, above"), "\(error)")
        }
        chmod(directory + "/state", 0o1777)
        try agentStarting(agentText, in: directory)
    }

    /// The problems `AgentConfig.load` finds in `text`, written to `directory/agent.json5`.
    func problemsLoading(_ text: String, in directory: String) -> [String] {
        let path = directory + "/agent.json5"
        do {
            try Data(text.utf8).write(to: URL(filePath: path))
            _ = try AgentConfig.load(path: path)
            return []
        } catch let error as ConfigError {
            return error.problems.map(\.description)
        } catch {
            return ["\(error)"]
        }
    }

    /// Starts (and closes) an agent on `text`.
    func agentStarting(_ text: String, in directory: String) throws(AgentError) {
        let path = directory + "/agent.json5"
        guard (try? Data(text.utf8).write(to: URL(filePath: path))) != nil, let config = try? AgentConfig.load(path: path) else {
            throw AgentError(description: "config not written or not valid")
        }
        let agent = try TelemetryAgent(config: config, logger: Logger(label: "test"))
        agent.close()
    }

    @Test("the file itself: missing, a directory, a FIFO or a device, over 1 MiB (refused unread); state paths absolute, dot segments out")
    func configFile() throws {
        let directory = FileManager.default.temporaryDirectory.appending(path: "tinyfire-config-file-\(getpid())").path
        try? FileManager.default.removeItem(atPath: directory)
        try FileManager.default.createDirectory(atPath: directory + "/etc", withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        func refusal(_ path: String) -> String {
            do {
                _ = try AgentConfig.load(path: path)
                return "accepted"
            } catch {
                return error.problems.map(\.reason).joined(separator: "; ")
            }
        }
        #expect(refusal(directory + "/missing.json5") == "does not exist")
        #expect(refusal(directory + "/etc") == "cannot be read: Is a directory")
        // A FIFO with no writer (a local user's trap for a root reader) is refused at once,
        // not waited on; so are devices.
        let fifo = directory + "/fifo.json5"
        #expect(mkfifo(fifo, 0o600) == 0)
        #expect(refusal(fifo) == "is not a regular file (a FIFO)")
        #expect(refusal("/dev/zero") == "is not a regular file (a device)")
        // A big file (a log named by mistake) is refused before it is read into memory.
        let big = directory + "/big.json5"
        try Data((document() + String(repeating: " ", count: AgentConfig.maximumFileBytes)).utf8).write(to: URL(filePath: big))
        #expect(refusal(big) == "is larger than 1MiB: not a config file")
        let fits = directory + "/fits.json5"
        try Data((document() + String(repeating: " ", count: AgentConfig.maximumFileBytes - document().utf8.count)).utf8)
            .write(to: URL(filePath: fits))
        #expect(refusal(fits) == "accepted")
        // State directories are made absolute, `.` and `..` taken out as written (the working
        // directory is the process's: not changed here, tests run side by side).
        let text = document(#"queue: { directory: "state/q", deadLetterDirectory: "state/./q/../dead" }"#)
        try Data(text.utf8).write(to: URL(filePath: directory + "/etc/agent.json5"))
        let config = try AgentConfig.load(path: directory + "/etc/agent.json5")
        #expect(config.queue.directory == directory + "/etc/state/q")
        #expect(config.queue.deadLetterDirectory == directory + "/etc/state/dead")
        let here = FileManager.default.currentDirectoryPath
        #expect(AgentConfig.standardized("etc/state/q/../dead") == here + "/etc/state/dead")
        #expect(AgentConfig.standardized("/a//b/./c/../../d/") == "/a//d/")
        #expect(AgentConfig.standardized("/a/../../..") == "/")
    }

    @Test("a client key that group or others can read is refused, as ssh refuses it; 0600 is accepted")
    func privateKeyMode() throws {
        let directory = FileManager.default.temporaryDirectory.appending(path: "tinyfire-config-\(getpid())")
        try? FileManager.default.removeItem(at: directory)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let key = directory.appending(path: "device.key").path
        let certificate = directory.appending(path: "device.pem").path
        try Data("key".utf8).write(to: URL(filePath: key))
        try Data("cert".utf8).write(to: URL(filePath: certificate))
        chmod(key, 0o644)
        let config = directory.appending(path: "agent.json5").path
        try Data(
            document(server: #"url: "https://x", clientCertificate: "device.pem", clientKey: "device.key""#).utf8
        ).write(to: URL(filePath: config))
        let refused = try fireAgent(["config", "check", config])
        #expect(refused.status == 78)
        #expect(
            refused.stderr.contains("server.clientKey: \(key) is readable or writable by group or others (mode 0644): run chmod 600 on it"),
            "\(refused.stderr)")
        chmod(key, 0o600)
        let accepted = try fireAgent(["config", "check", config])
        #expect(accepted.status == 0, "\(accepted.stderr)")
        let missing = try fireAgent(["config", "check", directory.appending(path: "none.json5").path])
        #expect(missing.status == 78 && missing.stderr.contains("does not exist"))
    }

    @Test("durations and sizes take numbers or units; the device id defaults to /etc/machine-id")
    func unitsAndDefaults() throws {
        #expect(ConfigReader.parseDuration("250ms") == .milliseconds(250))
        #expect(ConfigReader.parseDuration("5m") == .seconds(300))
        #expect(ConfigReader.parseDuration("1.5h") == .seconds(5400))
        #expect(ConfigReader.parseDuration("soon") == nil)
        #expect(ConfigReader.parseBytes("64MiB") == 64 << 20)
        #expect(ConfigReader.parseBytes("10MB") == 10_000_000)
        #expect(ConfigReader.parseBytes("x") == nil)
        let machineID = FileManager.default.temporaryDirectory.appending(path: "tinyfire-machine-id-\(getpid())")
        try Data("0123456789abcdef\n".utf8).write(to: machineID)
        defer { try? FileManager.default.removeItem(at: machineID) }
        let text = "{ server: { url: 'http://127.0.0.1:8086' }, telemetry: { interval: 30, influx: { database: 'd' } } }"
        let config = try AgentConfig.parse(Data(text.utf8), file: "t.json5", machineIDPath: machineID.path)
        #expect(config.device.id == "0123456789abcdef")
        #expect(config.telemetry.interval == .seconds(30))
        #expect(config.queue.maxBytes == 64 << 20)
        #expect(config.telemetry.api == .v1(database: "d", retentionPolicy: nil, username: nil, password: nil))
    }
}

extension ConfigTests {
    @Test("the firmware section: each missing or bad key named; keys read at load; relative paths from the config file; show round-trips")
    func firmwareSection() throws {
        let directory = try agentScratch("fwconfig")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let vendor = try VendorKeys("fwconfig")
        defer { vendor.remove() }
        try vendor.makeEC("ec")
        try vendor.makeRSA("small", bits: 1024)
        let empty = problems(document("firmware: {}"))
        for expected in [
            "firmware.manifestURL: is required", "firmware.keys: is required", "firmware.deviceType: is required",
            "firmware.versionFile: is required (or versionCommand)", "firmware.install: is required",
        ] {
            #expect(empty.contains { $0.hasPrefix(expected) }, "\(expected) in \(empty)")
        }
        let bad = problems(
            document(
                """
                firmware: { manifestURL: "ftp://x/m.json", keys: ["\(vendor.directory)/missing.pub", "\(vendor.directory)/small.pub"],
                  deviceType: "gw", versionFile: "/etc/v", versionCommand: ["cat", "/etc/v"], install: ["rauc", "install"],
                  maxBytesPerSecond: "64KiB", lowSpeedBytesPerSecond: "64KiB", retry: { initial: "1m", maximum: "10s" },
                  rebootExitCode: 300, pollInterval: "soon", unknownKey: 1 }
                """))
        for expected in [
            "firmware.manifestURL: \"ftp://x/m.json\" is not an http:// or https:// URL",
            "firmware.keys[0]: cannot be read: No such file or directory", "firmware.keys[1]: an RSA key of 1024 bits",
            "firmware.versionCommand: and versionFile are both set", "firmware.install: must pass the image",
            "firmware.lowSpeedBytesPerSecond: must be below maxBytesPerSecond", "firmware.retry.maximum: is shorter",
            "firmware.rebootExitCode:", "firmware.pollInterval:", "firmware.unknownKey: unknown key",
        ] {
            #expect(bad.contains { $0.hasPrefix(expected) }, "\(expected) in \(bad)")
        }

        let text = document(
            """
            firmware: { manifestURL: "https://updates.example/gw/manifest.json", keys: ["keys/ec.pub"], deviceType: "gw",
              versionFile: "/etc/sw-version", install: ["bin/install", "--image={file}", "{version}"], reboot: ["systemctl", "reboot"],
              commit: ["rauc", "status", "mark-good"], maxBytesPerSecond: "1MiB", statusURL: "https://fleet.example/status" }
            """)
        try FileManager.default.createDirectory(atPath: directory + "/keys", withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: vendor.directory + "/ec.pub", toPath: directory + "/keys/ec.pub")
        let config = try AgentConfig.parse(Data(text.utf8), file: directory + "/agent.json5", machineIDPath: "/nonexistent")
        let firmware = try #require(config.firmware)
        #expect(firmware.signatureURL.absoluteString == "https://updates.example/gw/manifest.json.sig")
        #expect(firmware.keys.map(\.path) == [directory + "/keys/ec.pub"])
        #expect(firmware.install == [directory + "/bin/install", "--image={file}", "{version}"])
        #expect(firmware.reboot == ["systemctl", "reboot"], "a bare program name stays for PATH")
        #expect(firmware.pollInterval == .seconds(3600) && firmware.rebootRequired && !firmware.allowDowngrade)
        #expect(firmware.maxBytesPerSecond == 1 << 20 && firmware.directory.hasSuffix("/var/lib/fire-agent/firmware"))
        let rendered = config.rendered()
        let again = try AgentConfig.parse(Data(rendered.utf8), file: directory + "/shown.json5", machineIDPath: "/nonexistent")
        #expect(again.firmware?.install == firmware.install && again.firmware?.keys.map(\.path) == firmware.keys.map(\.path))
        #expect(again.firmware?.maxBytesPerSecond == firmware.maxBytesPerSecond && again.firmware?.statusURL == firmware.statusURL)
        #expect(again.rendered() == rendered)
    }
}
