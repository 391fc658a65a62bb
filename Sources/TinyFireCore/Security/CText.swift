import CTinyFireTLS

/// The UTF-8 text in a NUL-terminated C buffer.
package func cText(_ buffer: [CChar]) -> String {
    String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}

/// The text a C function writes into a fresh buffer of `capacity` bytes.
package func cText(capacity: Int, _ fill: (UnsafeMutablePointer<CChar>, Int) -> Void) -> String {
    var buffer = [CChar](repeating: 0, count: capacity)
    buffer.withUnsafeMutableBufferPointer { pointer in
        if let base = pointer.baseAddress { fill(base, capacity) }
    }
    return cText(buffer)
}

/// mbedTLS's message for an error code.
package func tlsErrorMessage(_ code: Int32) -> String {
    let text = cText(capacity: 256) { tinyfire_tls_strerror(code, $0, $1) }
    return "\(text) (-0x\(String(-Int(code), radix: 16, uppercase: true)))"
}

/// mbedTLS's reasons for a failed chain verification, one per flag.
package func tlsVerificationReasons(_ flags: UInt32) -> [String] {
    let text = cText(capacity: 1024) { tinyfire_tls_verify_info(flags, $0, $1) }
    return text.split(separator: "\n").map { $0.trimmingHTTPWhitespace() }.filter { !$0.isEmpty }
}
