import TinyFireCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// Why a collector stopped: the file it reads is missing or not what it expects on this board.
package struct CollectorError: Error, Sendable, CustomStringConvertible {
    /// The collector.
    package let collector: String
    /// What went wrong (the file and the reason).
    package let message: String

    /// "collector: message".
    package var description: String { "\(collector): \(message)" }
}

/// Where collectors read the kernel's files: `/` on a board, a directory tree in tests.
package struct SystemFiles: Sendable {
    /// Prefix for every path (empty for the real system).
    package let root: String

    /// Reads the real /proc and /sys.
    package init(root: String = "") { self.root = root }

    /// The file's text, or nil when it cannot be read. Reads at most `limit` bytes (the
    /// kernel's text files are far smaller; a bound keeps a strange file from costing memory);
    /// with `whole`, a file longer than `limit` is nil rather than cut short.
    package func read(_ path: String, limit: Int = 1 << 20, whole: Bool = false) -> String? {
        readBytes(path, limit: limit, whole: whole).map { String(decoding: $0, as: UTF8.self) }
    }

    /// The file's bytes, as `read` (at most `limit`; with `whole`, nil for a longer file).
    /// Only regular files are read unless `regularOnly` is false: a FIFO, a device or a socket
    /// at the path (a local user's trap for a root reader, or a mistake) is nil at once, never
    /// waited on. A command that reads a path its user named may take a pipe
    /// (`<(…)`): it passes false and waits for the writer as `cat` would.
    package func readBytes(_ path: String, limit: Int = 1 << 20, whole: Bool = false, regularOnly: Bool = true) -> [UInt8]? {
        // Non-blocking, so that opening a FIFO with no writer returns instead of waiting.
        let fd = open(root + path, O_RDONLY | O_CLOEXEC | O_NOCTTY | (regularOnly ? O_NONBLOCK : 0))
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, !regularOnly || info.st_mode & mode_t(S_IFMT) == mode_t(S_IFREG) else { return nil }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: min(65536, limit + 1))
        while true {
            let n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            if n < 0 && whole { return nil }
            guard n > 0 else { break }
            if bytes.count + n > limit {
                if whole { return nil }
                bytes.append(contentsOf: buffer[0..<(limit - bytes.count)])
                break
            }
            bytes.append(contentsOf: buffer[0..<n])
        }
        return bytes
    }

    /// Why `readBytes(path, limit: limit, whole: true)` found nothing, as the end of a sentence
    /// that starts with the path: "does not exist", "cannot be read: Permission denied",
    /// "cannot be read: Is a directory", "is not a regular file (a FIFO)", "is larger than
    /// 1 MiB: not <what>".
    /// - Parameters:
    ///   - path: the file.
    ///   - limit: the bound it was read with.
    ///   - what: what the file should have been ("a config file"), for the too-large case.
    package func whyUnreadable(_ path: String, limit: Int, what: String) -> String {
        var info = stat()
        if stat(root + path, &info) != 0 {
            return errno == ENOENT ? "does not exist" : "cannot be read: \(errnoMessage(errno))"
        }
        switch info.st_mode & mode_t(S_IFMT) {
        case mode_t(S_IFDIR): return "cannot be read: \(errnoMessage(EISDIR))"
        case mode_t(S_IFIFO): return "is not a regular file (a FIFO)"
        case mode_t(S_IFSOCK): return "is not a regular file (a socket)"
        case mode_t(S_IFCHR), mode_t(S_IFBLK): return "is not a regular file (a device)"
        case mode_t(S_IFREG) where info.st_size > limit:
            return "is larger than \(ConfigReader.describeBytes(Int64(limit))): not \(what)"
        default: break
        }
        return "cannot be read: \(errnoMessage(EACCES))"
    }

    /// Names in a directory, sorted (none when it cannot be read, or its listing stops on an
    /// error).
    package func list(_ path: String) -> [String] {
        ((try? listDirectory(root + path)) ?? []).sorted()
    }
}

/// The built-in collectors: parsers of the kernel's text files, fed the text (so tests give
/// them any board's files), each keeping what it needs from the last sample (CPU deltas).
/// Measurement and field names follow Telegraf's, so existing dashboards work.
package enum SystemCollectors {
    // MARK: CPU

    /// Jiffies per state from the first line of /proc/stat.
    package struct CPUTimes: Sendable, Equatable {
        /// user, nice, system, idle, iowait, irq, softirq, steal (guest time is inside user).
        package var values: [UInt64]
    }

    /// The aggregate `cpu` line of /proc/stat.
    package static func parseCPU(_ text: String) -> CPUTimes? {
        guard let line = text.split(separator: "\n").first(where: { $0.hasPrefix("cpu ") }) else { return nil }
        let numbers = line.split(separator: " ").dropFirst().compactMap { UInt64($0) }
        guard numbers.count >= 4 else { return nil }
        return CPUTimes(values: Array((numbers + [0, 0, 0, 0]).prefix(8)))
    }

    /// Percent of time per state between two samples (`cpu` measurement, tag `cpu=cpu-total`);
    /// nil when no time passed or a counter went back (a reboot between samples).
    package static func cpuUsage(from old: CPUTimes, to new: CPUTimes) -> [String: Point.Value]? {
        var deltas: [UInt64] = []
        for (a, b) in zip(old.values, new.values) {
            guard b >= a else { return nil }
            deltas.append(b - a)
        }
        let total = deltas.reduce(0, +)
        guard total > 0 else { return nil }
        let names = ["usage_user", "usage_nice", "usage_system", "usage_idle", "usage_iowait", "usage_irq", "usage_softirq", "usage_steal"]
        var fields: [String: Point.Value] = [:]
        for (name, delta) in zip(names, deltas) { fields[name] = .float(Double(delta) * 100 / Double(total)) }
        return fields
    }

    // MARK: Memory

    /// `mem` fields from /proc/meminfo (bytes, and used/available percent), plus swap.
    package static func memory(_ text: String) -> [String: Point.Value]? {
        var values: [String: Int64] = [:]
        for line in text.split(separator: "\n") {
            let parts = line.split(separator: " ", omittingEmptySubsequences: true)
            guard parts.count >= 2, parts[0].hasSuffix(":"), let number = Int64(parts[1]) else { continue }
            values[String(parts[0].dropLast())] = parts.count > 2 && parts[2] == "kB" ? number * 1024 : number
        }
        guard let total = values["MemTotal"], total > 0, let free = values["MemFree"] else { return nil }
        let available = values["MemAvailable"] ?? free + (values["Buffers"] ?? 0) + (values["Cached"] ?? 0)
        let used = total - available
        var fields: [String: Point.Value] = [
            "total": .integer(total), "free": .integer(free), "available": .integer(available), "used": .integer(used),
            "used_percent": .float(Double(used) * 100 / Double(total)),
            "available_percent": .float(Double(available) * 100 / Double(total)),
        ]
        for (key, name) in [("Buffers", "buffered"), ("Cached", "cached"), ("SwapTotal", "swap_total"), ("SwapFree", "swap_free")] {
            if let value = values[key] { fields[name] = .integer(value) }
        }
        return fields
    }

    // MARK: Load and uptime

    /// `system` fields load1, load5, load15 from /proc/loadavg.
    package static func load(_ text: String) -> [String: Point.Value]? {
        let parts = text.split(separator: " ")
        guard parts.count >= 3, let one = Double(parts[0]), let five = Double(parts[1]), let fifteen = Double(parts[2]) else {
            return nil
        }
        return ["load1": .float(one), "load5": .float(five), "load15": .float(fifteen)]
    }

    /// `system` field uptime (whole seconds) from /proc/uptime.
    package static func uptime(_ text: String) -> [String: Point.Value]? {
        guard let first = text.split(separator: " ").first, let seconds = Double(first.trimmed()), seconds >= 0 else { return nil }
        return ["uptime": .integer(Int64(seconds))]
    }

    // MARK: Network

    /// `net` fields per interface from /proc/net/dev (loopback left out, as Telegraf does).
    package static func network(_ text: String) -> [String: [String: Point.Value]]? {
        var out: [String: [String: Point.Value]] = [:]
        for line in text.split(separator: "\n") {
            guard let colon = line.firstIndex(of: ":") else { continue }
            let name = line[..<colon].trimmed()
            let numbers = line[line.index(after: colon)...].split(separator: " ").compactMap { Int64($0) }
            guard !name.isEmpty, name != "lo", numbers.count >= 16 else { continue }
            out[name] = [
                "bytes_recv": .integer(numbers[0]), "packets_recv": .integer(numbers[1]), "err_in": .integer(numbers[2]),
                "drop_in": .integer(numbers[3]), "bytes_sent": .integer(numbers[8]), "packets_sent": .integer(numbers[9]),
                "err_out": .integer(numbers[10]), "drop_out": .integer(numbers[11]),
            ]
        }
        return text.contains("|") || !out.isEmpty ? out : nil
    }

    // MARK: Pressure

    /// `pressure` fields per kind (`some`, `full`) from one /proc/pressure file.
    package static func pressure(_ text: String) -> [String: [String: Point.Value]]? {
        var out: [String: [String: Point.Value]] = [:]
        for line in text.split(separator: "\n") {
            let parts = line.split(separator: " ")
            guard let kind = parts.first, kind == "some" || kind == "full" else { continue }
            var fields: [String: Point.Value] = [:]
            for part in parts.dropFirst() {
                let pair = part.split(separator: "=", maxSplits: 1)
                guard pair.count == 2 else { continue }
                if pair[0] == "total", let total = Int64(pair[1]) {
                    fields["total"] = .integer(total)
                } else if let value = Double(pair[1]) {
                    fields[String(pair[0])] = .float(value)
                }
            }
            if !fields.isEmpty { out[String(kind)] = fields }
        }
        return out.isEmpty ? nil : out
    }

    // MARK: Disks

    /// A mounted file system worth reporting.
    package struct Mount: Sendable, Equatable {
        /// The device (`/dev/mmcblk0p2`).
        package var device: String
        /// Where it is mounted.
        package var path: String
        /// Its type (`ext4`).
        package var type: String
    }

    /// File systems that hold data, from /proc/self/mounts: pseudo and memory file systems
    /// (proc, sysfs, cgroup, tmpfs, …) are left out, and each mount point once.
    package static func realMounts(_ text: String) -> [Mount] {
        let pseudo: Set<String> = [
            "proc", "sysfs", "devtmpfs", "devpts", "tmpfs", "cgroup", "cgroup2", "pstore", "securityfs", "debugfs", "tracefs",
            "configfs", "fusectl", "mqueue", "hugetlbfs", "bpf", "autofs", "binfmt_misc", "rpc_pipefs", "nsfs", "ramfs", "overlay",
            "squashfs", "efivarfs", "selinuxfs", "fuse.lxcfs", "rootfs",
        ]
        var seen: Set<String> = []
        var out: [Mount] = []
        for line in text.split(separator: "\n") {
            let parts = line.split(separator: " ")
            guard parts.count >= 3 else { continue }
            let type = String(parts[2])
            let path = unescapeMountPath(String(parts[1]))
            guard !pseudo.contains(type), seen.insert(path).inserted else { continue }
            out.append(Mount(device: String(parts[0]), path: path, type: type))
        }
        return out
    }

    /// /proc/mounts writes spaces and tabs in paths as octal escapes (`\040`).
    package static func unescapeMountPath(_ path: String) -> String {
        guard path.contains("\\") else { return path }
        var bytes: [UInt8] = []
        let raw = Array(path.utf8)
        var index = 0
        while index < raw.count {
            if raw[index] == UInt8(ascii: "\\"), index + 3 < raw.count,
                let value = UInt8(String(decoding: raw[(index + 1)...(index + 3)], as: UTF8.self), radix: 8)
            {
                bytes.append(value)
                index += 4
            } else {
                bytes.append(raw[index])
                index += 1
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// `disk` fields from statvfs of `path` (nil when it cannot be read).
    package static func diskUsage(_ path: String) -> [String: Point.Value]? {
        var info = statvfs()
        guard statvfs(path, &info) == 0, info.f_blocks > 0 else { return nil }
        let size = Int64(info.f_frsize)
        let total = Int64(info.f_blocks) * size
        let free = Int64(info.f_bavail) * size
        let used = total - Int64(info.f_bfree) * size
        let denominator = used + free
        return [
            "total": .integer(total), "free": .integer(free), "used": .integer(used),
            "used_percent": .float(denominator > 0 ? Double(used) * 100 / Double(denominator) : 0),
            "inodes_total": .integer(Int64(info.f_files)), "inodes_free": .integer(Int64(info.f_ffree)),
        ]
    }

    // MARK: Thermal

    /// `temp` in °C from a thermal zone's `temp` file (millidegrees).
    package static func temperature(_ text: String) -> Double? {
        guard let millidegrees = Int64(text.trimmed()) else { return nil }
        return Double(millidegrees) / 1000
    }
}
