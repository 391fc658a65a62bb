import Foundation
import Synchronization
import TinyFire

@testable import FireAgentBase

// The agent's types in Foundation's terms, for the tests: `Date`s for the core's `WallTime`,
// `Data` for byte arrays. fire-agent itself (both builds) uses none of this.

extension WallTime {
    /// The instant `date` names, to the millisecond.
    init(_ date: Date) {
        self.init(millisecondsSince1970: Int64((date.timeIntervalSince1970 * 1000).rounded()))
    }

    /// The same instant as a `Date`.
    var date: Date { Date(timeIntervalSince1970: Double(millisecondsSince1970) / 1000) }
}

extension WallClock {
    /// `verdict(now:)` at `now`.
    func verdict(at now: Date) -> ClockVerdict { verdict(now: WallTime(now)) }

    /// `mayStamp(now:)` at `now`.
    func mayStamp(at now: Date) -> Bool { mayStamp(now: WallTime(now)) }

    /// The age of a library queue record, as the agent's judge sees it.
    func age(of record: OfflineQueue.Record, now: Date = Date()) -> Duration? {
        age(enqueuedAt: WallTime(record.enqueuedAt), sinceEnqueue: record.timeSinceEnqueue, now: WallTime(now))
    }
}

extension UploadVerdict {
    /// `decide` at `now`.
    static func decide(status: Int, retryAfter: String?, message: String, now: Date = Date(), lines: Int) -> UploadVerdict {
        decide(status: status, retryAfter: retryAfter, message: message, secondsSince1970: now.timeIntervalSince1970, lines: lines)
    }

    /// `parseRetryAfter` at `now`.
    static func parseRetryAfter(_ value: String, now: Date) -> Duration? {
        parseRetryAfter(value, secondsSince1970: now.timeIntervalSince1970)
    }

    /// An IMF-fixdate as a `Date`.
    static func parseHTTPDate(_ text: String) -> Date? {
        httpDateSeconds(text).map { Date(timeIntervalSince1970: TimeInterval($0)) }
    }
}

extension AgentConfig {
    /// Reads and checks a config document held in `Data`.
    static func parse(
        _ data: Data, file: String, machineIDPath: String = "/etc/machine-id",
        environment: (String) -> String? = ProxySettings.processEnvironment
    ) throws(ConfigError) -> AgentConfig {
        try parse([UInt8](data), file: file, machineIDPath: machineIDPath, environment: environment)
    }
}

/// RFC 3339 UTC to the second, as the agent's logs and manifests write times.
func rfc3339Timestamp(_ date: Date) -> String {
    rfc3339(epochSeconds: Int64(date.timeIntervalSince1970.rounded(.down)))
}

/// A value shared across threads under a lock.
final class SendableBox<Value>: @unchecked Sendable {
    private let lock = Mutex(())
    private var stored: Value
    init(_ value: Value) { stored = value }
    var value: Value {
        get { lock.withLock { _ in stored } }
        set { lock.withLock { _ in stored = newValue } }
    }
}
