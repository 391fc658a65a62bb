import TinyFireCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// The firmware flow's image: fetched into the staging directory (`ImageDownload`, resumed with
/// `Range`/`If-Range` from its record), judged against the staging space and the avoided links,
/// and verified against the signed manifest. Runs on the updater's thread; `cancel()` (a stop)
/// and the progress callback come from others.
///
/// Memory: the hasher's state, one route judge for the image's host, and one `ImageDownload`
/// at a time (the engine's fixed buffers); nothing grows with the image's size.
final class ImageFetcher: @unchecked Sendable {
    // @unchecked: `imageRoute` is touched only by the updater's thread; `current` is a lock.

    private struct Current {
        var download: ImageDownload?
        var stopped = false
    }

    private let config: AgentConfig.Firmware
    private let client: FirmwareClient
    private let store: FirmwareStore
    private let logger: Logger
    private let wallClock: WallClock
    /// How routes are reached through the proxy (the route that matters is the proxy's).
    private let network: AgentConfig.Network
    /// Where reachability judges routes (`/run/netns/NAME`), for tests; nil: this process's.
    private let reachabilityNamespace: String?
    /// Called with the bytes on disk as they grow, and whether the status is due for them
    /// (at most once a second, and at the end).
    private let onProgress: @Sendable (_ bytes: Int64, _ statusDue: Bool) -> Void
    private let hasher = ImageHasher()
    private let current = Locked(Current())
    /// The route to the image's host, judged when a download starts and while it runs.
    private var imageRoute: (host: String, judge: RouteJudge)?
    /// When the status last heard of the download's progress (the engine's thread).
    private let lastProgressReport = Locked(Instant.now())
    /// The last tenth of the image logged (the log shows the download every 10 %).
    private let loggedTenth = Locked(-1)

    /// A fetcher for `store`'s staging directory through `client`.
    init(
        config: AgentConfig.Firmware, client: FirmwareClient, store: FirmwareStore, logger: Logger, wallClock: WallClock,
        network: AgentConfig.Network, reachabilityNamespace: String?,
        onProgress: @escaping @Sendable (_ bytes: Int64, _ statusDue: Bool) -> Void
    ) {
        self.config = config
        self.client = client
        self.store = store
        self.logger = logger
        self.wallClock = wallClock
        self.network = network
        self.reachabilityNamespace = reachabilityNamespace
        self.onProgress = onProgress
    }

    /// Stops for good: a download in flight is cancelled (its bytes stay for the next start),
    /// none starts afterwards.
    func cancel() {
        let download = current.withLock { current -> ImageDownload? in
            current.stopped = true
            return current.download
        }
        download?.cancel()
    }

    /// Removes the staged image and its resume record.
    func discard() {
        store.discardImage()
        hasher.reset()
    }

    /// The partial image a download continues from: its resume record with a validator, for
    /// this image, and a partial file no longer than the signed size; nil: from zero.
    private func usableResume(fromZero: Bool, manifest: FirmwareManifest) -> ImageResumeRecord? {
        guard !fromZero, var record = ImageResumeRecord.read(from: store.resumeRecordPath),
            record.entityTag != nil || record.lastModified != nil, record.url == manifest.imageURL
        else { return nil }
        var info = stat()
        guard stat(store.partialImagePath, &info) == 0, info.st_size > 0, Int64(info.st_size) <= manifest.size else { return nil }
        record.partialFile = store.partialImagePath
        record.bytesOnDisk = UInt64(info.st_size)
        return record
    }

    /// What the staging directory's file system says about the download now (`StagingSpace`):
    /// the image may not take the last `stagingReserveBytes` (the state, the manifests and the
    /// reports need room too). A `statvfs` that fails decides nothing: the download's own
    /// writes will.
    /// - Returns: the verdict, and the bytes free (for the log).
    func stagingSpace(fromZero: Bool, manifest: FirmwareManifest?) -> (verdict: StagingSpace.Verdict, free: Int64) {
        guard let manifest else { return (.fits, 0) }
        let directory = store.directory + "/staging"
        var space = statvfs()
        guard statvfs(directory, &space) == 0 else { return (.fits, 0) }
        let fileSystem = StagingSpace.FileSystem(
            availableBlocks: UInt64(space.f_bavail), totalBlocks: UInt64(space.f_blocks), blockSize: UInt64(space.f_frsize))
        let resume = usableResume(fromZero: fromZero, manifest: manifest)
        // A partial file that cannot be continued goes first: its space counts as free.
        if resume == nil { store.discardImage() }
        let onDisk = Int64(clamping: resume?.bytesOnDisk ?? 0)
        let verdict = StagingSpace.judge(
            imageSize: manifest.size, onDisk: onDisk, reserve: config.stagingReserveBytes, fileSystem: fileSystem, directory: directory)
        return (verdict, fileSystem.available)
    }

    /// Fetches the image `manifest` names into `staging/image.part`, continuing the bytes on disk
    /// unless `fromZero`; checked every 2 s against the avoided links (it pauses on one).
    /// - Returns: what came of it, for the flow (a pause is `.gateClosed` for the link).
    func download(fromZero: Bool, manifest: FirmwareManifest?) -> UpdateEvent {
        guard let manifest else {
            return .downloadFailed(reason: "the manifest being acted on is missing or refused", permanent: true, serverReached: false)
        }
        let resume = usableResume(fromZero: fromZero, manifest: manifest)
        if resume == nil { store.discardImage() }
        let onDisk = Int64(resume?.bytesOnDisk ?? 0)
        // The bytes already on disk go into the digest now, off the engine's thread.
        guard hasher.rebuild(from: store.partialImagePath, length: UInt64(onDisk)) else {
            store.discardImage()
            return .downloadFailed(reason: "the partial image cannot be read", permanent: false, serverReached: false)
        }
        loggedTenth.withLock { $0 = manifest.size > 0 ? Int(onDisk * 10 / manifest.size) : 0 }
        logger.info(
            onDisk > 0 ? "firmware download continues" : "firmware download starts",
            metadata: ["url": "\(manifest.image)", "from": "\(onDisk)", "size": "\(manifest.size)"])
        let size = manifest.size
        let download = ImageDownload(
            client: client, url: manifest.image, partialFile: store.partialImagePath, recordPath: store.resumeRecordPath,
            maximumSize: UInt64(manifest.size), resume: resume, hasher: hasher,
            progress: { [self] bytes in progressed(Int64(bytes), of: size) })
        let stopped = current.withLock { current -> Bool in
            current.download = download
            return current.stopped
        }
        if stopped { download.cancel() }
        var paused: String?
        let outcome = download.run(every: .seconds(2)) {
            // Every 2 s while it runs: the route may have moved to an avoided link.
            guard paused == nil, let reason = linkGateReason(manifest: manifest) else { return }
            paused = reason
            logger.notice("firmware download pauses: the link is avoided", metadata: ["reason": "\(reason)"])
            download.cancel()
        }
        let stopping = current.withLock { current -> Bool in
            current.download = nil
            return current.stopped
        }
        let image = manifest.imageURL
        switch outcome {
        case .finished:
            return .downloadFinished
        case _ where paused != nil && !stopping:
            // The bytes stay with their resume record: it goes on from there on a good link.
            return .gateClosed(step: .download(fromZero: false), reason: paused ?? "", kind: .link)
        case .answered(let status):
            switch StatusClass(status: status) {
            case .gone:
                return .downloadFailed(reason: "the image \(image) is gone (HTTP \(status))", permanent: true, serverReached: true)
            case let answer where answer.isPermanent:
                return .downloadFailed(reason: "the image \(image) is refused (HTTP \(status))", permanent: true, serverReached: true)
            default:
                return .downloadFailed(reason: "the image \(image) answered HTTP \(status)", permanent: false, serverReached: true)
            }
        case .failed(.failed(let transfer), let reason):
            if case .resourceChanged(let message) = transfer.reason {
                logger.notice("firmware image changed on the server: the manifest is polled first", metadata: ["reason": "\(message)"])
                return .imageChanged(reason: message)
            }
            if case .fileSizeExceeded = transfer.reason {
                return .downloadFailed(
                    reason: "sizeMismatch: the server sends more than the \(manifest.size) bytes signed", permanent: true,
                    serverReached: true)
            }
            if case .certificateVerificationFailed = transfer.reason, case let verdict = wallClock.verdict(), !verdict.isTrusted {
                // A certificate "not yet valid" or "expired" to a wrong clock says nothing about
                // the server: retried without counting against firmware.downloadAttempts.
                return .downloadFailed(reason: "\(reason) (\(verdict.reason))", permanent: false, serverReached: false)
            }
            return .downloadFailed(reason: reason, permanent: false, serverReached: !transfer.isNetworkUnavailable)
        case .failed(_, let reason):
            return .downloadFailed(reason: reason, permanent: false, serverReached: false)
        }
    }

    private func progressed(_ bytes: Int64, of size: Int64) {
        let tenth = size > 0 ? Int(min(bytes, size) * 10 / size) : 0
        if loggedTenth.withLock({ logged in
            defer { logged = max(logged, tenth) }
            return tenth > logged
        }) {
            logger.info("firmware download \(tenth * 10) %", metadata: ["bytes": "\(bytes)", "size": "\(size)"])
        }
        let now = Instant.now()
        let due = lastProgressReport.withLock { last -> Bool in
            guard now.since(last) >= .seconds(1) || bytes == size else { return false }
            last = now
            return true
        }
        onProgress(bytes, due)
    }

    /// Compares the staged image with `manifest` (size, then the SHA-256, fed as the bytes
    /// arrived when it can) and moves it to `staging/image.bin`.
    /// - Parameter id: the boot the installer will run in.
    /// - Returns: `.verified`, with the refusal when it does not match or cannot be moved.
    func verify(manifest: FirmwareManifest?, bootID id: String?) -> UpdateEvent {
        guard let manifest else {
            return .verified(FirmwareRefusal(kind: .badManifest, message: "the manifest being acted on is missing or refused"), bootID: id)
        }
        let verified = access(store.imagePath, F_OK) == 0
        let path = verified ? store.imagePath : store.partialImagePath
        var info = stat()
        guard stat(path, &info) == 0 else {
            return .verified(FirmwareRefusal(kind: .sizeMismatch, message: "the image is not in \(path)"), bootID: id)
        }
        guard Int64(info.st_size) == manifest.size else {
            return .verified(
                FirmwareRefusal(kind: .sizeMismatch, message: "the image is \(info.st_size) bytes, the manifest signed \(manifest.size)"),
                bootID: id)
        }
        let started = Instant.now()
        var digest: [UInt8]
        if !verified, hasher.count == UInt64(info.st_size) {
            digest = hasher.finish()  // hashed while it was written
        } else {
            guard hasher.rebuild(from: path, length: UInt64(info.st_size)) else {
                return .verified(FirmwareRefusal(kind: .stagingFailed, message: "the image \(path) cannot be read back"), bootID: id)
            }
            digest = hasher.finish()
        }
        guard digest == manifest.sha256 else {
            return .verified(
                FirmwareRefusal(
                    kind: .hashMismatch, message: "the image's SHA-256 is \(hex(digest)), the manifest signed \(hex(manifest.sha256))"),
                bootID: id)
        }
        if !verified {
            // Verified: the move to the final name is a rename on the same file system.
            guard rename(store.partialImagePath, store.imagePath) == 0 else {
                return .verified(
                    FirmwareRefusal(kind: .stagingFailed, message: "the image cannot be moved into place: \(errnoMessage(errno))"),
                    bootID: id)
            }
            unlink(store.resumeRecordPath)
            if let failure = syncDirectory(directoryPart(of: store.imagePath)) {
                // The rename is done; a power cut may yet take it back (then the download goes on).
                logger.warning(
                    "firmware staging directory not synced", metadata: ["reason": "\(failure.operation): \(errnoMessage(failure.code))"])
            }
        }
        logger.info(
            "firmware image verified",
            metadata: ["sha256": "\(hex(digest))", "took": "\(Instant.now().since(started).totalNanoseconds / 1_000_000) ms"])
        return .verified(nil, bootID: id)
    }

    /// Why the image may not be fetched now (the route runs over an avoided interface), or nil.
    func linkGateReason(manifest: FirmwareManifest?) -> String? {
        guard !config.avoidInterfaces.isEmpty, let manifest, let image = AbsoluteURL(manifest.image.absoluteString),
            let host = network.routeHost(for: image)
        else { return nil }
        let judge: RouteJudge
        if let known = imageRoute, known.host == host {
            judge = known.judge
        } else {
            guard let made = try? RouteJudge(host: host, networkNamespace: reachabilityNamespace) else { return nil }
            made.resolveHost()
            imageRoute = (host, made)
            judge = made
        }
        guard case .reachable(let connection) = judge.evaluate(addressesChanged: {}).status,
            config.avoidInterfaces.contains(connection.interfaceType.rawValue)
        else {
            return nil
        }
        return "the route to \(host) runs over \(connection.interfaceName) (\(connection.interfaceType.rawValue)), "
            + "in firmware.avoidInterfaces"
    }
}
