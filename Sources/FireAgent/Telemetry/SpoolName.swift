/// A spool entry's name as the kernel gives it: bytes, not text. A writer may name a file
/// with bytes that are not UTF-8; decoding such a name would make a different name (U+FFFD in
/// place of the bytes) under which the file cannot be opened, moved or removed. The agent keeps
/// names as bytes from `readdir` to `openat`, `renameat` and `unlinkat`, and shows them escaped.
package struct SpoolName: Sendable, Hashable, Comparable, CustomStringConvertible, ExpressibleByStringLiteral {
    /// The name's bytes, without a NUL.
    package let bytes: [UInt8]
    /// The bytes and a NUL, for the system calls.
    private let terminated: [UInt8]

    /// A name from its bytes (a NUL in them ends it, as it would for the kernel).
    package init(bytes: [UInt8]) {
        let cut = Array(bytes.prefix { $0 != 0 })
        self.bytes = cut
        terminated = cut + [0]
    }

    /// A name from text (tests, the progress record of an older version).
    package init(_ text: String) { self.init(bytes: Array(text.utf8)) }

    /// A name written in the source.
    package init(stringLiteral text: String) { self.init(text) }

    /// Whether the name starts with `.` (a writer's file still being written).
    package var isHidden: Bool { bytes.first == 0x2E }

    /// The name for logs and reasons: UTF-8 printable text as it is, anything else (invalid
    /// UTF-8, control characters, backslash) as `\xNN`.
    package var description: String {
        var out = ""
        var index = 0
        while index < bytes.count {
            let byte = bytes[index]
            if byte >= 0x20 && byte < 0x7F && byte != 0x5C {
                out.unicodeScalars.append(Unicode.Scalar(byte))
                index += 1
                continue
            }
            // A whole UTF-8 sequence of a printable character stays as it is.
            let length = byte >= 0xF0 ? 4 : byte >= 0xE0 ? 3 : byte >= 0xC2 ? 2 : 0
            if length > 0, index + length <= bytes.count,
                let text = String(validating: bytes[index..<index + length], as: UTF8.self),
                let scalar = text.unicodeScalars.first, scalar.value >= 0xA0
            {
                out += text
                index += length
                continue
            }
            out += Self.escaped(byte)
            index += 1
        }
        return out
    }

    private static func escaped(_ byte: UInt8) -> String {
        let hex = Array("0123456789abcdef".utf8)
        return "\\x" + String(decoding: [hex[Int(byte >> 4)], hex[Int(byte & 0xF)]], as: UTF8.self)
    }

    /// `body` with the name as a C string.
    package func withCString<Result>(_ body: (UnsafePointer<CChar>) -> Result) -> Result {
        terminated.withUnsafeBufferPointer { buffer in
            buffer.withMemoryRebound(to: CChar.self) { chars in
                // Never empty (the NUL is always there).
                guard let base = chars.baseAddress else { return "".withCString(body) }
                return body(base)
            }
        }
    }

    /// This name with `suffix` (`.1`, `.refused`) after it.
    package func appending(_ suffix: String) -> SpoolName { SpoolName(bytes: bytes + Array(suffix.utf8)) }

    /// Byte order (the order the spool is taken in).
    package static func < (lhs: SpoolName, rhs: SpoolName) -> Bool { lhs.bytes.lexicographicallyPrecedes(rhs.bytes) }

    /// The same bytes.
    package static func == (lhs: SpoolName, rhs: SpoolName) -> Bool { lhs.bytes == rhs.bytes }

    /// Hashes the bytes.
    package func hash(into hasher: inout Hasher) { hasher.combine(bytes) }
}
