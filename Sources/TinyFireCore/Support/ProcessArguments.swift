#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// The process's own command line where the kernel keeps it: the argument strings copied onto
/// the stack at exec, which `/proc/PID/cmdline` (and so `ps`) reads for any local user. Their
/// bounds are `arg_start` and `arg_end` of `/proc/self/stat` (fields 48 and 49, Linux 3.5 and
/// later): the Embedded build has no `CommandLine.unsafeArgv`, and the entry point reads its
/// arguments from /proc/self/cmdline, so the memory is found the way that file is made.
package enum ProcessArguments {
    /// The most argument memory looked at (Linux allows 2 MiB of arguments by default; a wrong
    /// reading of /proc/self/stat must not send the scan through the address space).
    static let maximumBytes = 1 << 23

    /// One secret to hide: every argument whose bytes equal `argument` gets its `bytes`
    /// overwritten with `*`.
    package struct Secret {
        package var argument: [UInt8]
        package var bytes: Range<Int>

        package init(argument: [UInt8], bytes: Range<Int>) {
            self.argument = argument
            self.bytes = bytes
        }
    }

    /// Overwrites secrets in place in the process's argument memory, as curl blanks `-u` and
    /// `-U` in its `argv`: the length of each argument stays (nothing after it moves), its
    /// secret bytes read `*` from then on. Only arguments equal to a secret's text are changed,
    /// and only inside them. Call it on the main thread before other threads start reading the
    /// arguments' memory (nothing in this process does).
    /// - Parameter secrets: what to hide.
    /// - Returns: how many arguments were changed; 0 also when the memory cannot be found
    ///   (no /proc, a kernel before 3.5).
    @discardableResult
    package static func overwrite(_ secrets: [Secret]) -> Int {
        guard !secrets.isEmpty, let memory = argumentMemory(), let base = UnsafeMutablePointer<UInt8>(bitPattern: memory.start)
        else { return 0 }
        let count = memory.count
        var changed = 0
        var index = 0
        while index < count {
            var end = index
            while end < count && base[end] != 0 { end += 1 }
            let length = end - index
            for secret in secrets where secret.argument.count == length && secret.bytes.upperBound <= length {
                var same = true
                for offset in 0..<length where base[index + offset] != secret.argument[offset] {
                    same = false
                    break
                }
                guard same else { continue }
                for offset in secret.bytes { base[index + offset] = UInt8(ascii: "*") }
                changed += 1
                break
            }
            index = end + 1
        }
        return changed
    }

    /// The address and length of the argument strings, from /proc/self/stat.
    private static func argumentMemory() -> (start: UInt, count: Int)? {
        let fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { closeDescriptor(fd) }
        var text = [UInt8](repeating: 0, count: 4096)
        var filled = 0
        while filled < text.count {
            let n = text.withUnsafeMutableBytes { raw in read(fd, raw.baseAddress.map { $0 + filled }, raw.count - filled) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { break }
            filled += n
        }
        // The command name (field 2) is in parentheses and may hold spaces or parentheses: the
        // fields are counted from the last `)`, which is field 2's end.
        guard let close = text[..<filled].lastIndex(of: UInt8(ascii: ")")) else { return nil }
        let fields = text[(close + 1)..<filled].split(separator: UInt8(ascii: " "))
        // fields[0] is field 3 (the state); arg_start is field 48, arg_end field 49.
        guard fields.count > 46, let start = number(fields[45]), let end = number(fields[46]), start > 0, end > start,
            end - start <= UInt64(maximumBytes), let address = UInt(exactly: start)
        else { return nil }
        return (address, Int(end - start))
    }

    private static func number(_ digits: ArraySlice<UInt8>) -> UInt64? {
        guard !digits.isEmpty, digits.count <= 20 else { return nil }
        var value: UInt64 = 0
        for digit in digits {
            guard digit >= UInt8(ascii: "0"), digit <= UInt8(ascii: "9") else { return nil }
            let (times, overflow) = value.multipliedReportingOverflow(by: 10)
            guard !overflow else { return nil }
            let (sum, carry) = times.addingReportingOverflow(UInt64(digit - UInt8(ascii: "0")))
            guard !carry else { return nil }
            value = sum
        }
        return value
    }
}
