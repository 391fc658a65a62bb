import TinyFireCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

// Small helpers of fire-agent's logic, in the Embedded subset.

extension StringProtocol {
    /// Without leading and trailing spaces, tabs, CR and LF.
    package func trimmed() -> String {
        let isSpace: (Character) -> Bool = { $0 == " " || $0 == "\t" || $0 == "\n" || $0 == "\r" }
        guard let first = firstIndex(where: { !isSpace($0) }), let last = lastIndex(where: { !isSpace($0) }) else { return "" }
        return String(self[first...last])
    }
}

extension Duration {
    /// The whole duration in nanoseconds, clamped to `Int64`'s range.
    package var totalNanoseconds: Int64 {
        let (seconds, attoseconds) = components
        let (scaled, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        if overflow { return seconds < 0 ? .min : .max }
        return scaled.addingReportingOverflow(attoseconds / 1_000_000_000).overflow ? .max : scaled + attoseconds / 1_000_000_000
    }
}

/// A new idempotency key: a random (version 4) UUID's text, lower case. The key of every
/// record the agent queues (telemetry batches, firmware reports, `queue add`, `request --queue`).
@Sendable package func newIdempotencyKey() -> String {
    var generator = SystemRandomNumberGenerator()
    var bytes: [UInt8] = []
    for _ in 0..<2 {
        let word = generator.next()
        for shift in stride(from: 0, to: 64, by: 8) { bytes.append(UInt8(truncatingIfNeeded: word >> UInt64(shift))) }
    }
    bytes[6] = bytes[6] & 0x0F | 0x40
    bytes[8] = bytes[8] & 0x3F | 0x80
    let hex = Array("0123456789abcdef".utf8)
    var out: [UInt8] = []
    for (index, byte) in bytes.enumerated() {
        if index == 4 || index == 6 || index == 8 || index == 10 { out.append(UInt8(ascii: "-")) }
        out.append(hex[Int(byte >> 4)])
        out.append(hex[Int(byte & 0xF)])
    }
    return String(decoding: out, as: UTF8.self)
}
