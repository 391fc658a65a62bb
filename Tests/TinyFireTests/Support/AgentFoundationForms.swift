import Foundation
import Synchronization
import Testing
import TinyFire

@testable import FireAgent
@testable import TinyFireCore

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

/// What the queue does with a record, in a form tests compare: a split as its halves' lines.
enum JudgedBatch: Equatable {
    case delivered
    case retry
    case retryAfter(Duration)
    case discard
    case deadLetter(reason: String)
    case split([[String]])
}

extension InfluxWrite {
    /// `judge` on a batch of `lines` queued gzip'd and inline, as the agent queues it (or with
    /// `requestBody` as its inline body), at `now`.
    static func judge(
        _ status: Int, retryAfter: String? = nil, message: String = "", lines: [String], requestBody: [UInt8]? = nil,
        age: Duration? = .zero, maxAge: Duration = .seconds(3600), batchBytes: Int = 1 << 20, now: Date = Date()
    ) throws -> JudgedBatch {
        let body = try requestBody ?? Gzip.compress(Array(lines.map { $0 + "\n" }.joined().utf8))
        let record = OfflineQueueJournal.Payload(
            method: "POST", url: "http://influx.test/write?db=fleet", idempotencyKey: "k",
            headers: [(name: "Content-Encoding", value: "gzip")], body: .inline(body))
        let disposition = judge(
            status: status, retryAfter: retryAfter, message: Array(message.utf8), record: record, maxAge: maxAge, age: age,
            batchBytes: batchBytes, now: WallTime(now))
        switch disposition {
        case .delivered: return .delivered
        case .retry: return .retry
        case .retryAfter(let delay): return .retryAfter(delay)
        case .discard: return .discard
        case .deadLetter(let reason): return .deadLetter(reason: reason)
        case .replace(let halves):
            return .split(
                try halves.map { half in
                    #expect(half.method == "POST" && half.url == record.url && half.headers["Content-Encoding"] == "gzip")
                    guard case .memory(let held) = half.body.first, let bytes = held as? ByteArrayBody else { return [] }
                    let plain = try Gzip.decompress(bytes.bytes, limit: 1 << 24)
                    return String(decoding: plain, as: UTF8.self).split(separator: "\n").map(String.init)
                })
        }
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
