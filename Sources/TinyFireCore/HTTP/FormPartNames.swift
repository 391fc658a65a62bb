/// The names in a multipart/form-data part's head, shared by the library's
/// `MultipartFormData` and `fire-agent request -F`: the escaping of names and file names, and
/// the MIME type a file's extension implies.
package enum FormPartNames {
    /// Escapes a name as the HTML standard's multipart/form-data encoder does (`"` → `%22`,
    /// CR → `%0D`, LF → `%0A`), so no name can end the quoted string or the header line.
    package static func escape(_ value: String) -> String {
        var out = ""
        for scalar in value.unicodeScalars {
            switch scalar {
            case "\"": out += "%22"
            case "\r": out += "%0D"
            case "\n": out += "%0A"
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out
    }

    /// The MIME type for a file extension (case-insensitive, without the dot);
    /// `application/octet-stream` when unknown.
    package static func mimeType(forExtension pathExtension: String) -> String {
        let ext = pathExtension.lowercased()
        for (names, type) in mimeTypes where names.split(separator: " ").contains(where: { $0 == ext }) { return type }
        return "application/octet-stream"
    }

    /// Extensions (space-separated) and their type.
    private static let mimeTypes: [(String, String)] = [
        ("txt log ini conf", "text/plain"), ("csv", "text/csv"), ("html htm", "text/html"), ("css", "text/css"),
        ("xml", "application/xml"), ("json", "application/json"), ("ndjson", "application/x-ndjson"), ("js", "text/javascript"),
        ("md", "text/markdown"), ("yaml yml", "application/yaml"), ("toml", "application/toml"), ("png", "image/png"),
        ("jpg jpeg", "image/jpeg"), ("gif", "image/gif"), ("bmp", "image/bmp"), ("webp", "image/webp"), ("svg", "image/svg+xml"),
        ("ico", "image/vnd.microsoft.icon"), ("tif tiff", "image/tiff"), ("heic", "image/heic"), ("mp3", "audio/mpeg"),
        ("wav", "audio/wav"), ("ogg", "audio/ogg"), ("flac", "audio/flac"), ("m4a", "audio/mp4"), ("mp4", "video/mp4"),
        ("mov", "video/quicktime"), ("mkv", "video/x-matroska"), ("webm", "video/webm"), ("avi", "video/x-msvideo"),
        ("h264", "video/h264"), ("pdf", "application/pdf"), ("zip", "application/zip"), ("gz tgz", "application/gzip"),
        ("tar", "application/x-tar"), ("bz2", "application/x-bzip2"), ("xz", "application/x-xz"), ("zst", "application/zstd"),
        ("7z", "application/x-7z-compressed"), ("bin img swu raucb", "application/octet-stream"),
        ("pcap pcapng", "application/vnd.tcpdump.pcap"), ("wasm", "application/wasm"), ("mender", "application/x-tar"),
        ("cbor", "application/cbor"), ("pem", "application/x-pem-file"), ("der", "application/pkix-cert"),
        ("crt", "application/x-x509-ca-cert"),
    ]
}
