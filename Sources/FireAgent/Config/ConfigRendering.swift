import TinyFireCore

extension AgentConfig {
    /// The effective config (defaults filled in) as JSON, which is valid JSON5 and can be
    /// used as a config file. Passwords and tokens are shown as `"********"` unless
    /// `maskingSecrets` is false.
    package func rendered(maskingSecrets: Bool = true) -> String {
        func secret(_ value: String?) -> RenderValue { value.map { .string(maskingSecrets ? "********" : $0) } ?? .null }
        func text(_ value: String?) -> RenderValue { value.map(RenderValue.string) ?? .null }
        func duration(_ value: Duration) -> RenderValue { .string(ConfigReader.describe(value)) }
        var influx: [(String, RenderValue)] = [("precision", .string(telemetry.precision.rawValue))]
        switch telemetry.api {
        case .v1(let database, let retentionPolicy, let username, let password):
            influx =
                [
                    ("version", .number(1)), ("database", .string(database)), ("retentionPolicy", text(retentionPolicy)),
                    ("username", text(username)), ("password", secret(password)),
                ] + influx
        case .v2(let organization, let bucket, let token):
            influx =
                [("version", .number(2)), ("org", .string(organization)), ("bucket", .string(bucket)), ("token", secret(token))] + influx
        }
        let collectors = telemetry.collectors
        var sections: [(String, RenderValue)] = [
            (
                "device",
                .object([
                    ("id", .string(device.id)),
                    ("labels", .object(device.labels.keys.sorted().map { ($0, .string(device.labels[$0] ?? "")) })),
                ])
            ),
            (
                "server",
                .object([
                    ("url", .string(server.url.absoluteString)),
                    ("caFile", text(server.caFile)),
                    ("pins", .array(server.pins.map(RenderValue.string))),
                    ("clientCertificate", text(server.clientCertificate)),
                    ("clientKey", text(server.clientKey)),
                    ("connectTimeout", duration(server.connectTimeout)),
                    ("idleTimeout", duration(server.idleTimeout)),
                    ("requestTimeout", duration(server.requestTimeout)),
                ])
            ),
            (
                "telemetry",
                .object([
                    ("interval", duration(telemetry.interval)),
                    ("syncInterval", duration(telemetry.syncInterval)),
                    ("jitter", .number(telemetry.jitter)),
                    (
                        "collectors",
                        .object([
                            ("cpu", .bool(collectors.cpu)), ("memory", .bool(collectors.memory)), ("load", .bool(collectors.load)),
                            ("uptime", .bool(collectors.uptime)), ("disk", .bool(collectors.disk)), ("network", .bool(collectors.network)),
                            ("thermal", .bool(collectors.thermal)), ("pressure", .bool(collectors.pressure)),
                            ("agent", .bool(collectors.agent)),
                        ])
                    ),
                    ("spoolDirectory", text(telemetry.spoolDirectory)),
                    ("spoolMaxFileBytes", .string(ConfigReader.describeBytes(Int64(telemetry.spoolMaxFileBytes)))),
                    ("spoolRejectedMaxBytes", .string(ConfigReader.describeBytes(Int64(telemetry.spoolRejectedMaxBytes)))),
                    ("spoolDeviceTagKeptAs", text(telemetry.spoolDeviceTagKeptAs)),
                    (
                        "batch",
                        .object([
                            ("maxPoints", .number(Double(telemetry.batchMaxPoints))),
                            ("maxBytes", .string(ConfigReader.describeBytes(Int64(telemetry.batchMaxBytes)))),
                        ])
                    ),
                    ("influx", .object(influx)),
                ])
            ),
            (
                "network",
                .object([
                    // null: taken from the environment (https_proxy, http_proxy, no_proxy).
                    ("proxy", network.proxyURL.map { url in .string(maskingSecrets ? Proxy.masked(url) : url) } ?? .null),
                    ("noProxy", network.noProxy.map { .array($0.map(RenderValue.string)) } ?? .null),
                    ("proxyCAFile", text(network.proxyCAFile)),
                ])
            ),
            (
                "queue",
                .object([
                    ("directory", .string(queue.directory)),
                    ("maxRecords", .number(Double(queue.maxRecords))),
                    ("maxBytes", .string(ConfigReader.describeBytes(queue.maxBytes))),
                    ("deadLetterDirectory", .string(queue.deadLetterDirectory)),
                    ("maxRecordAge", duration(queue.maxRecordAge)),
                    ("overflow", .string(queue.overflow.rawValue)),
                    ("inFlight", .number(Double(queue.inFlight))),
                    ("retry", .object([("initial", duration(queue.retryInitial)), ("maximum", duration(queue.retryMaximum))])),
                ])
            ),
            ("logging", .object([("level", .string(logging.level.rawValue)), ("format", .string(logging.format))])),
            ("daemon", .object([("statusFile", .string(daemon.statusFile)), ("stopTimeout", duration(daemon.stopTimeout))])),
            ("clock", .object([("requireSync", .bool(clock.requireSync))])),
        ]
        if let firmware { sections.append(("firmware", Self.render(firmware))) }
        return RenderValue.object(sections).render(indent: "") + "\n"
    }

    /// The firmware section; keys left unset are left out (null is not a value they take).
    private static func render(_ firmware: Firmware) -> RenderValue {
        func duration(_ value: Duration) -> RenderValue { .string(ConfigReader.describe(value)) }
        func argv(_ list: [String]) -> RenderValue { .array(list.map(RenderValue.string)) }
        var entries: [(String, RenderValue?)] = [
            ("manifestURL", .string(firmware.manifestURL.absoluteString)),
            ("signatureURL", .string(firmware.signatureURL.absoluteString)),
            ("keys", .array(firmware.keys.map { .string($0.path) })),
            ("deviceType", .string(firmware.deviceType)),
            ("versionFile", firmware.versionFile.map(RenderValue.string)),
            ("versionCommand", firmware.versionCommand.map(argv)),
            ("bootIDFile", .string(firmware.bootIDFile)),
            ("directory", .string(firmware.directory)),
            ("pollInterval", duration(firmware.pollInterval)),
            ("jitter", .number(firmware.jitter)),
            ("allowDowngrade", .bool(firmware.allowDowngrade)),
            ("maxBytesPerSecond", firmware.maxBytesPerSecond.map { .string(ConfigReader.describeBytes(Int64($0))) }),
            ("lowSpeedBytesPerSecond", .string(ConfigReader.describeBytes(Int64(firmware.lowSpeedBytesPerSecond)))),
            ("lowSpeedTime", duration(firmware.lowSpeedTime)),
            ("manifestTimeout", duration(firmware.manifestTimeout)),
            ("downloadAttempts", .number(Double(firmware.downloadAttempts))),
            ("stagingReserveBytes", .string(ConfigReader.describeBytes(firmware.stagingReserveBytes))),
            ("retry", .object([("initial", duration(firmware.retryInitial)), ("maximum", duration(firmware.retryMaximum))])),
            ("install", argv(firmware.install)),
            ("installTimeout", duration(firmware.installTimeout)),
            ("rebootRequired", .bool(firmware.rebootRequired)),
            ("rebootExitCode", firmware.rebootExitCode.map { .number(Double($0)) }),
            ("reboot", firmware.reboot.map(argv)),
            ("commit", firmware.commit.map(argv)),
            ("commitEveryStart", .bool(firmware.commitEveryStart)),
            ("commandTimeout", duration(firmware.commandTimeout)),
            ("statusURL", firmware.statusURL.map { .string($0.absoluteString) }),
            (
                "healthCheck",
                firmware.healthCheck.map {
                    .object([
                        ("command", argv($0.command)), ("timeout", duration($0.timeout)), ("attempts", .number(Double($0.attempts))),
                        ("interval", duration($0.interval)),
                    ])
                }
            ),
            ("rollback", firmware.rollback.map(argv)),
            ("confirmTimeout", firmware.confirmTimeout.map(duration)),
            ("avoidInterfaces", firmware.avoidInterfaces.isEmpty ? nil : argv(firmware.avoidInterfaces)),
            ("installWindow", firmware.installWindow.isEmpty ? nil : argv(firmware.installWindow.map { $0.description })),
            ("inhibitFile", firmware.inhibitFile.map(RenderValue.string)),
        ]
        entries.removeAll { $0.1 == nil }
        return .object(entries.compactMap { key, value in value.map { (key, $0) } })
    }
}

/// A JSON value with ordered keys, for `AgentConfig.rendered`.
indirect enum RenderValue {
    case string(String)
    case number(Double)
    case bool(Bool)
    case null
    case array([RenderValue])
    case object([(String, RenderValue)])

    func render(indent: String) -> String {
        let inner = indent + "  "
        switch self {
        case .string(let text): return Self.quote(text)
        case .number(let number): return ConfigReader.format(number)
        case .bool(let flag): return String(flag)
        case .null: return "null"
        case .array(let items):
            guard !items.isEmpty else { return "[]" }
            return "[\n" + items.map { inner + $0.render(indent: inner) }.joined(separator: ",\n") + "\n" + indent + "]"
        case .object(let entries):
            guard !entries.isEmpty else { return "{}" }
            return "{\n" + entries.map { inner + Self.quote($0.0) + ": " + $0.1.render(indent: inner) }.joined(separator: ",\n") + "\n"
                + indent + "}"
        }
    }

    static func quote(_ text: String) -> String { text.jsonQuoted }
}
