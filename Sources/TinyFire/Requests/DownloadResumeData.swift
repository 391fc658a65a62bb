#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif
#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// What a stopped download needs to continue: TinyFire's resume data, a small versioned JSON
/// document (unlike URLSession's opaque blob, it can be read, stored across reboots and
/// pointed at a fresh URL).
///
/// ```json
/// {"version":1,"url":"https://…/fw.bin","partialFile":"/data/.fw.bin.tinyfire-Ab12Cd",
///  "bytesOnDisk":41943040,"entityTag":"\"5f3a-1c00000\"","lastModified":"Sat, 21 Nov 2026 10:00:00 GMT",
///  "totalLength":104857600}
/// ```
///
/// Resuming sends `Range: bytes=<bytesOnDisk>-` and, when a strong `ETag` or else a
/// `Last-Modified` was recorded, `If-Range` with it, so a resource that changed comes back
/// whole (200) instead of being spliced onto old bytes. The partial file must still have
/// exactly `bytesOnDisk` bytes; otherwise the download starts from zero.
public struct DownloadResumeData: Codable, Sendable, Equatable {
    /// The format version this build writes and reads.
    public static let currentVersion = 1

    /// The format version.
    public var version: Int
    /// The URL the download asked for (before redirects).
    public var url: URL
    /// The partial file holding the bytes received so far.
    public var partialFile: String
    /// How many bytes the partial file holds.
    public var bytesOnDisk: UInt64
    /// The response's strong `ETag`, if it had one.
    public var entityTag: String?
    /// The response's `Last-Modified`, if it had one.
    public var lastModified: String?
    /// The whole resource's length, when the server said.
    public var totalLength: UInt64?

    /// Creates resume data (for a file you downloaded partly yourself, say).
    /// - Parameters:
    ///   - url: the resource.
    ///   - partialFile: the file holding its first `bytesOnDisk` bytes.
    ///   - bytesOnDisk: the file's length.
    ///   - entityTag: a strong ETag of the resource, if known.
    ///   - lastModified: its Last-Modified, if known.
    ///   - totalLength: its length, if known.
    public init(
        url: URL, partialFile: String, bytesOnDisk: UInt64, entityTag: String? = nil, lastModified: String? = nil,
        totalLength: UInt64? = nil
    ) {
        self.version = Self.currentVersion
        self.url = url
        self.partialFile = partialFile
        self.bytesOnDisk = bytesOnDisk
        self.entityTag = entityTag
        self.lastModified = lastModified
        self.totalLength = totalLength
    }

    /// Reads resume data.
    /// - Parameter data: bytes from `DownloadRequest.resumeData` or `DownloadResponse.resumeData`.
    /// - Throws: `.downloadResumeFailed(.invalidResumeData)` saying what is wrong.
    public init(data: Data) throws(TinyFireError) {
        let decoded: DownloadResumeData
        do {
            decoded = try JSONDecoder().decode(DownloadResumeData.self, from: data)
        } catch {
            throw .downloadResumeFailed(reason: .invalidResumeData("not TinyFire resume data (\(error))"))
        }
        guard decoded.version == Self.currentVersion else {
            throw .downloadResumeFailed(
                reason: .invalidResumeData("resume data version \(decoded.version); this build reads version \(Self.currentVersion)"))
        }
        self = decoded
    }

    /// The encoded document.
    public var data: Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return (try? encoder.encode(self)) ?? Data()
    }

    /// Writes the document to `path` so that a crash leaves either the old file or the whole
    /// new one (a temporary file, fsync, rename, directory fsync). On failure `path` is
    /// removed: no record means start over, never resume against a stale validator.
    package func writeDurably(to path: String) {
        if replaceFile(path, with: Array(data), durability: .durable) != nil { unlink(path) }
    }

    /// Reads a document written by `writeDurably(to:)`; nil when there is none or it is not
    /// readable resume data.
    package static func read(from path: String) -> DownloadResumeData? {
        guard let data = FileManager.default.contents(atPath: path) else { return nil }
        return try? DownloadResumeData(data: data)
    }

    /// The validator sent in `If-Range`: the entity tag, else the date.
    var ifRangeValidator: String? { entityTag ?? lastModified }

    /// Removes the partial file (when you give up on resuming).
    public func removePartialFile() {
        unlink(partialFile)
    }
}
