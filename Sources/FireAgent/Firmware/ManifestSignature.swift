import TinyFireCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// The detached signature over a manifest's exact bytes (`openssl dgst -sha256 -sign key.pem
/// -out manifest.json.sig manifest.json`).
package enum ManifestSignature {
    /// The largest signature read (RSA 8192 is 1 KiB; base64 of it is less than 2 KiB).
    package static let maximumBytes = 4096

    /// Checks `signature` over `manifest` against `keys`.
    /// - Parameters:
    ///   - signature: the raw signature, or the same in base64 (vendors often carry it as text).
    ///   - manifest: the manifest's exact bytes.
    ///   - keys: the configured keys; any one valid signature suffices.
    /// - Returns: the key that signed.
    /// - Throws: `FirmwareRefusal` `.badSignature`.
    @discardableResult
    package static func verify(_ signature: [UInt8], of manifest: [UInt8], keys: [ManifestKey]) throws(FirmwareRefusal) -> ManifestKey {
        func refuse(_ message: String) -> FirmwareRefusal { FirmwareRefusal(kind: .badSignature, message: message) }
        guard !keys.isEmpty else { throw refuse("no firmware key is configured (firmware.keys)") }
        guard !signature.isEmpty else { throw refuse("the signature is empty") }
        guard signature.count <= maximumBytes else { throw refuse("the signature is \(signature.count) bytes, more than any key makes") }
        let raw = decodedBase64(signature) ?? signature
        let digest = SHA256Hasher.digest(of: manifest)
        for key in keys where key.verifies(raw, ofDigest: digest) { return key }
        throw refuse(
            "the signature (\(raw.count) bytes) is not valid for the manifest's bytes by any of the \(keys.count) configured "
                + "key\(keys.count == 1 ? "" : "s")")
    }

    /// The bytes of base64 text (whitespace allowed), or nil when `bytes` is not such text.
    package static func decodedBase64(_ bytes: [UInt8]) -> [UInt8]? {
        let isBase64 = { (b: UInt8) in
            (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || (b >= 0x30 && b <= 0x39) || b == 0x2B || b == 0x2F || b == 0x3D
        }
        let isSpace = { (b: UInt8) in b == 0x20 || b == 0x0A || b == 0x0D || b == 0x09 }
        guard bytes.allSatisfy({ isBase64($0) || isSpace($0) }) else { return nil }
        let text = String(decoding: bytes.filter { !isSpace($0) }, as: UTF8.self)
        return Base64.decode(text)
    }
}

/// Incremental SHA-256, for images hashed as they are written: the core's `SHA256`.
package typealias SHA256Hasher = SHA256

extension SHA256 {
    /// Adds a file's bytes, read through one 256 KiB buffer.
    /// - Parameters:
    ///   - path: the file.
    ///   - length: how many bytes (nil: to its end).
    /// - Returns: the bytes added, or nil when the file cannot be read or is shorter than `length`.
    package func update(fromFile path: String, length: UInt64? = nil) -> UInt64? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 256 * 1024, alignment: 16)
        defer { buffer.deallocate() }
        var total: UInt64 = 0
        while length.map({ total < $0 }) ?? true {
            let want = length.map { Int(min(UInt64(buffer.count), $0 - total)) } ?? buffer.count
            let count = read(fd, buffer.baseAddress, want)
            if count < 0 && errno == EINTR { continue }
            guard count >= 0 else { return nil }
            if count == 0 { return length == nil ? total : nil }
            update(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
            total += UInt64(count)
        }
        return total
    }
}

/// Lowercase hexadecimal.
package func hex(_ bytes: [UInt8]) -> String {
    let digits = Array("0123456789abcdef".utf8)
    var out = [UInt8]()
    out.reserveCapacity(bytes.count * 2)
    for byte in bytes {
        out.append(digits[Int(byte >> 4)])
        out.append(digits[Int(byte & 0xF)])
    }
    return String(decoding: out, as: UTF8.self)
}
