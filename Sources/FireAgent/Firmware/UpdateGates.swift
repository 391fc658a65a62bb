import TinyFireCore

#if canImport(Glibc)
    import CTinyFireSystem
    import Glibc
#elseif canImport(Musl)
    import CTinyFireSystem
    import Musl
#endif

/// One range of `firmware.installWindow`: `[DAYS ]HH:MM-HH:MM` in the board's local time, e.g.
/// `02:00-05:00`, `Mon-Fri 01:30-04:00`, `Sat,Sun 00:00-24:00`, `22:00-02:00` (past midnight:
/// the days name the evening it starts). Sans-I/O: parsed from text, asked with a weekday and
/// a minute of the day.
package struct InstallWindow: Sendable, Equatable, CustomStringConvertible {
    /// Weekdays it starts on, `tm_wday` numbers (0 Sunday … 6 Saturday).
    package var days: Set<Int>
    /// Its start and end, minutes since midnight (end 1440 is midnight at the day's end); an
    /// end at or before the start runs past midnight.
    package var start: Int
    /// See `start`.
    package var end: Int
    /// As written.
    package let description: String

    package static let dayNames = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]

    /// Reads one range.
    /// - Parameter text: `[DAYS ]HH:MM-HH:MM`.
    /// - Throws: `ConfigProblem`-ready text naming what is wrong.
    package init(parsing text: String) throws(InstallWindowError) {
        description = text
        let parts = text.split(separator: " ", omittingEmptySubsequences: true)
        guard parts.count == 1 || parts.count == 2 else { throw InstallWindowError(text, "is not \"[DAYS ]HH:MM-HH:MM\"") }
        days = Set(0..<7)
        if parts.count == 2 {
            days = []
            for item in parts[0].split(separator: ",", omittingEmptySubsequences: false) {
                let ends = item.split(separator: "-", omittingEmptySubsequences: false).map { $0.lowercased() }
                guard (1...2).contains(ends.count), let first = Self.dayNames.firstIndex(of: ends[0]),
                    let last = Self.dayNames.firstIndex(of: ends[ends.count - 1])
                else { throw InstallWindowError(text, "names a day that is not Mon, Tue, Wed, Thu, Fri, Sat or Sun: \(item)") }
                var day = first
                while true {
                    days.insert(day)
                    if day == last { break }
                    day = (day + 1) % 7
                }
            }
        }
        let times = parts[parts.count - 1].split(separator: "-", omittingEmptySubsequences: false)
        guard times.count == 2, let start = Self.minutes(times[0]), let end = Self.minutes(times[1]) else {
            throw InstallWindowError(text, "needs a time range HH:MM-HH:MM (24-hour clock, 24:00 for midnight at the end)")
        }
        guard start < 1440, start != end else { throw InstallWindowError(text, "is empty: it starts where it ends") }
        self.start = start
        self.end = end
    }

    private static func minutes(_ text: Substring) -> Int? {
        let fields = text.split(separator: ":", omittingEmptySubsequences: false)
        guard fields.count == 2, fields[0].count == 2, fields[1].count == 2, let hour = Int(fields[0]), let minute = Int(fields[1]),
            (0...24).contains(hour), (0..<60).contains(minute), hour < 24 || minute == 0
        else { return nil }
        return hour * 60 + minute
    }

    /// Whether the range holds this moment.
    /// - Parameters:
    ///   - weekday: `tm_wday` (0 Sunday).
    ///   - minute: minutes since local midnight.
    package func contains(weekday: Int, minute: Int) -> Bool {
        if start < end { return days.contains(weekday) && minute >= start && minute < end }
        // Past midnight: the evening of a listed day, or the morning after one.
        return (days.contains(weekday) && minute >= start) || (days.contains((weekday + 6) % 7) && minute < end)
    }
}

/// A malformed `firmware.installWindow` entry.
package struct InstallWindowError: Error, Sendable, CustomStringConvertible {
    /// The entry and what is wrong with it.
    package let description: String

    package init(_ text: String, _ reason: String) { description = "\"\(text)\" \(reason)" }
}

/// The board's local time, as the C library sees it (`TZ`, else `/etc/localtime`).
package struct LocalTime: Sendable, Equatable, CustomStringConvertible {
    /// `tm_wday`: 0 Sunday … 6 Saturday.
    package var weekday: Int
    /// Minutes since local midnight.
    package var minute: Int
    /// The zone's abbreviation (`CET`, `UTC`).
    package var zone: String

    /// Now.
    package static func now() -> LocalTime {
        tzset()  // a time zone changed since the last call (/etc/localtime, TZ) counts
        var seconds = time(nil)
        var parts = tm()
        localtime_r(&seconds, &parts)
        let zone = parts.tm_zone.map { String(cString: $0) } ?? ""
        return LocalTime(weekday: Int(parts.tm_wday), minute: Int(parts.tm_hour) * 60 + Int(parts.tm_min), zone: zone)
    }

    /// `Tue 03:12 CET`.
    package var description: String {
        let day = InstallWindow.dayNames[weekday % 7].prefix(1).uppercased() + InstallWindow.dayNames[weekday % 7].dropFirst()
        let hour = minute / 60
        let minutes = minute % 60
        return "\(day) \(hour < 10 ? "0" : "")\(hour):\(minutes < 10 ? "0" : "")\(minutes) \(zone)"
    }
}

/// `firmware.inhibitFile`: the application holds a lock (flock) on this file while no install
/// or reboot may start. Opened read-only without following links or blocking. It fails closed:
/// only a file that does not exist (`ENOENT`) or a regular file nobody locks holds nothing; a
/// file the agent cannot open (`EACCES`: an application's 0600 lock file and an agent without
/// `CAP_DAC_OVERRIDE`), cannot lock-test, or that is not a regular file holds everything, with
/// the reason.
package enum InhibitLock {
    /// What the file says now.
    package enum State: Sendable, Equatable {
        /// Nobody holds it (or it does not exist): installs and reboots may start.
        case free
        /// Someone holds a lock on it.
        case held
        /// It cannot be judged (`cannot be opened: Permission denied`): as held, with the reason.
        case unusable(String)
    }

    /// Looks at `path` now.
    /// - Parameter path: `firmware.inhibitFile`.
    /// - Returns: free, held, or why it cannot be judged (errno's text).
    package static func state(_ path: String) -> State {
        let fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)
        guard fd >= 0 else {
            let code = errno
            if code == ENOENT { return .free }
            if code == ELOOP { return .unusable("cannot be opened: it is a symbolic link (\(errnoMessage(code)))") }
            return .unusable("cannot be opened: \(errnoMessage(code))")
        }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { return .unusable("cannot be examined: \(errnoMessage(errno))") }
        guard info.st_mode & mode_t(S_IFMT) == mode_t(S_IFREG) else { return .unusable("is not a regular file") }
        if flock(fd, LOCK_EX | LOCK_NB) == 0 {
            flock(fd, LOCK_UN)
            return .free
        }
        let code = errno
        return code == EWOULDBLOCK ? .held : .unusable("cannot be lock-tested: \(errnoMessage(code))")
    }
}
