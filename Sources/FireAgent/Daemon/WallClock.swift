import TinyFireCore

#if canImport(Glibc)
    import CTinyFireSystem
    import Glibc
#elseif canImport(Musl)
    import CTinyFireSystem
    import Musl
#endif

/// Whether the wall clock can be believed, and if not, why.
package enum ClockVerdict: Sendable, Equatable {
    /// At or above the floor, and synchronized (or synchronization is not required).
    case trusted
    /// Before the floor: certainly wrong (a board without a real-time clock boots in 1970).
    case belowFloor(floor: WallTime)
    /// Above the floor, but the kernel reports it unsynchronized and `clock.requireSync` is on.
    case unsynchronized

    /// Whether decisions that need the date may be taken.
    package var isTrusted: Bool { self == .trusted }

    /// Why the clock is not trusted, in words (empty when it is).
    package var reason: String {
        switch self {
        case .trusted: return ""
        case .belowFloor(let floor):
            return
                "the clock is before \(floor), a time it has already passed (build time or last synchronized time)"
        case .unsynchronized:
            return "the kernel reports the clock unsynchronized (no NTP client has set it yet; clock.requireSync false trusts it anyway)"
        }
    }

    /// The verdict on a set of facts: sans-I/O.
    /// - Parameters:
    ///   - now: the wall clock.
    ///   - floor: the time floor.
    ///   - synchronized: whether the kernel (or systemd-timesyncd's flag) says the clock is synchronized.
    ///   - requireSync: `clock.requireSync`.
    package static func judge(now: WallTime, floor: WallTime, synchronized: Bool, requireSync: Bool) -> ClockVerdict {
        if now < floor { return .belowFloor(floor: floor) }
        if requireSync && !synchronized { return .unsynchronized }
        return .trusted
    }
}

/// The agent's view of the wall clock (docs/OPERATIONS.md, "Time"). The wall clock of a board
/// can be anything: 1970 after a boot without a real-time clock, a year ahead from a bad RTC,
/// stepped by NTP at any moment. The agent therefore:
///
/// - measures ages, backoffs and timers on the boot clock (`CLOCK_BOOTTIME`), never on the wall clock;
/// - keeps a *floor*, the later of the build time and the last time the kernel reported the
///   clock synchronized (saved in `<queue.directory>/clock-floor` at most once an hour), and
///   stamps no point while the clock is below it;
/// - takes decisions that would be final and that need the date (a manifest's expiry, a
///   queued batch's age across a reboot) only while the clock is trusted (`ClockVerdict`).
///
/// Memory: a few words; the floor file is one short line.
package final class WallClock: Sendable {
    /// When this binary was built: the first floor.
    package static let buildTime = WallTime(secondsSince1970: Int64(tinyfire_build_time()))
    /// systemd-timesyncd's flag: present while it has synchronized the clock.
    package static let timesyncdFlag = "/run/systemd/timesync/synchronized"
    /// 2026-01-01: no record of this queue format was stamped before it by a right clock.
    static let formatEpoch = WallTime(secondsSince1970: 1_767_225_600)
    /// How often a trusted, synchronized clock is saved as the floor.
    static let saveInterval: Duration = .seconds(3600)

    /// `clock.requireSync`.
    package let requireSync: Bool
    /// The first floor (the build time unless a test says otherwise).
    package let buildFloor: WallTime
    private let floorFile: String?
    private let flagFile: String
    private let saved = Locked<(floor: WallTime?, at: Instant?)>((nil, nil))

    /// A wall clock.
    /// - Parameters:
    ///   - floorFile: where the floor is kept; nil keeps none (the build time alone).
    ///   - requireSync: whether an unsynchronized clock is untrusted.
    ///   - buildFloor: the first floor; default the build time.
    ///   - flagFile: systemd-timesyncd's flag file.
    package init(
        floorFile: String?, requireSync: Bool, buildFloor: WallTime = WallClock.buildTime, flagFile: String = WallClock.timesyncdFlag
    ) {
        self.floorFile = floorFile
        self.requireSync = requireSync
        self.buildFloor = buildFloor
        self.flagFile = flagFile
        if let floorFile, let text = SystemFiles().read(floorFile), let seconds = Int64(text.trimmed()), seconds > 0 {
            saved.withLock { $0.floor = WallTime(secondsSince1970: seconds) }
        }
    }

    /// The floor: the later of the build floor and the saved one.
    package var floor: WallTime { max(buildFloor, saved.withLock { $0.floor } ?? buildFloor) }

    /// Whether the kernel reports the clock synchronized, or systemd-timesyncd's flag is there.
    package var synchronized: Bool {
        tinyfire_clock_unsynchronized() == 0 || access(flagFile, F_OK) == 0
    }

    /// The verdict now.
    /// - Parameter now: the wall clock; default now.
    package func verdict(now: WallTime = .now()) -> ClockVerdict {
        ClockVerdict.judge(now: now, floor: floor, synchronized: !requireSync || synchronized, requireSync: requireSync)
    }

    /// Whether points may be stamped now (the clock is at or above the floor).
    package func mayStamp(now: WallTime = .now()) -> Bool { now >= floor }

    /// Saves now as the floor when the kernel reports the clock synchronized, at most once an
    /// hour. A clock that is merely believed (`requireSync` off) never raises the floor: a board
    /// whose RTC ran a year ahead would otherwise stop stamping points for that year once corrected.
    /// - Returns: the problem when the file could not be written.
    @discardableResult
    package func remember(now: WallTime = .now()) -> String? {
        guard let floorFile, now >= floor, synchronized else { return nil }
        let due = saved.withLock { state in state.at.map { Instant.now().since($0) >= Self.saveInterval } ?? true }
        guard due else { return nil }
        let seconds = now.secondsSince1970
        // Durable: once an hour at most, and a floor a power cut took back would let a clock
        // that went back stamp points again.
        if let failure = replaceFile(floorFile, with: Array("\(seconds)\n".utf8), durability: .durable, temporarySuffix: ".new") {
            return failure.description
        }
        saved.withLock { $0 = (WallTime(secondsSince1970: seconds), Instant.now()) }
        return nil
    }

    /// A queued record's age: on the boot clock when it was queued during this boot (true
    /// whatever the wall clock did); by the wall clock when it is from an earlier boot, the
    /// clock is trusted now and the record's stamp is not from a clock that was plainly wrong
    /// (before 2026, when this format did not exist); otherwise
    /// unknown (nil), and no decision is taken on it.
    /// - Parameters:
    ///   - enqueuedAt: the record's wall-clock stamp.
    ///   - sinceEnqueue: its age on the boot clock, when it was queued during this boot.
    ///   - now: the wall clock; default now.
    package func age(enqueuedAt: WallTime, sinceEnqueue: Duration?, now: WallTime = .now()) -> Duration? {
        if let sinceEnqueue { return sinceEnqueue }
        guard verdict(now: now).isTrusted, enqueuedAt >= Self.formatEpoch else { return nil }
        return max(.zero, now.duration(since: enqueuedAt))
    }
}
