import TinyFire

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

// The wall clock's Date forms: WallClock and ClockVerdict are FireAgentBase's, on the core's
// WallTime; the agent's Foundation side passes Dates.

extension WallTime {
    /// The moment `date` names, to the nearest millisecond (a `Date` is a binary fraction:
    /// 0.999 s is 998.99… ms, which must not become 998).
    public init(_ date: Date) {
        self.init(millisecondsSince1970: Int64((date.timeIntervalSince1970 * 1000).rounded()))
    }

    /// This moment as a `Date`.
    public var date: Date { Date(timeIntervalSince1970: Double(millisecondsSince1970) / 1000) }
}

extension WallClock {
    /// The verdict at `now`.
    public func verdict(at now: Date) -> ClockVerdict { verdict(now: WallTime(now)) }

    /// Whether points may be stamped at `now`.
    public func mayStamp(at now: Date) -> Bool { mayStamp(now: WallTime(now)) }

    /// A queued record's age (see `age(enqueuedAt:sinceEnqueue:now:)`).
    /// - Parameters:
    ///   - record: the record.
    ///   - now: the wall clock; default now.
    public func age(of record: OfflineQueue.Record, now: Date = Date()) -> Duration? {
        age(enqueuedAt: WallTime(record.enqueuedAt), sinceEnqueue: record.timeSinceEnqueue, now: WallTime(now))
    }
}
