/// Whether the image fits in the staging directory's file system: sans-I/O, fed the image's
/// signed size, the bytes already on disk, `firmware.stagingReserveBytes` and `statvfs`'s
/// figures. The image may never take the last `reserve` bytes (the state, the manifests and the
/// report queue need room too). All arithmetic saturates: a signed size near 2^63, a huge
/// reserve or a file system's block count cannot overflow it.
package enum StagingSpace {
    /// What to do about the download.
    package enum Verdict: Sendable, Equatable {
        /// There is room: download.
        case fits
        /// Not now: space may come back (another file removed). The reason does not change
        /// while the figures that make the decision stay (it names no free byte count), so a
        /// wait is one reason, logged and persisted once.
        case waits(String)
        /// Never: the image and the reserve are larger than the whole file system.
        case never(String)
    }

    /// The figures of one `statvfs`: bytes available to the agent and bytes in all.
    package struct FileSystem: Sendable, Equatable {
        /// `f_bavail × f_frsize`.
        package var available: Int64
        /// `f_blocks × f_frsize`.
        package var total: Int64

        /// Figures from block counts and the fragment size, saturated at `Int64.max`.
        package init(availableBlocks: UInt64, totalBlocks: UInt64, blockSize: UInt64) {
            available = Self.bytes(availableBlocks, blockSize)
            total = Self.bytes(totalBlocks, blockSize)
        }

        /// Figures in bytes.
        package init(available: Int64, total: Int64) {
            self.available = available
            self.total = total
        }

        private static func bytes(_ blocks: UInt64, _ size: UInt64) -> Int64 {
            let (product, overflow) = blocks.multipliedReportingOverflow(by: size)
            return overflow ? Int64.max : Int64(clamping: product)
        }
    }

    /// The verdict.
    /// - Parameters:
    ///   - imageSize: the signed size.
    ///   - onDisk: bytes of it already in the partial file.
    ///   - reserve: `firmware.stagingReserveBytes`.
    ///   - fileSystem: the staging directory's file system.
    ///   - directory: the staging directory, for the reasons.
    /// - Returns: fits, waits (with the reason), or never (with the reason, naming the sizes).
    package static func judge(imageSize: Int64, onDisk: Int64, reserve: Int64, fileSystem: FileSystem, directory: String) -> Verdict {
        let size = max(0, imageSize)
        let reserve = max(0, reserve)
        let capacity = max(0, fileSystem.total) - min(reserve, max(0, fileSystem.total))
        if size > capacity {
            return .never(
                "tooLarge: the image (\(size) bytes) cannot fit in \(directory): its file system holds \(fileSystem.total) bytes "
                    + "in all, less firmware.stagingReserveBytes (\(reserve)) kept free")
        }
        let remaining = max(0, size - min(max(0, onDisk), size))
        let (needed, overflow) = remaining.addingReportingOverflow(reserve)
        if overflow || fileSystem.available < needed {
            return .waits(
                "not enough space in \(directory): \(remaining) bytes to download and firmware.stagingReserveBytes "
                    + "(\(reserve)) to keep free")
        }
        return .fits
    }
}
