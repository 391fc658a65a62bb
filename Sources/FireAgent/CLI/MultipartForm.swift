import TinyFireCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// The `multipart/form-data` body (RFC 7578) of `fire-agent request -F`, laid out as the
/// library's `MultipartFormData` encodes it: boundaries and part headers in memory, file parts
/// sent from their own files (a 1 GiB capture needs neither 1 GiB of memory nor of disk).
/// Names and file names are escaped as browsers do (`"` → `%22`, CR → `%0D`, LF → `%0A`).
/// Memory: the text fields and the part headers.
struct MultipartForm {
    /// `multipart/form-data; boundary=…`.
    let contentType: String
    /// The body's pieces, in order.
    let segments: [BodySegment]

    /// The form `-F` arguments describe: `name=value`, `name=@path[;type=…][;filename=…]`.
    /// - Returns: the form, or the message naming the field or file that cannot be used.
    static func parse(_ fields: [String]) -> Result<MultipartForm, TransferOptionError> {
        let boundary = randomBoundary()
        var segments: [BodySegment] = []
        var text = ""
        for field in fields {
            guard let equals = field.firstIndex(of: "="), equals != field.startIndex else {
                return .failure(malformed("invalid form field \(quoted(field)): expected name=value or name=@file"))
            }
            let name = String(field[..<equals])
            let value = field[field.index(after: equals)...]
            text += segments.isEmpty && text.isEmpty ? "--\(boundary)\r\n" : "\r\n--\(boundary)\r\n"
            guard value.hasPrefix("@") else {
                text += "Content-Disposition: form-data; name=\"\(escape(name))\"\r\n\r\n" + value
                continue
            }
            let parts = value.dropFirst().split(separator: ";", omittingEmptySubsequences: false)
            let path = String(parts.first ?? "")
            var mimeType: String?
            var fileName: String?
            for parameter in parts.dropFirst() {
                if parameter.hasPrefix("type=") {
                    mimeType = String(parameter.dropFirst(5))
                } else if parameter.hasPrefix("filename=") {
                    fileName = String(parameter.dropFirst(9))
                } else {
                    return .failure(malformed("unknown form parameter \(quoted(String(parameter))) in \(quoted(field))"))
                }
            }
            guard !path.isEmpty else { return .failure(malformed("no file after @ in \(quoted(field))")) }
            var info = stat()
            guard stat(path, &info) == 0 else {
                return .failure(unreadable("cannot read \(path): \(errnoMessage(errno))"))
            }
            guard (info.st_mode & mode_t(S_IFMT)) != mode_t(S_IFDIR) else { return .failure(unreadable("\(path) is a directory")) }
            guard (info.st_mode & mode_t(S_IFMT)) == mode_t(S_IFREG) else {
                return .failure(unreadable("\(path) is not a regular file"))
            }
            let base = path.utf8.lastIndex(of: UInt8(ascii: "/")).map { String(path[path.index(after: $0)...]) } ?? path
            let type = mimeType ?? mimeTypeFor(base)
            if type.utf8.contains(where: { $0 == 13 || $0 == 10 }) {
                return .failure(unreadable("part header \(quoted("Content-Type")) contains CR or LF"))
            }
            text += "Content-Disposition: form-data; name=\"\(escape(name))\"; filename=\"\(escape(fileName ?? base))\"\r\n"
            text += "Content-Type: \(type)\r\n\r\n"
            segments.append(.memory(ByteArrayBody(Array(text.utf8))))
            text = ""
            let size = UInt64(info.st_size)
            segments.append(.file(path: path, offset: 0, length: size, fileSize: size))
        }
        text += fields.isEmpty ? "--\(boundary)--\r\n" : "\r\n--\(boundary)--\r\n"
        segments.append(.memory(ByteArrayBody(Array(text.utf8))))
        return .success(MultipartForm(contentType: "multipart/form-data; boundary=\(boundary)", segments: segments))
    }

    private static func malformed(_ message: String) -> TransferOptionError {
        TransferOptionError(message, exit: AgentCommandLine.Exit.malformedURL)
    }

    private static func unreadable(_ message: String) -> TransferOptionError {
        TransferOptionError(
            "cannot create the upload body: multipart encoding failed: \(message)", exit: AgentCommandLine.Exit.readError)
    }

    /// `tinyfire.boundary.` and 16 random hex digits (the library's form).
    static func randomBoundary() -> String {
        var generator = SystemRandomNumberGenerator()
        let value = generator.next()
        let hex = Array("0123456789abcdef".utf8)
        var digits: [UInt8] = []
        for shift in stride(from: 60, through: 0, by: -4) { digits.append(hex[Int((value >> UInt64(shift)) & 0xF)]) }
        return "tinyfire.boundary." + String(decoding: digits, as: UTF8.self)
    }

    /// Escapes a name as the HTML standard's multipart/form-data encoder does.
    static func escape(_ value: String) -> String { FormPartNames.escape(value) }

    /// The MIME type for a file name's extension (`FormPartNames.mimeType`).
    static func mimeTypeFor(_ fileName: String) -> String {
        guard let dot = fileName.utf8.lastIndex(of: UInt8(ascii: ".")) else { return "application/octet-stream" }
        return FormPartNames.mimeType(forExtension: String(fileName[fileName.index(after: dot)...]))
    }
}
