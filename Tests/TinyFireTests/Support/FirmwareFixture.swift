import FireAgent
import Foundation

/// A vendor's update server for one test: nginx on loopback serving `www/` (images, manifests,
/// signatures; static files, so ETag, Last-Modified and ranges are nginx's own), accepting
/// status events at `/status` and telemetry at `/ingest/`, with its logs:
/// `access.log` (`uri status bytes "Range" "If-Range" "If-None-Match"`) and `status.log` (one
/// event body per line). Keys and signatures are made with `openssl` (`VendorKeys`).
final class FirmwareServer: @unchecked Sendable {
    let directory: String
    let port: Int
    let vendor: VendorKeys
    private var process: ChildProcess?
    private let nginx: String

    /// The address nginx listens on (loopback unless a test routes to it over a veth).
    let address: String
    var base: String { "http://\(address):\(port)" }
    var www: String { directory + "/www" }

    init(_ name: String, address: String = "127.0.0.1") throws {
        guard let nginx = which("nginx") else { throw FixtureError(description: "nginx is not installed") }
        self.nginx = nginx
        self.address = address
        vendor = try VendorKeys("fw-\(name)")
        directory = vendor.directory + "/server"
        port = freePort()
        try FileManager.default.createDirectory(atPath: www, withIntermediateDirectories: true)
        let dir = directory
        let config = """
            worker_processes 1;
            daemon off;
            pid \(dir)/nginx.pid;
            error_log \(dir)/error.log;
            events { worker_connections 64; }
            http {
              log_format fw '$request_uri $status $body_bytes_sent "$http_range" "$http_if_range" "$http_if_none_match"';
              log_format status escape=json '$request_body';
              access_log \(dir)/access.log fw;
              client_body_temp_path \(dir)/body; proxy_temp_path \(dir)/proxy; fastcgi_temp_path \(dir)/fastcgi;
              uwsgi_temp_path \(dir)/uwsgi; scgi_temp_path \(dir)/scgi;
              default_type application/octet-stream;
              server {
                listen \(address):\(port);
                root \(dir)/www;
                location /ingest/ { client_max_body_size 64m; return 204; }
                # An image the server cannot give right now: each attempt fails and is retried.
                location /unavailable/ { return 503; }
                # Proxied to itself so nginx reads the body and can log it.
                location = /status { access_log \(dir)/status.log status; proxy_pass http://\(address):\(port)/status-sink; }
                location = /status-sink { access_log off; return 204; }
              }
            }
            """
        try config.write(toFile: dir + "/nginx.conf", atomically: true, encoding: .utf8)
        try start()
    }

    func start() throws {
        process = try ChildProcess(nginx, ["-c", directory + "/nginx.conf", "-e", directory + "/error.log"])
        try waitForPort(port, host: address)
    }

    /// Stops nginx (the port stays this fixture's: `start()` takes it again).
    func stop() {
        process?.stop()
        process = nil
    }

    func remove() {
        stop()
        vendor.remove()
    }

    /// Deterministic image bytes.
    static func image(size: Int, seed: UInt64) -> Data {
        var generator = SplitMix64(seed: seed)
        var data = Data(count: size)
        data.withUnsafeMutableBytes { raw in
            let words = raw.bindMemory(to: UInt64.self)
            for index in words.indices { words[index] = generator.next() }
            for index in (words.count * 8)..<size { raw[index] = UInt8(truncatingIfNeeded: generator.next()) }
        }
        return data
    }

    /// Publishes `image` as `name` and a manifest for it signed with `key` (`vendor.make…`
    /// first); the fields can be overridden to make bad manifests.
    /// - Returns: the manifest's bytes.
    @discardableResult
    func publish(
        version: String, image: Data, name: String = "image.bin", key: String = "ec", compatible: [String] = ["test-board"],
        size: Int? = nil, sha256: String? = nil, expires: String? = "2099-01-01T00:00:00Z", signOptions: [String] = [],
        writeImage: Bool = true, signature: Bool = true, sameMtimeAsServed: Bool = false
    ) throws -> Data {
        if writeImage { try image.write(to: URL(filePath: www + "/" + name)) }
        let digest = sha256 ?? SHA256Hasher.digest(of: [UInt8](image)).map { String(format: "%02x", $0) }.joined()
        var fields = [
            #""version": "\#(version)""#, #""compatible": [\#(compatible.map { "\"\($0)\"" }.joined(separator: ", "))]"#,
            #""image": "\#(name)""#, #""size": \#(size ?? image.count)"#, #""sha256": "\#(digest)""#,
            #""notes": "test release \#(version)""#,
        ]
        if let expires { fields.append(#""expires": "\#(expires)""#) }
        let manifest = Data(("{ " + fields.joined(separator: ", ") + " }\n").utf8)
        try manifest.write(to: URL(filePath: vendor.directory + "/manifest.json"))
        try? FileManager.default.removeItem(atPath: www + "/manifest.json.sig")
        if signature {
            let bytes = try vendor.sign("manifest.json", with: key, options: signOptions)
            try Data(bytes).write(to: URL(filePath: www + "/manifest.json.sig"))
        }
        // The manifest last: an agent polling meanwhile sees the old one or the new one.
        try manifest.write(to: URL(filePath: www + "/manifest.json.tmp"))
        if sameMtimeAsServed {
            // As a copy within the same second would leave it: nginx's ETag ("mtime-size") repeats.
            var served = stat()
            guard stat(www + "/manifest.json", &served) == 0 else { throw POSIXError(.ENOENT) }
            var times = [served.st_atim, served.st_mtim]
            guard utimensat(AT_FDCWD, www + "/manifest.json.tmp", &times, 0) == 0 else { throw POSIXError(.EPERM) }
        }
        rename(www + "/manifest.json.tmp", www + "/manifest.json")
        return manifest
    }

    /// Access-log lines whose URI contains `token`.
    func accessLines(containing token: String) -> [String] {
        let text = (try? String(contentsOfFile: directory + "/access.log", encoding: .utf8)) ?? ""
        return text.split(separator: "\n").map(String.init).filter { $0.contains(token) }
    }

    /// The status events received, decoded.
    func statusEvents() -> [[String: Any]] {
        let text = (try? String(contentsOfFile: directory + "/status.log", encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap {
            // escape=json leaves the body as a JSON string's inside: unescape, then parse.
            guard
                let unescaped = try? JSONSerialization.jsonObject(with: Data(("\"" + $0 + "\"").utf8), options: .fragmentsAllowed)
                    as? String
            else { return nil }
            return (try? JSONSerialization.jsonObject(with: Data(unescaped.utf8))) as? [String: Any]
        }
    }
}

/// A device as the agent sees it, in a directory: its version file, boot ID, an installer that
/// records each call and "writes the slot" (copies the image), a commit command that records
/// its calls.
struct FakeBoard {
    let directory: String

    init(in directory: String, version: String) throws {
        self.directory = directory
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try setVersion(version)
        try reboot()
        let installer = """
            #!/bin/sh
            # Records the call, then copies the image into the "other slot".
            echo "install $1 $2" >> "\(directory)/calls.log"
            cp "$1" "\(directory)/slot.img" || exit 2
            echo "$2" > "\(directory)/slot.version"
            echo "installed $2 into the other slot"
            exit ${INSTALL_EXIT:-0}
            """
        try installer.write(toFile: directory + "/install.sh", atomically: true, encoding: .utf8)
        try "#!/bin/sh\necho \"commit\" >> \"\(directory)/calls.log\"\n".write(
            toFile: directory + "/commit.sh", atomically: true, encoding: .utf8)
        // The health check answers as `health.mode` says: pass, fail, hang, or `fail N` (fails
        // its first N calls, then passes).
        let health = """
            #!/bin/sh
            echo "health $1" >> "\(directory)/calls.log"
            mode=$(cat "\(directory)/health.mode" 2>/dev/null || echo pass)
            calls=$(grep -c '^health' "\(directory)/calls.log")
            case "$mode" in
              pass) echo "app is up"; exit 0 ;;
              hang) echo $$ > "\(directory)/health.pid"; exec sleep 3600 ;;
              "fail "*) if [ "$calls" -gt "${mode#fail }" ]; then echo "app is up"; exit 0; fi ;;
            esac
            echo "app is down (call $calls)"
            exit 1
            """
        // The rollback marks the booted slot bad: the next boot is the old version's.
        let rollback = """
            #!/bin/sh
            echo "rollback" >> "\(directory)/calls.log"
            touch "\(directory)/marked-bad"
            echo "marked the booted slot bad"
            """
        // A reboot is asked for; the test "reboots" the board (`handleReboot`).
        let reboot = "#!/bin/sh\necho \"reboot\" >> \"\(directory)/calls.log\"\ntouch \"\(directory)/reboot.requested\"\n"
        for (name, text) in [("health.sh", health), ("rollback.sh", rollback), ("reboot.sh", reboot)] {
            try text.write(toFile: directory + "/" + name, atomically: true, encoding: .utf8)
            chmod(directory + "/" + name, 0o755)
        }
        chmod(directory + "/install.sh", 0o755)
        chmod(directory + "/commit.sh", 0o755)
    }

    /// How the health check answers: `pass`, `fail`, `hang`, `fail N`.
    func setHealth(_ mode: String) throws {
        try mode.write(toFile: directory + "/health.mode", atomically: true, encoding: .utf8)
    }

    /// The reboot command ran and the board has not "rebooted" since.
    var rebootRequested: Bool { access(directory + "/reboot.requested", F_OK) == 0 }

    /// Performs the reboot the agent asked for: after a rollback marked the slot bad, the old
    /// version `fallback` boots; otherwise the slot the installer wrote.
    func handleReboot(fallback: String) throws {
        unlink(directory + "/reboot.requested")
        if access(directory + "/marked-bad", F_OK) == 0 {
            unlink(directory + "/marked-bad")
            try setVersion(fallback)
            try reboot()
        } else {
            try bootInstalledSlot()
        }
    }

    /// The health-check, rollback and reboot commands for the firmware section's `extra`.
    func confirmationSection(attempts: Int = 2, timeout: String = "5s", interval: String = "200ms", confirmTimeout: String? = nil)
        -> String
    {
        """
        healthCheck: { command: ["\(directory)/health.sh", "{version}"], timeout: "\(timeout)", attempts: \(attempts), interval: "\(interval)" },
        rollback: ["\(directory)/rollback.sh"],
        reboot: ["\(directory)/reboot.sh"],
        \(confirmTimeout.map { "confirmTimeout: \"\($0)\"," } ?? "")
        """
    }

    func setVersion(_ version: String) throws {
        try (version + "\n").write(toFile: directory + "/version", atomically: true, encoding: .utf8)
    }

    /// A new boot ID (what a reboot changes).
    func reboot() throws {
        try (UUID().uuidString.lowercased() + "\n").write(toFile: directory + "/boot_id", atomically: true, encoding: .utf8)
    }

    /// "Boots" the slot the installer wrote: its version becomes the running one.
    func bootInstalledSlot() throws {
        let version = try String(contentsOfFile: directory + "/slot.version", encoding: .utf8).trimmingCharacters(
            in: .whitespacesAndNewlines)
        try setVersion(version)
        try reboot()
    }

    /// The installer's and commit command's calls.
    var calls: [String] {
        ((try? String(contentsOfFile: directory + "/calls.log", encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
    }

    var installs: [String] { calls.filter { $0.hasPrefix("install ") } }

    /// The firmware section for this board and `server`.
    /// `commands` replaces the fake installer and commit command (`install: […], commit: […],`).
    func firmwareSection(
        server: FirmwareServer, keys: [String] = ["ec.pub"], extra: String = "", state: String? = nil, commands: String? = nil
    ) -> String {
        """
        firmware: {
          manifestURL: "\(server.base)/manifest.json",
          keys: [\(keys.map { "\"\(server.vendor.directory)/\($0)\"" }.joined(separator: ", "))],
          deviceType: "test-board",
          versionFile: "\(directory)/version",
          bootIDFile: "\(directory)/boot_id",
          directory: "\(state ?? directory + "/firmware")",
          pollInterval: "1s", jitter: 0,
          retry: { initial: "200ms", maximum: "1s" },
          \(commands ?? "install: [\"\(directory)/install.sh\", \"{file}\", \"{version}\"], commit: [\"\(directory)/commit.sh\"],")
          statusURL: "\(server.base)/status",
          \(extra)
        },
        """
    }

    /// A whole agent config: telemetry to `telemetry` (default the server's `/ingest/`, which
    /// takes and drops it), the firmware section.
    /// `topLevel` is spliced into the document's top level (`network: { … },`).
    func writeConfig(
        server: FirmwareServer, keys: [String] = ["ec.pub"], extra: String = "", telemetry: String? = nil, state: String? = nil,
        topLevel: String = "", commands: String? = nil
    ) throws -> String {
        let text = """
            {
              device: { id: "board-fw" },
              server: { url: "\(telemetry ?? server.base + "/ingest")", connectTimeout: "2s" },
              telemetry: { interval: "60s", syncInterval: "1s", jitter: 0, influx: { database: "fleet" }, spoolDirectory: "spool",
                           collectors: { cpu: false, memory: false, load: false, uptime: false, disk: false, network: false,
                                         thermal: false, pressure: false, agent: false } },
              queue: { directory: "queue", retry: { initial: "200ms", maximum: "2s" } },
              daemon: { statusFile: "status.json", stopTimeout: "5s" },
              // Manifests carry an expiry; test machines may run no NTP client (ClockTests
              // covers the default, requireSync true).
              clock: { requireSync: false },
              \(topLevel)
              \(firmwareSection(server: server, keys: keys, extra: extra, state: state, commands: commands))
            }
            """
        try FileManager.default.createDirectory(atPath: directory + "/spool", withIntermediateDirectories: true)
        try text.write(toFile: directory + "/agent.json5", atomically: true, encoding: .utf8)
        return directory + "/agent.json5"
    }

    var status: AgentStatus? { try? AgentStatus.read(path: directory + "/status.json") }
    var firmware: AgentStatus.Firmware? { status?.firmware }
}
