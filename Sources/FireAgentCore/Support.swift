import TinyFire

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

extension StringProtocol {
    /// Without leading and trailing spaces, tabs, CR and LF.
    func trimmed() -> String {
        let isSpace: (Character) -> Bool = { $0 == " " || $0 == "\t" || $0 == "\n" || $0 == "\r" }
        guard let first = firstIndex(where: { !isSpace($0) }), let last = lastIndex(where: { !isSpace($0) }) else { return "" }
        return String(self[first...last])
    }
}

extension Duration {
    /// The whole duration in nanoseconds, clamped to `Int64`'s range.
    var totalNanoseconds: Int64 {
        let (seconds, attoseconds) = components
        let (scaled, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        if overflow { return seconds < 0 ? .min : .max }
        return scaled.addingReportingOverflow(attoseconds / 1_000_000_000).overflow ? .max : scaled + attoseconds / 1_000_000_000
    }
}

/// Writes all of `bytes` to `fd`, again after a short write or EINTR.
/// - Returns: whether every byte was written.
func writeAll(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
    var offset = 0
    while offset < bytes.count {
        let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + offset, $0.count - offset) }
        if written < 0 && errno == EINTR { continue }
        guard written > 0 else { return false }
        offset += written
    }
    return true
}

/// `strerror` text for an errno value.
func errnoText(_ code: Int32) -> String {
    String(cString: strerror(code))
}

/// `close(2)`, for types whose own `close` method hides it.
func closeDescriptor(_ fd: Int32) {
    _ = close(fd)
}

extension TinyFireError {
    /// The reason of an `.invalidProxy` alone (the proxy URL, password masked, and the problem),
    /// else the whole description.
    public var proxyReasonText: String {
        if case .invalidProxy(let reason) = self { return reason }
        return description
    }
}
