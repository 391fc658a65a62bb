import TinyFireCore

#if canImport(Glibc)
    import CTinyFireSystem
    import Glibc
#elseif canImport(Musl)
    import CTinyFireSystem
    import Musl
#endif

/// fire-agent's configuration: one JSON5 file (docs/CONFIG.md is the schema). Read with
/// `AgentConfig.load(path:)`, which refuses a file with any problem — unknown keys (with the
/// closest known key), wrong types, missing or impossible values, a readable private key — and
/// names each one by its key path, before anything runs.
package struct AgentConfig: Sendable {
    /// Where the agent reads its config unless `--config` says otherwise.
    package static let defaultPath = "/etc/fire-agent/fire-agent.json5"

    /// Who this device is.
    package struct Device: Sendable {
        /// The device's identifier: a tag on every point (default: /etc/machine-id).
        package var id: String
        /// Extra tags on every point (site, model, …).
        package var labels: [String: String]
    }

    /// The fleet backend and how to reach it.
    package struct Server: Sendable {
        /// Base URL (http or https); InfluxDB paths go below it.
        package var url: AbsoluteURL
        /// CA certificates (PEM) to trust instead of the system bundle.
        package var caFile: String?
        /// SPKI pins, `sha256//BASE64`; any one must match the verified chain.
        package var pins: [String]
        /// Client certificate (PEM) for mutual TLS.
        package var clientCertificate: String?
        /// Its private key (PEM); refused when group or others can read it.
        package var clientKey: String?
        /// DNS plus TCP connect.
        package var connectTimeout: Duration
        /// No byte moving.
        package var idleTimeout: Duration
        /// One whole request.
        package var requestTimeout: Duration
    }

    /// Where telemetry goes: InfluxDB's v1 `/write` or v2 `/api/v2/write`.
    package enum InfluxAPI: Sendable, Equatable {
        /// `/write?db=…&rp=…`, with Basic credentials when given.
        case v1(database: String, retentionPolicy: String?, username: String?, password: String?)
        /// `/api/v2/write?org=…&bucket=…`, with `Authorization: Token …`.
        case v2(organization: String, bucket: String, token: String)
    }

    /// Timestamp precision of the line protocol sent.
    package typealias Precision = TimestampPrecision

    /// How the agent reaches servers: the proxy for telemetry, manifests, images and reports.
    package struct Network: Sendable {
        /// Which proxy each request goes through.
        package var proxy: ProxySettings
        /// The proxy came from `network.proxy` (true) or, with the key absent, from the
        /// environment (`https_proxy`, `http_proxy`, `all_proxy`, `no_proxy`, as curl reads them).
        package var proxyFromConfig: Bool
        /// `network.proxy` as written (nil when absent; "" for no proxy).
        package var proxyURL: String?
        /// `network.noProxy` as written (nil when absent).
        package var noProxy: [String]?
        /// `network.proxyCAFile`, resolved.
        package var proxyCAFile: String?
        /// Entries of the environment's `no_proxy` that are no host, address, range or `*`:
        /// ignored, as curl ignores them (the valid ones apply), each said once in these words
        /// (`config check` prints them, the agent logs them when it starts).
        package var ignoredNoProxyEntries: [String] = []

        /// The host a request to `url` connects to: its proxy's, or its own.
        package func routeHost(for url: AbsoluteURL) -> String? {
            guard let host = url.host else { return nil }
            return proxy.routeHost(forScheme: url.scheme, host: host)
        }
    }

    /// Which built-in collectors run.
    package struct Collectors: Sendable, Equatable {
        /// CPU time per state, from /proc/stat deltas.
        package var cpu = true
        /// /proc/meminfo.
        package var memory = true
        /// /proc/loadavg.
        package var load = true
        /// /proc/uptime.
        package var uptime = true
        /// statvfs of each real mount.
        package var disk = true
        /// /proc/net/dev per interface.
        package var network = true
        /// /sys/class/thermal zones.
        package var thermal = true
        /// /proc/pressure (PSI), where the kernel has it.
        package var pressure = true
        /// The agent's own health: queue, drops, dead letters, last sync, RSS.
        package var agent = true

        /// Every collector on.
        package init() {}
    }

    /// Telemetry: collection, spool, batching, upload.
    package struct Telemetry: Sendable {
        /// Collection period.
        package var interval: Duration
        /// Delivery period (a sync also runs when the network comes back).
        package var syncInterval: Duration
        /// Each period is moved by up to this fraction, at random, so a fleet spreads out.
        package var jitter: Double
        /// Which collectors run.
        package var collectors: Collectors
        /// Directory other programs drop line-protocol files into (renamed in); nil: none.
        package var spoolDirectory: String?
        /// The largest spool file taken (read as a stream: memory does not grow with it); a
        /// larger one is moved to `rejected/` unread. Default 16 MiB, at most 1 GiB.
        package var spoolMaxFileBytes: Int
        /// The most `rejected/` in the spool may hold (refused lines, entries set aside), in
        /// bytes on disk; past it the oldest entries are removed, counted and logged. Default
        /// 4 MiB, at least 64 KiB, at most 1 GiB.
        package var spoolRejectedMaxBytes: Int
        /// Spool points always carry the board's `device` tag; a `device` tag the line itself
        /// carried is dropped, or kept under this tag key when one is set. Default nil.
        package var spoolDeviceTagKeptAs: String?
        /// Points per batch at most.
        package var batchMaxPoints: Int
        /// Bytes per batch (uncompressed line protocol) at most.
        package var batchMaxBytes: Int
        /// InfluxDB v1 or v2, with its database or bucket and credentials.
        package var api: InfluxAPI
        /// Timestamp precision sent.
        package var precision: Precision
    }

    /// The offline queue every batch goes through.
    package struct Queue: Sendable {
        /// Where the queue keeps its journal and body files.
        package var directory: String
        /// Batches held at most.
        package var maxRecords: Int
        /// Bytes held at most (journal plus body files).
        package var maxBytes: Int64
        /// Batches the server refused for good (400), with its message.
        package var deadLetterDirectory: String
        /// A batch the server keeps answering with a retryable error goes to the dead
        /// letters after this long at the head of the queue (nothing blocks it forever).
        package var maxRecordAge: Duration
        /// What a full queue does with a new batch: refuse it (`rejectNew`, the default: what
        /// is queued is kept; spool files then stay in the spool) or drop the oldest
        /// (`dropOldest`: the newest data wins). Both are counted.
        package var overflow: QueueOverflowPolicy
        /// The delay after the first failed delivery; it doubles with each failure in a row.
        package var retryInitial: Duration
        /// The longest delay between two attempts (a server's Retry-After can ask for more).
        package var retryMaximum: Duration
        /// Batches in flight at once, each on a keep-alive connection of its own (InfluxDB
        /// needs no order between batches); they are still removed from the queue in order.
        /// Default 4; 1 sends one at a time.
        package var inFlight: Int = 4
    }

    /// Log output.
    package struct Logging: Sendable {
        /// The lowest level logged.
        package var level: LogLevel
        /// `text` for people, `json` for collectors (one object per line).
        package var format: String
    }

    /// How `fire-agent run` behaves as a service.
    package struct Daemon: Sendable {
        /// Where the running daemon keeps its status for `fire-agent status` (JSON, replaced
        /// atomically). Default `/run/fire-agent/status.json`.
        package var statusFile: String
        /// How long SIGTERM waits for a delivery in flight before the daemon exits anyway
        /// (the batch stays queued and is sent again). Default 10 s.
        package var stopTimeout: Duration
    }

    /// How far the wall clock is believed (docs/OPERATIONS.md, "Time").
    package struct Clock: Sendable {
        /// Whether a clock the kernel reports unsynchronized (`adjtimex` `STA_UNSYNC`, and no
        /// systemd-timesyncd flag) is untrusted: decisions that need the date (a manifest's
        /// expiry, the age of a batch queued before a reboot) then wait. Default true; set it
        /// false on a board that runs no NTP client and keeps time with a battery-backed RTC.
        package var requireSync: Bool
    }

    /// Firmware updates (docs/FIRMWARE.md): present when `firmware.manifestURL` is set.
    package struct Firmware: Sendable {
        /// The signed manifest, polled with `If-None-Match`.
        package var manifestURL: AbsoluteURL
        /// Its detached signature. Default: the manifest's URL with `.sig` appended.
        package var signatureURL: AbsoluteURL
        /// The vendor's public keys (read and checked at load); any one valid signature suffices.
        package var keys: [ManifestKey]
        /// This device's type: a manifest must list it in `compatible`.
        package var deviceType: String
        /// The booted version: the first line of this file (e.g. `/etc/sw-version`)…
        package var versionFile: String?
        /// …or the first line of this command's output (argv, no shell).
        package var versionCommand: [String]?
        /// This boot's ID (a different one means the device rebooted).
        package var bootIDFile: String
        /// State, staging directory (the image and its resume record) and the report queue.
        package var directory: String
        /// How often the manifest is polled (jittered; at once when the route comes back).
        package var pollInterval: Duration
        /// Each poll is moved by up to this fraction, at random.
        package var jitter: Double
        /// Install versions at or below the highest ever accepted (never by default).
        package var allowDowngrade: Bool
        /// The largest `maxBytesPerSecond` and `lowSpeedBytesPerSecond`: 1 GiB/s, which fits the
        /// 32-bit `Int` of armv7 boards (a larger value is a config problem, not a trap).
        package static let maximumBytesPerSecond: Int64 = 1 << 30
        /// Image download rate limit, bytes per second (metered links), at most
        /// `maximumBytesPerSecond`; nil: none.
        package var maxBytesPerSecond: Int?
        /// An image download slower than this (bytes per second, at most
        /// `maximumBytesPerSecond`) for `lowSpeedTime` is cut and retried.
        package var lowSpeedBytesPerSecond: Int
        /// The window of `lowSpeedBytesPerSecond`.
        package var lowSpeedTime: Duration
        /// The manifest and its signature must each arrive whole within this; default 20 s.
        package var manifestTimeout: Duration
        /// Download attempts that may fail with the server reachable before the update fails.
        package var downloadAttempts: Int
        /// Free space the image must leave on its file system (for the state, the queue and
        /// the reports): a download that would go below it waits and is tried again. Default 16 MiB.
        package var stagingReserveBytes: Int64
        /// Backoff between download attempts: first delay, doubling up to `retryMaximum`.
        package var retryInitial: Duration
        /// The longest delay between two download attempts.
        package var retryMaximum: Duration
        /// The install command: argv, `{file}` replaced by the verified image's path and
        /// `{version}` by its version; run without a shell.
        package var install: [String]
        /// The installer is killed (and the update failed) after this long.
        package var installTimeout: Duration
        /// Whether an installed image runs only after a reboot (A/B). Default true.
        package var rebootRequired: Bool
        /// An installer exit code that also means "installed, reboot needed".
        package var rebootExitCode: Int?
        /// The reboot command (argv), run after a successful install when a reboot is
        /// required; nil waits for something else to reboot the device.
        package var reboot: [String]?
        /// The commit command (argv, e.g. `rauc status mark-good`), run once the new version
        /// has synced with the server; nil: nothing to commit.
        package var commit: [String]?
        /// Whether the daemon runs the commit command when it starts and no update awaits its
        /// confirmation: the running version is then the good one. Boot loaders that count
        /// every boot (RAUC's U-Boot and GRUB integrations) need the running slot marked good
        /// after each boot, or its attempts run out and a slot that failed comes first again.
        /// Default false.
        package var commitEveryStart = false
        /// Commands other than the installer are killed after this long.
        package var commandTimeout: Duration
        /// Where status events are POSTed (through the firmware report queue); nil: none.
        package var statusURL: AbsoluteURL?
        /// Runs once the new version is booted, before the commit; nil: none (the commit
        /// waits for a sync only).
        package var healthCheck: HealthCheck?
        /// The rollback command (argv, e.g. `["rauc", "status", "mark-bad", "booted"]`), run at
        /// most once when the new version fails its health check or its confirmation deadline;
        /// the reboot command runs after it. nil: such an update fails uncommitted.
        package var rollback: [String]?
        /// The new version must pass its health check and sync with the server within this
        /// much boot time (wall-clock jumps do not move it), or it is rolled back; nil: no
        /// deadline.
        package var confirmTimeout: Duration?
        /// Interface types (`cellular`, `wifi`, `ethernet`, `other`, as reachability reports
        /// them) image downloads avoid: while the route to the image's server runs over one,
        /// the download waits (a download under way pauses and resumes later). Polls, reports
        /// and telemetry go on. Default none.
        package var avoidInterfaces: [String] = []
        /// Local-time ranges (the board's time zone) when installs and reboots may start;
        /// downloads go ahead outside them. Empty: any time.
        package var installWindow: [InstallWindow] = []
        /// While this file exists and another process holds a lock on it (flock), no install or
        /// reboot starts (the application's critical work). It fails closed: a file that exists
        /// but that the agent cannot open (no `CAP_DAC_OVERRIDE` for an application's 0600 file),
        /// lock-test or that is not a regular file holds them too (`inhibitFileProblem`). nil: none.
        package var inhibitFile: String?

        /// Why this process cannot tell whether `inhibitFile` is locked (`… cannot be opened:
        /// Permission denied`), or nil: `fire-agent config check` says it, since the agent then
        /// waits with every install and reboot. A missing file is no problem (it holds nothing).
        /// The answer is for the user and capabilities this runs with: run the check as the
        /// agent runs.
        package var inhibitFileProblem: String? {
            guard let inhibitFile, case .unusable(let why) = InhibitLock.state(inhibitFile) else { return nil }
            return "\(inhibitFile) \(why) (uid \(geteuid())): installs and reboots will wait as if it were locked; "
                + "the agent must be able to open it read-only (a regular file, not a symbolic link; e.g. mode 0644 or the agent's group)"
        }
    }

    /// `firmware.healthCheck`: is the new version healthy (the application runs, its service
    /// answers)? Exit 0 within `timeout` passes.
    package struct HealthCheck: Sendable, Equatable {
        /// The command (argv, no shell); `{version}` is replaced by the new version.
        package var command: [String]
        /// Each attempt is killed after this long (a failed attempt). Default 60 s.
        package var timeout: Duration
        /// Attempts before the new version is rolled back. Default 3.
        package var attempts: Int
        /// The pause between two attempts. Default 30 s.
        package var interval: Duration
    }

    /// Who this device is.
    package var device: Device
    /// The fleet backend.
    package var server: Server
    /// Collection and upload.
    package var telemetry: Telemetry
    /// The offline queue.
    package var queue: Queue
    /// Log output.
    package var logging: Logging
    /// Service behaviour.
    package var daemon: Daemon
    /// The wall clock's trust.
    package var clock: Clock
    /// Firmware updates; nil when not configured.
    package var firmware: Firmware?
    /// The proxy.
    package var network: Network
    /// The file this was read from.
    package var file: String

    /// The largest config file read (a config is a few KiB; this bounds the memory a wrong
    /// path, say a log file, can take).
    package static let maximumFileBytes = 1 << 20

    /// Reads and checks a config file.
    /// - Parameter path: the file, at most `maximumFileBytes`.
    /// - Throws: `ConfigError` listing every problem (key path and reason).
    package static func load(path: String) throws(ConfigError) -> AgentConfig {
        guard let data = SystemFiles().readBytes(path, limit: maximumFileBytes, whole: true) else {
            let reason = SystemFiles().whyUnreadable(path, limit: maximumFileBytes, what: "a config file")
            throw ConfigError(file: path, problems: [ConfigProblem(path: "", reason: reason)])
        }
        let config = try parse(data, file: path)
        // A config that holds a credential is a secret itself.
        var secretKey: String? =
            switch config.telemetry.api {
            case .v1(_, _, _, let password?) where !password.isEmpty: "telemetry.influx.password"
            case .v2(_, _, let token) where !token.isEmpty: "telemetry.influx.token"
            default: nil
            }
        // A proxy's credentials written in `network.proxy` (not the environment's).
        let proxies = [config.network.proxy.http, config.network.proxy.https]
        var holds = "is in this file, and "
        if secretKey == nil, config.network.proxyFromConfig,
            proxies.contains(where: { $0?.credentials.map { !$0.user.isEmpty || !$0.password.isEmpty } ?? false })
        {
            secretKey = "network.proxy"
            holds = "holds the proxy's user and password in this file, and "
        }
        if let secretKey, let problem = FileTrust.secretProblem(path) {
            throw ConfigError(file: path, problems: [ConfigProblem(path: secretKey, reason: holds + problem)])
        }
        return config
    }

    /// Reads and checks a config document.
    /// - Parameters:
    ///   - data: JSON5 text (UTF-8).
    ///   - file: its name, for messages and relative paths.
    ///   - machineIDPath: where the default device id comes from.
    /// - Throws: `ConfigError` listing every problem.
    ///   - environment: reads an environment variable (the proxy variables when `network.proxy`
    ///     is absent); default the process's.
    package static func parse(
        _ data: [UInt8], file: String, machineIDPath: String = "/etc/machine-id",
        environment: (String) -> String? = ProxySettings.processEnvironment
    ) throws(ConfigError) -> AgentConfig {
        let root = try JSONValue.parse(data, file: file)
        let problems = ProblemList()
        let reader = ConfigReader.document(root, problems: problems)
        let config = read(reader, file: file, machineIDPath: machineIDPath, environment: environment, problems: problems)
        reader.finish()
        guard problems.problems.isEmpty, let config else {
            throw ConfigError(file: file, problems: problems.problems)
        }
        return config
    }

    private static func read(
        _ root: ConfigReader, file: String, machineIDPath: String, environment: (String) -> String?, problems: ProblemList
    ) -> AgentConfig? {
        // device
        let deviceReader = root.section("device")
        var deviceID = deviceReader.string("id")
        if deviceID == nil && !deviceReader.has("id") {
            let machineID = SystemFiles().read(machineIDPath, limit: 4096).map { $0.trimmed() }
            if let machineID, !machineID.isEmpty {
                deviceID = machineID
            } else {
                deviceReader.problem("id", "is not set and \(machineIDPath) is missing or empty")
            }
        }
        let labels = deviceReader.stringMap("labels")
        for (name, value) in labels {
            if let reason = LineProtocol.tagProblem(key: name, value: value) { problems.add("device.labels.\(name)", reason) }
        }
        deviceReader.finish()

        // server
        let serverReader = root.section("server")
        var url: AbsoluteURL?
        if let text = serverReader.requiredString("url") {
            url = httpURL(text)
            if url == nil { serverReader.problem("url", "\"\(text)\" is not an http:// or https:// URL with a host") }
        }
        let caFile = serverReader.string("caFile").map { resolve($0, relativeTo: file) }
        let pins = serverReader.stringArray("pins")
        for (index, pin) in pins.enumerated() where !isPin(pin) {
            problems.add("server.pins[\(index)]", "\"\(pin)\" is not sha256//BASE64 (44 characters of base64 for 32 bytes)")
        }
        let certificate = serverReader.string("clientCertificate").map { resolve($0, relativeTo: file) }
        let key = serverReader.string("clientKey").map { resolve($0, relativeTo: file) }
        if certificate != nil && key == nil { serverReader.problem("clientKey", "is required with clientCertificate") }
        if key != nil && certificate == nil { serverReader.problem("clientCertificate", "is required with clientKey") }
        if let caFile { checkReadable(caFile, path: "server.caFile", problems: problems) }
        if let certificate { checkReadable(certificate, path: "server.clientCertificate", problems: problems) }
        if let key { checkPrivateKey(key, path: "server.clientKey", problems: problems) }
        if url?.scheme.lowercased() == "http" && (!pins.isEmpty || certificate != nil || caFile != nil) {
            serverReader.problem("url", "is http://, but TLS settings (caFile, pins, clientCertificate) are given: use https://")
        }
        let connectTimeout = serverReader.duration("connectTimeout", default: .seconds(15), minimum: .milliseconds(100))
        let idleTimeout = serverReader.duration("idleTimeout", default: .seconds(30), minimum: .milliseconds(100))
        let requestTimeout = serverReader.duration("requestTimeout", default: .seconds(120), minimum: .seconds(1))
        serverReader.finish()

        // telemetry
        let telemetryReader = root.section("telemetry")
        let interval = telemetryReader.duration("interval", default: .seconds(60), minimum: .seconds(1))
        let syncInterval = telemetryReader.duration("syncInterval", default: .seconds(60), minimum: .seconds(1))
        let jitter = telemetryReader.fraction("jitter", default: 0.1, in: 0...0.5)
        let collectorsReader = telemetryReader.section("collectors")
        var collectors = Collectors()
        collectors.cpu = collectorsReader.bool("cpu", default: true)
        collectors.memory = collectorsReader.bool("memory", default: true)
        collectors.load = collectorsReader.bool("load", default: true)
        collectors.uptime = collectorsReader.bool("uptime", default: true)
        collectors.disk = collectorsReader.bool("disk", default: true)
        collectors.network = collectorsReader.bool("network", default: true)
        collectors.thermal = collectorsReader.bool("thermal", default: true)
        collectors.pressure = collectorsReader.bool("pressure", default: true)
        collectors.agent = collectorsReader.bool("agent", default: true)
        collectorsReader.finish()
        let spool = telemetryReader.string("spoolDirectory").map { resolve($0, relativeTo: file) }
        let spoolMaxFileBytes = Int(telemetryReader.byteCount("spoolMaxFileBytes", default: 16 << 20, minimum: 64 << 10, maximum: 1 << 30))
        let spoolRejectedMaxBytes = Int(
            telemetryReader.byteCount("spoolRejectedMaxBytes", default: 4 << 20, minimum: 64 << 10, maximum: 1 << 30))
        let spoolDeviceTagKeptAs = telemetryReader.string("spoolDeviceTagKeptAs")
        if let key = spoolDeviceTagKeptAs, !LineProtocol.isPlainTagKey(key) || key == "device" {
            telemetryReader.problem(
                "spoolDeviceTagKeptAs", "\(key) is not a tag key other than device (letters, digits, '_', '-', '.'; not starting with '_')")
        }
        let batchReader = telemetryReader.section("batch")
        let maxPoints = batchReader.integer("maxPoints", default: 5000, in: 1...1_000_000)
        let maxBytes = Int(batchReader.byteCount("maxBytes", default: 1 << 20, minimum: 1024, maximum: 64 << 20))
        batchReader.finish()
        let influxReader = telemetryReader.section("influx")
        let version = influxReader.integer("version", default: 1, in: 1...2)
        let precision =
            Precision(rawValue: influxReader.choice("precision", default: "ms", from: Precision.allCases.map { $0.rawValue })) ?? .ms
        var api: InfluxAPI?
        if version == 1 {
            let database = influxReader.requiredString("database")
            let retention = influxReader.string("retentionPolicy")
            let user = influxReader.string("username")
            let password = influxReader.string("password")
            if (user == nil) != (password == nil) {
                influxReader.problem(user == nil ? "username" : "password", "is required with the other credential")
            }
            for unused in ["org", "bucket", "token"] where influxReader.has(unused) {
                _ = influxReader.string(unused)
                influxReader.problem(unused, "is for version 2; with version 1 use database (and username/password)")
            }
            if let database { api = .v1(database: database, retentionPolicy: retention, username: user, password: password) }
        } else {
            let org = influxReader.requiredString("org")
            let bucket = influxReader.requiredString("bucket")
            let token = influxReader.requiredString("token")
            for unused in ["database", "retentionPolicy", "username", "password"] where influxReader.has(unused) {
                _ = influxReader.string(unused)
                influxReader.problem(unused, "is for version 1; with version 2 use org, bucket and token")
            }
            if let org, let bucket, let token { api = .v2(organization: org, bucket: bucket, token: token) }
        }
        influxReader.finish()
        if !root.has("telemetry") || !telemetryReader.has("influx") {
            // requiredString above already reported the missing database/org.
        }
        telemetryReader.finish()

        // queue
        let queueReader = root.section("queue")
        let queueDirectory = resolve(queueReader.string("directory") ?? "/var/lib/fire-agent/queue", relativeTo: file)
        let maxRecords = queueReader.integer("maxRecords", default: 100_000, in: 10...10_000_000)
        let queueBytes = queueReader.byteCount("maxBytes", default: 64 << 20, minimum: 1 << 20)
        let deadLetters = resolve(queueReader.string("deadLetterDirectory") ?? queueDirectory + "/../dead-letters", relativeTo: file)
        let maxAge = queueReader.duration("maxRecordAge", default: .seconds(7 * 86400), minimum: .seconds(60))
        let overflow =
            QueueOverflowPolicy(
                rawValue: queueReader.choice("overflow", default: "rejectNew", from: QueueOverflowPolicy.allCases.map { $0.rawValue }))
            ?? .rejectNew
        let inFlight = queueReader.integer("inFlight", default: 4, in: 1...16)
        let retryReader = queueReader.section("retry")
        let retryInitial = retryReader.duration("initial", default: .seconds(1), minimum: .milliseconds(100), maximum: .seconds(3600))
        let retryMaximum = retryReader.duration("maximum", default: .seconds(300), minimum: .seconds(1), maximum: .seconds(86400))
        retryReader.finish()
        if retryMaximum < retryInitial {
            problems.add("queue.retry.maximum", "\(ConfigReader.describe(retryMaximum)) is shorter than queue.retry.initial")
        }
        queueReader.finish()
        if queueBytes < Int64(maxBytes) {
            problems.add("queue.maxBytes", "\(ConfigReader.describeBytes(queueBytes)) is smaller than one batch (telemetry.batch.maxBytes)")
        }

        // logging
        let loggingReader = root.section("logging")
        let level =
            LogLevel(rawValue: loggingReader.choice("level", default: "info", from: LogLevel.allCases.map { $0.rawValue })) ?? .info
        let format = loggingReader.choice("format", default: "text", from: ["text", "json"])
        loggingReader.finish()

        // daemon
        let daemonReader = root.section("daemon")
        let statusFile = resolve(daemonReader.string("statusFile") ?? "/run/fire-agent/status.json", relativeTo: file)
        let stopTimeout = daemonReader.duration("stopTimeout", default: .seconds(10), minimum: .seconds(1), maximum: .seconds(600))
        daemonReader.finish()

        // clock
        let clockReader = root.section("clock")
        let requireSync = clockReader.bool("requireSync", default: true)
        clockReader.finish()

        let firmware =
            root.has("firmware")
            ? readFirmware(root.section("firmware"), file: file, queueDirectory: queueDirectory, problems: problems) : nil

        let network = readNetwork(root.section("network"), file: file, environment: environment, problems: problems)

        guard let deviceID, let url, let api, let network else { return nil }
        return AgentConfig(
            device: Device(id: deviceID, labels: labels),
            server: Server(
                url: url, caFile: caFile, pins: pins, clientCertificate: certificate, clientKey: key, connectTimeout: connectTimeout,
                idleTimeout: idleTimeout, requestTimeout: requestTimeout),
            telemetry: Telemetry(
                interval: interval, syncInterval: syncInterval, jitter: jitter, collectors: collectors, spoolDirectory: spool,
                spoolMaxFileBytes: spoolMaxFileBytes, spoolRejectedMaxBytes: spoolRejectedMaxBytes,
                spoolDeviceTagKeptAs: spoolDeviceTagKeptAs,
                batchMaxPoints: maxPoints, batchMaxBytes: maxBytes, api: api, precision: precision),
            queue: Queue(
                directory: queueDirectory, maxRecords: maxRecords, maxBytes: queueBytes,
                deadLetterDirectory: standardized(deadLetters), maxRecordAge: maxAge,
                overflow: overflow, retryInitial: retryInitial, retryMaximum: retryMaximum, inFlight: inFlight),
            logging: Logging(level: level, format: format), daemon: Daemon(statusFile: statusFile, stopTimeout: stopTimeout),
            clock: Clock(requireSync: requireSync), firmware: firmware, network: network, file: file)
    }

    /// `network`: `proxy` (a proxy URL, "" for none; absent: the environment's), `noProxy` (hosts
    /// that go direct), `proxyCAFile` (the CA of an https:// proxy's own certificate).
    private static func readNetwork(
        _ reader: ConfigReader, file: String, environment: (String) -> String?, problems: ProblemList
    ) -> Network? {
        defer { reader.finish() }
        let proxyURL = reader.string("proxy", nonEmpty: false)
        // null is the same as absent (what `config show` prints for it).
        let setsNoProxy = reader.hasValue("noProxy")
        let noProxyEntries = reader.stringArray("noProxy")
        let noProxyList = setsNoProxy ? noProxyEntries : nil
        let caFile = reader.string("proxyCAFile").map { resolve($0, relativeTo: file) }
        var settings = ProxySettings.direct
        if let proxyURL {
            if !proxyURL.isEmpty {
                do throws(ProxyURLError) {
                    settings = ProxySettings(all: try Proxy(parsing: proxyURL))
                } catch {
                    reader.problem("proxy", error.reason)
                    return nil
                }
            }
        } else {
            do throws(ProxyURLError) {
                settings = try ProxySettings.parseEnvironment(environment)
            } catch {
                reader.problem("proxy", "is not set, and the environment's proxy is malformed: \(error.reason)")
                return nil
            }
        }
        // The environment's no_proxy, when it applies: its unusable entries are said.
        var ignored: [String] = []
        if proxyURL == nil && noProxyList == nil {
            let variable = environment("no_proxy").map { $0.isEmpty ? "NO_PROXY" : "no_proxy" } ?? "NO_PROXY"
            ignored = settings.noProxy.invalidEntries.map { entry in
                "\(variable): \(quoted(entry)) is not a host name, an IP address, a CIDR range (10.0.0.0/8) or \"*\": ignored"
            }
        }
        if let noProxyList {
            let list = NoProxyList(noProxyList)
            for (index, entry) in noProxyList.enumerated() where list.invalidEntries.contains(entry) {
                problems.add(
                    "network.noProxy[\(index)]", "\"\(entry)\" is not a host name, an IP address, a CIDR range (10.0.0.0/8) or \"*\"")
            }
            settings.noProxy = list
        }
        if let caFile {
            checkReadable(caFile, path: "network.proxyCAFile", problems: problems)
            let proxies = [settings.http, settings.https].compactMap { $0 }
            if !proxies.contains(where: { $0.scheme == .https }) {
                reader.problem("proxyCAFile", "is for an https:// proxy, and no https:// proxy is used")
            }
            settings.http?.tls.caCertificateFiles = [caFile]
            settings.https?.tls.caCertificateFiles = [caFile]
        }
        return Network(
            proxy: settings, proxyFromConfig: proxyURL != nil, proxyURL: proxyURL, noProxy: noProxyList, proxyCAFile: caFile,
            ignoredNoProxyEntries: ignored)
    }

    private static func readFirmware(_ reader: ConfigReader, file: String, queueDirectory: String, problems: ProblemList) -> Firmware? {
        defer { reader.finish() }
        func httpURL(_ key: String, _ text: String?) -> AbsoluteURL? {
            guard let text else { return nil }
            guard let parsed = Self.httpURL(text) else {
                reader.problem(key, "\"\(text)\" is not an http:// or https:// URL with a host")
                return nil
            }
            return parsed
        }
        let manifestURL = httpURL("manifestURL", reader.requiredString("manifestURL"))
        let signatureURL = httpURL("signatureURL", reader.string("signatureURL"))
        var keys: [ManifestKey] = []
        let keyPaths = reader.stringArray("keys")
        if keyPaths.isEmpty && !reader.has("keys") { reader.problem("keys", "is required: the vendor's public keys (PEM or DER)") }
        for (index, path) in keyPaths.enumerated() {
            do throws(ManifestKeyError) {
                let keyFile = resolve(path, relativeTo: file)
                if let problem = FileTrust.trustedFileProblem(keyFile) {
                    problems.add("\(reader.keyPath("keys"))[\(index)]", problem)
                    continue
                }
                keys.append(try ManifestKey(contentsOf: keyFile))
            } catch {
                problems.add("\(reader.keyPath("keys"))[\(index)]", error.message + " (\(error.path))")
            }
        }
        if keyPaths.isEmpty && reader.has("keys") { reader.problem("keys", "must name at least one key file") }
        let deviceType = reader.requiredString("deviceType")
        let versionFile = reader.string("versionFile").map { resolve($0, relativeTo: file) }
        let versionCommand = reader.has("versionCommand") ? reader.stringArray("versionCommand") : nil
        if versionFile == nil && versionCommand == nil {
            reader.problem("versionFile", "is required (or versionCommand): where the booted version is read")
        } else if versionFile != nil && versionCommand != nil {
            reader.problem("versionCommand", "and versionFile are both set: keep one")
        }
        if versionCommand?.isEmpty == true { reader.problem("versionCommand", "must name a program") }
        let bootIDFile = resolve(reader.string("bootIDFile") ?? "/proc/sys/kernel/random/boot_id", relativeTo: file)
        let directory = resolve(reader.string("directory") ?? queueDirectory + "/../firmware", relativeTo: file)
        let pollInterval = reader.duration("pollInterval", default: .seconds(3600), minimum: .seconds(1))
        let jitter = reader.fraction("jitter", default: 0.2, in: 0...0.5)
        let allowDowngrade = reader.bool("allowDowngrade", default: false)
        // Rates are Int in the engine, 32 bits on armv7: bounded here, named, never converted
        // into a trap.
        let maximumRate = Firmware.maximumBytesPerSecond
        let rate =
            reader.has("maxBytesPerSecond")
            ? Int(reader.byteCount("maxBytesPerSecond", default: 0, minimum: 1024, maximum: maximumRate)) : nil
        let lowSpeed = Int(reader.byteCount("lowSpeedBytesPerSecond", default: 100, minimum: 1, maximum: maximumRate))
        let lowSpeedTime = reader.duration("lowSpeedTime", default: .seconds(60), minimum: .seconds(1))
        let manifestTimeout = reader.duration("manifestTimeout", default: .seconds(20), minimum: .seconds(1), maximum: .seconds(600))
        if let rate, lowSpeed >= rate {
            reader.problem("lowSpeedBytesPerSecond", "must be below maxBytesPerSecond, or every download is cut as too slow")
        }
        let attempts = reader.integer("downloadAttempts", default: 10, in: 1...1000)
        let reserve = reader.byteCount("stagingReserveBytes", default: 16 << 20, minimum: 0, maximum: 1 << 30)
        let retryReader = reader.section("retry")
        let retryInitial = retryReader.duration("initial", default: .seconds(10), minimum: .milliseconds(100), maximum: .seconds(3600))
        let retryMaximum = retryReader.duration("maximum", default: .seconds(600), minimum: .seconds(1), maximum: .seconds(86400))
        retryReader.finish()
        if retryMaximum < retryInitial { reader.problem("retry.maximum", "is shorter than firmware.retry.initial") }
        let install = reader.stringArray("install")
        if !reader.has("install") {
            reader.problem("install", "is required: the install command as an argv list, e.g. [\"rauc\", \"install\", \"{file}\"]")
        } else if install.isEmpty {
            reader.problem("install", "must name a program")
        } else if !install.contains(where: { $0.firstRange(ofASCII: "{file}") != nil }) {
            reader.problem("install", "must pass the image: put \"{file}\" in one of its arguments")
        }
        let installTimeout = reader.duration("installTimeout", default: .seconds(1800), minimum: .seconds(1))
        let rebootRequired = reader.bool("rebootRequired", default: true)
        let rebootExitCode = reader.has("rebootExitCode") ? reader.integer("rebootExitCode", default: 0, in: 1...255) : nil
        let reboot = reader.has("reboot") ? reader.stringArray("reboot") : nil
        let commit = reader.has("commit") ? reader.stringArray("commit") : nil
        let commitEveryStart = reader.bool("commitEveryStart", default: false)
        if commitEveryStart && commit == nil {
            reader.problem("commitEveryStart", "needs a commit command (firmware.commit) to run")
        }
        for (key, argv) in [("reboot", reboot), ("commit", commit)] where argv?.isEmpty == true {
            reader.problem(key, "must name a program (or leave the key out)")
        }
        let commandTimeout = reader.duration("commandTimeout", default: .seconds(120), minimum: .seconds(1))
        let statusURL = httpURL("statusURL", reader.string("statusURL"))
        var healthCheck: HealthCheck?
        if reader.has("healthCheck") {
            let health = reader.section("healthCheck")
            let command = health.stringArray("command")
            if !health.has("command") {
                health.problem("command", "is required: the check as an argv list, e.g. [\"systemctl\", \"is-active\", \"app\"]")
            } else if command.isEmpty {
                health.problem("command", "must name a program")
            }
            let timeout = health.duration("timeout", default: .seconds(60), minimum: .milliseconds(100))
            let attempts = health.integer("attempts", default: 3, in: 1...100)
            let interval = health.duration("interval", default: .seconds(30), minimum: .milliseconds(100))
            health.finish()
            if !command.isEmpty { healthCheck = HealthCheck(command: command, timeout: timeout, attempts: attempts, interval: interval) }
        }
        let rollback = reader.has("rollback") ? reader.stringArray("rollback") : nil
        if rollback?.isEmpty == true { reader.problem("rollback", "must name a program (or leave the key out)") }
        let confirmTimeout =
            reader.has("confirmTimeout") ? reader.duration("confirmTimeout", default: .seconds(3600), minimum: .seconds(1)) : nil
        if let confirmTimeout, let healthCheck,
            confirmTimeout < (healthCheck.timeout + healthCheck.interval) * (healthCheck.attempts - 1) + healthCheck.timeout
        {
            reader.problem(
                "confirmTimeout",
                "is shorter than the health check's attempts can take (\(healthCheck.attempts) × timeout \(ConfigReader.describe(healthCheck.timeout)) and the intervals between them)"
            )
        }
        // A program given with a relative path is relative to the config file, as every path
        // in it is; a bare name is looked up in PATH.
        func program(_ argv: [String]) -> [String] {
            guard let first = argv.first, first.contains("/"), !first.hasPrefix("/") else { return argv }
            return [resolve(first, relativeTo: file)] + argv.dropFirst()
        }
        let avoidInterfaces = reader.stringArray("avoidInterfaces")
        let types = NetworkInterfaceType.allCases.map { $0.rawValue }
        for (index, name) in avoidInterfaces.enumerated() where !types.contains(name) {
            problems.add(
                "\(reader.keyPath("avoidInterfaces"))[\(index)]", "\"\(name)\" is not an interface type: \(types.joined(separator: ", "))")
        }
        var installWindow: [InstallWindow] = []
        for (index, text) in reader.stringArray("installWindow").enumerated() {
            do throws(InstallWindowError) {
                installWindow.append(try InstallWindow(parsing: text))
            } catch {
                problems.add("\(reader.keyPath("installWindow"))[\(index)]", error.description)
            }
        }
        let inhibitFile = reader.string("inhibitFile").map { resolve($0, relativeTo: file) }
        guard let manifestURL, let deviceType, !keys.isEmpty, !install.isEmpty else { return nil }
        var firmware = Firmware(
            manifestURL: manifestURL,
            signatureURL: signatureURL ?? AbsoluteURL(manifestURL.absoluteString + ".sig") ?? manifestURL,
            keys: keys, deviceType: deviceType, versionFile: versionFile, versionCommand: versionCommand.map(program),
            bootIDFile: bootIDFile,
            directory: standardized(directory), pollInterval: pollInterval, jitter: jitter,
            allowDowngrade: allowDowngrade, maxBytesPerSecond: rate, lowSpeedBytesPerSecond: lowSpeed, lowSpeedTime: lowSpeedTime,
            manifestTimeout: manifestTimeout,
            downloadAttempts: attempts, stagingReserveBytes: reserve, retryInitial: retryInitial, retryMaximum: retryMaximum,
            install: program(install),
            installTimeout: installTimeout, rebootRequired: rebootRequired, rebootExitCode: rebootExitCode, reboot: reboot.map(program),
            commit: commit.map(program), commandTimeout: commandTimeout, statusURL: statusURL,
            healthCheck: healthCheck.map {
                HealthCheck(command: program($0.command), timeout: $0.timeout, attempts: $0.attempts, interval: $0.interval)
            },
            rollback: rollback.map(program), confirmTimeout: confirmTimeout)
        firmware.avoidInterfaces = avoidInterfaces
        firmware.installWindow = installWindow
        firmware.inhibitFile = inhibitFile
        firmware.commitEveryStart = commitEveryStart
        return firmware
    }

    /// A path relative to the config file's directory.
    static func resolve(_ path: String, relativeTo file: String) -> String {
        guard !path.hasPrefix("/") else { return path }
        let directory = file.lastIndex(of: "/").map { String(file[..<$0]) } ?? "."
        return directory + "/" + path
    }

    /// `path` made absolute (against the working directory) with its `.` and `..` segments
    /// taken out, as written: links are not followed (`/a/link/..` is `/a`).
    static func standardized(_ path: String) -> String {
        var absolute = path
        if !path.hasPrefix("/") {
            var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
            let found = getcwd(&buffer, buffer.count) != nil
            let directory = found ? String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self) : ""
            absolute = directory + "/" + path
        }
        let result = AbsoluteURL.removingDotSegments(absolute)
        return result.isEmpty ? "/" : result
    }

    /// An `http://` or `https://` URL with a host, or nil.
    static func httpURL(_ text: String) -> AbsoluteURL? {
        guard let url = AbsoluteURL(text), ["http", "https"].contains(url.scheme.lowercased()), let host = url.host, !host.isEmpty
        else { return nil }
        return url
    }

    static func isPin(_ pin: String) -> Bool {
        guard pin.hasPrefix("sha256//") else { return false }
        let encoded = pin.dropFirst(8)
        return encoded.utf8.count == 44 && Base64.decode(encoded)?.count == 32
    }

    private static func checkReadable(_ file: String, path: String, problems: ProblemList) {
        if access(file, R_OK) != 0 { problems.add(path, "\(file) cannot be read: \(errnoMessage(errno))") }
    }

    /// A private key must be the agent's (or root's) alone, as ssh requires.
    private static func checkPrivateKey(_ file: String, path: String, problems: ProblemList) {
        if let problem = FileTrust.secretProblem(file) {
            problems.add(path, problem)
        } else if access(file, R_OK) != 0 {
            problems.add(path, "\(file) cannot be read: \(errnoMessage(errno))")
        }
    }
}
