#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// A moment on this boot's clock: the kernel's boot id and the time since boot on
/// `CLOCK_BOOTTIME` (which counts suspend, and which no wall-clock change — an NTP step, a
/// wrong RTC, `date -s` — moves). Two instants of the same boot give an elapsed time that is
/// true whatever the wall clock did in between; instants of different boots give none.
public struct BootInstant: Sendable, Equatable, Hashable {
    /// The kernel's boot id (`/proc/sys/kernel/random/boot_id`), as 16 bytes.
    public let bootID: [UInt8]
    /// Time since boot, in milliseconds.
    public let uptimeMilliseconds: UInt64

    /// An instant.
    /// - Parameters:
    ///   - bootID: 16 bytes.
    ///   - uptimeMilliseconds: time since that boot.
    public init(bootID: [UInt8], uptimeMilliseconds: UInt64) {
        self.bootID = bootID
        self.uptimeMilliseconds = uptimeMilliseconds
    }

    /// This boot's id, read once per process; nil when the kernel does not offer one.
    public static let currentBootID: [UInt8]? = readBootID(path: "/proc/sys/kernel/random/boot_id")

    /// Now on this boot's clock; nil without a boot id.
    public static func now() -> BootInstant? {
        guard let id = currentBootID else { return nil }
        var ts = timespec()
        clock_gettime(CLOCK_BOOTTIME, &ts)
        return BootInstant(bootID: id, uptimeMilliseconds: UInt64(ts.tv_sec) * 1000 + UInt64(ts.tv_nsec) / 1_000_000)
    }

    /// Time from `earlier` to `self` when both are of the same boot (zero if `earlier` is
    /// later); nil across boots.
    public func since(_ earlier: BootInstant) -> Duration? {
        guard bootID == earlier.bootID else { return nil }
        return .milliseconds(
            Int64(clamping: uptimeMilliseconds >= earlier.uptimeMilliseconds ? uptimeMilliseconds - earlier.uptimeMilliseconds : 0))
    }

    /// A boot id file's UUID (`8-4-4-4-12` hex digits) as 16 bytes; nil when unreadable or
    /// not a UUID.
    package static func readBootID(path: String) -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 64)
        let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, 64) }
        guard count > 0 else { return nil }
        return parseUUID(buffer[..<count])
    }

    /// A UUID's text (hyphens optional, trailing newline allowed) as 16 bytes.
    package static func parseUUID(_ text: ArraySlice<UInt8>) -> [UInt8]? {
        var bytes: [UInt8] = []
        var high: UInt8?
        for character in text where character != UInt8(ascii: "-") && character != UInt8(ascii: "\n") {
            let digit: UInt8
            switch character {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = character - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = character - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = character - UInt8(ascii: "A") + 10
            default: return nil
            }
            if let first = high {
                bytes.append(first << 4 | digit)
                high = nil
            } else {
                high = digit
            }
        }
        return bytes.count == 16 && high == nil ? bytes : nil
    }
}
