import TinyFireCore

/// Says where an update stands, each time the flow reports it: a log line, a status event to the
/// fleet server through the firmware source's report queue (the same Idempotency-Key when it is
/// repeated after a crash), and a `fire_agent_update` point handed to the telemetry queue through
/// `AgentPoints` (never through the spool). Used by the updater's thread only.
///
/// Memory: one record at a time; what waits to be delivered is bounded by the report queue and
/// the telemetry queue.
final class UpdateReporter {
    private let source: any FirmwareSource
    /// Where the `fire_agent_update` points go; nil: none are made.
    private let points: AgentPoints?
    private let deviceID: String
    /// The telemetry's timestamp precision (each point is one unit later than the one before).
    private let precision: AgentConfig.Precision
    private let logger: Logger
    /// The last point's time: each next one is at least one unit of the precision later, so
    /// two steps in the same millisecond are two points, not one.
    private var lastPointNanoseconds: Int64 = 0

    /// A reporter through `source` and `points`.
    init(source: any FirmwareSource, points: AgentPoints?, deviceID: String, precision: AgentConfig.Precision, logger: Logger) {
        self.source = source
        self.points = points
        self.deviceID = deviceID
        self.precision = precision
        self.logger = logger
    }

    /// Reports `update` as it is.
    /// - Parameter downloadedBytes: the image's bytes on disk (its progress).
    func report(_ update: UpdateRecord, downloadedBytes: Int64) {
        let progress = update.size > 0 ? Double(downloadedBytes) / Double(update.size) : 0
        var metadata: Logger.Metadata = ["version": "\(update.version)", "from": "\(update.fromVersion ?? "?")"]
        if let reason = update.reason { metadata["reason"] = "\(reason)" }
        if update.phase == .failed {
            logger.error("firmware update failed", metadata: metadata)
        } else {
            logger.info("firmware update \(update.phase.rawValue)", metadata: metadata)
        }
        let now = WallTime.now()
        source.report(FirmwareReport(update: update, progress: progress, time: now))
        guard let points else { return }
        var fields: [String: Point.Value] = ["state": .string(update.phase.rawValue), "progress": .float(min(progress, 1))]
        if let reason = update.reason { fields["reason"] = .string(String(reason.prefix(1024))) }
        let unit: Int64 = [.s: 1_000_000_000, .ms: 1_000_000, .us: 1000, .ns: 1][precision] ?? 1
        let nanoseconds = max(now.millisecondsSince1970 * 1_000_000, lastPointNanoseconds + unit)
        lastPointNanoseconds = nanoseconds
        points.record(
            Point(
                measurement: "fire_agent_update",
                tags: ["device": deviceID, "version": update.version.isEmpty ? "unknown" : update.version],
                fields: fields, timestamp: nanoseconds))
    }
}
