import Dispatch
import HTTPTypes
import TinyFire

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// What a backend says when asked for firmware.
public enum FirmwareSourceAnswer: Sendable {
    /// The server answered: nothing new (a 304, or an offer already seen). A sync.
    case unchanged
    /// The server answered with an offer the device has not seen: verified and read, or
    /// refused with the reason. A sync.
    case offer(FirmwareOffer)
    /// The server answered, but with no offer (no manifest published: 404). Not a sync.
    case nothing(String)
    /// The server was not reached, or the offer could not be fetched whole. Not a sync.
    case unreachable(String)
}

/// An update offered by a backend.
public struct FirmwareOffer: Sendable {
    /// The offer's identity: the flow acts on each at most once.
    public var digest: String
    /// What to install, or why it is refused (signature, syntax).
    public var manifest: Result<FirmwareManifest, FirmwareRefusal>
    /// Who vouched for it (a key fingerprint), for the log.
    public var vouchedBy: String?

    /// An offer.
    public init(digest: String, manifest: Result<FirmwareManifest, FirmwareRefusal>, vouchedBy: String?) {
        self.digest = digest
        self.manifest = manifest
        self.vouchedBy = vouchedBy
    }
}

/// A status event for the backend: where an update stands.
public struct FirmwareReport: Sendable {
    /// The update.
    public var update: UpdateRecord
    /// Image bytes on disk / size (0 to 1).
    public var progress: Double
    /// When.
    public var time: Date
}

/// A firmware backend, seen from the flow: asked for offers, told what happened. The flow, the
/// download (an HTTP image URL with size and SHA-256 from the offer), the commands and the
/// state file do not depend on it: a hawkBit DDI or Mender source answers the same three
/// questions from its own protocol (its deployment becomes the offer, its feedback URL gets
/// the reports).
public protocol FirmwareSource: Sendable {
    /// Asks the backend once (blocking the updater's thread).
    /// - Parameter known: whether an offer's digest was acted on already (the source skips
    ///   fetching more for it, a signature say).
    /// - Returns: the answer.
    func poll(known: (String) -> Bool) -> FirmwareSourceAnswer
    /// The offer an update under way follows, again after a restart (nil when it cannot be
    /// trusted any more: the update then fails).
    /// - Parameter digest: the offer's digest.
    func restore(digest: String) -> FirmwareManifest?
    /// Drops what was kept for offers other than `digest` (the one an update follows, if any).
    func forget(except digest: String?)
    /// Makes the next poll fetch the offer whole again, even when the server says it has not
    /// changed (a refusal that depends on the moment: an expiry, an untrusted clock).
    func checkAgain()
    /// Tells the backend where an update stands; durable from the return on (a repeat after
    /// a crash carries the same identity).
    func report(_ report: FirmwareReport)
    /// Starts background delivery of reports.
    func start()
    /// Stops it; later reports wait on disk for the next start.
    func close()
    /// Delivers the queued reports now, in order, until one fails (background delivery off:
    /// the one-shot cycle); blocks the calling thread.
    /// - Returns: reports still queued.
    func flushReports() -> Int
}

/// fire-agent's own backend: a manifest and its detached signature at two URLs, polled with
/// `If-None-Match`; reports POSTed as JSON to a status URL through an offline queue of their
/// own (`firmware.directory/reports`), each with an Idempotency-Key.
public final class SignedManifestSource: FirmwareSource, @unchecked Sendable {
    // @unchecked: `entityTag` is touched only by the updater's thread (`poll`).
    private let config: AgentConfig.Firmware
    private let deviceID: String
    private let session: Session
    private let store: FirmwareStore
    private let logger: Logger
    private let reports: OfflineQueue?
    private var entityTag: String?

    /// The source for `config`.
    /// - Parameters:
    ///   - config: the firmware section.
    ///   - deviceID: the device, in each report.
    ///   - session: the firmware session.
    ///   - store: where the manifest acted on is kept.
    ///   - reachability: wakes the report queue when the route returns.
    ///   - logger: refusals, queue failures.
    /// - Throws: `AgentError` when the report queue cannot be opened.
    public init(
        config: AgentConfig.Firmware, deviceID: String, session: Session, store: FirmwareStore,
        reachability: NetworkReachabilityManager?, logger: Logger
    ) throws(AgentError) {
        self.config = config
        self.deviceID = deviceID
        self.session = session
        self.store = store
        self.logger = logger
        guard config.statusURL != nil else {
            reports = nil
            return
        }
        var queueConfiguration = OfflineQueue.Configuration(maxRecords: 1000, maxBytes: 4 << 20)
        queueConfiguration.backoff = OfflineQueue.Backoff(initial: config.retryInitial, maximum: config.retryMaximum)
        queueConfiguration.disposition = { status in
            if (200..<300).contains(status) { return .delivered }
            // The status server refuses the event for good: kept no longer.
            if (400..<500).contains(status) && status != 408 && status != 429 { return .discard }
            return .retry
        }
        do {
            reports = try OfflineQueue(
                directory: config.directory + "/reports", configuration: queueConfiguration, session: session,
                reachability: reachability, logger: logger.swiftLogger)
        } catch {
            throw AgentError(description: "firmware report queue \(config.directory)/reports: \(error)")
        }
    }

    /// Starts delivering queued reports.
    public func start() { reports?.startDelivery() }

    /// Removes kept manifests other than `digest`'s.
    /// - Parameter digest: the one an update follows, if any.
    public func forget(except digest: String?) { store.forgetManifests(except: digest) }

    /// Forgets the ETag, so the next poll reads the manifest whole.
    public func checkAgain() { entityTag = nil }

    /// Stops delivering reports and closes their queue.
    public func close() { reports?.close() }

    /// Delivers the queued reports once, in order, until one fails.
    /// - Returns: reports still queued.
    public func flushReports() -> Int {
        guard let reports else { return 0 }
        let done = DispatchSemaphore(value: 0)
        let remaining = SendableBox<Int>(0)
        reports.flush { result in
            remaining.value = (try? result.get().remaining) ?? reports.statistics.records
            done.signal()
        }
        done.wait()
        return remaining.value
    }

    /// GETs the manifest (`If-None-Match` with the last ETag); a new one's signature is
    /// fetched and verified, the manifest read and kept under its digest.
    /// - Parameter known: whether a digest was acted on already (then no signature is fetched).
    /// - Returns: the answer.
    public func poll(known: (String) -> Bool) -> FirmwareSourceAnswer {
        var headers: HTTPHeaders = ["Accept-Encoding": "identity"]
        if let entityTag { headers.update(name: "If-None-Match", value: entityTag) }
        let response = fetch(config.manifestURL, headers: headers)
        guard let status = response.response?.status.code else {
            return .unreachable(response.error.map { "\($0)" } ?? "no response")
        }
        if status == 304 { return .unchanged }
        guard (200..<300).contains(status), case .success(let data) = response.result else {
            if status == 404 || status == 410 { return .nothing("no manifest at \(config.manifestURL) (HTTP \(status))") }
            if (200..<300).contains(status), let error = response.error { return .unreachable("the manifest: \(Self.why(error))") }
            return .unreachable("HTTP \(status) for the manifest")
        }
        let bytes = [UInt8](data)
        let digest = hex(SHA256Hasher.digest(of: bytes))
        entityTag = response.response.flatMap { Self.reliableEntityTag($0.headerFields) }
        if known(digest) { return .unchanged }
        let answer = fetch(config.signatureURL, headers: ["Accept-Encoding": "identity"])
        guard let signatureStatus = answer.response?.status.code else {
            // Not the manifest's fault: fetched again at the next poll.
            entityTag = nil
            return .unreachable("signature not fetched: \(answer.error.map { "\($0)" } ?? "no response")")
        }
        guard (200..<300).contains(signatureStatus), case .success(let signature) = answer.result else {
            // Fetched whole again next time: the signature may yet be published.
            entityTag = nil
            let refusal = FirmwareRefusal(
                kind: .badSignature, message: "the signature \(config.signatureURL) answered HTTP \(signatureStatus)")
            return .offer(FirmwareOffer(digest: digest, manifest: .failure(refusal), vouchedBy: nil))
        }
        do throws(FirmwareRefusal) {
            let key = try ManifestSignature.verify([UInt8](signature), of: bytes, keys: config.keys)
            let manifest = try FirmwareManifest.parse(bytes, from: config.manifestURL)
            do {
                try store.saveManifest(bytes, signature: [UInt8](signature), digest: digest)
            } catch {
                entityTag = nil
                return .unreachable("the manifest cannot be kept: \(error)")
            }
            return .offer(FirmwareOffer(digest: digest, manifest: .success(manifest), vouchedBy: key.fingerprint))
        } catch {
            if error.kind == .badSignature { entityTag = nil }
            return .offer(FirmwareOffer(digest: digest, manifest: .failure(error), vouchedBy: nil))
        }
    }

    /// The response's ETag if it can tell the next version apart, else nil (the next poll then
    /// fetches the manifest whole; its digest still spares the signature).
    ///
    /// A static server derives its ETag from the file's modification second and size (nginx:
    /// `"mtime-size"`), so a manifest replaced within the same second by one of the same length
    /// keeps the tag, and `If-None-Match` would hide the new one for good. As RFC 9110 §8.8.2.2
    /// does for `Last-Modified`, a tag is trusted only when the response's `Last-Modified` is at
    /// least 60 s before its `Date`; without both headers it is taken as given.
    static func reliableEntityTag(_ fields: HTTPFields) -> String? {
        guard let tag = fields[.eTag] else { return nil }
        guard let modified = fields[.lastModified].flatMap(UploadVerdict.parseHTTPDate),
            let date = fields[.date].flatMap(UploadVerdict.parseHTTPDate)
        else { return tag }
        return date.timeIntervalSince(modified) >= 60 ? tag : nil
    }

    /// The manifest kept for `digest`, verified again against the configured keys.
    /// - Parameter digest: the update's manifest digest.
    /// - Returns: the manifest, or nil (missing, changed, or no longer valid by any key).
    public func restore(digest: String) -> FirmwareManifest? {
        guard let kept = store.loadManifest(digest: digest) else {
            logger.error("firmware manifest of the update under way is missing")
            return nil
        }
        do throws(FirmwareRefusal) {
            // A file on disk is not trusted more than the network: verified again.
            guard hex(SHA256Hasher.digest(of: kept.manifest)) == digest else {
                throw FirmwareRefusal(kind: .badManifest, message: "the kept manifest is not the one the update follows")
            }
            try ManifestSignature.verify(kept.signature, of: kept.manifest, keys: config.keys)
            return try FirmwareManifest.parse(kept.manifest, from: config.manifestURL)
        } catch {
            logger.error("firmware manifest kept on disk refused", metadata: ["reason": "\(error)"])
            return nil
        }
    }

    /// POSTs `{device, manifest, version, fromVersion, state, progress, reason, time}` to the
    /// status URL through the report queue; the Idempotency-Key names the manifest and the
    /// step, so a report repeated after a crash is the same report.
    public func report(_ report: FirmwareReport) {
        guard let url = config.statusURL, let reports else { return }
        let update = report.update
        var members: [(String, StatusJSON)] = [
            ("device", .string(deviceID)), ("manifest", .string(update.manifestDigest)), ("version", .string(update.version)),
            ("state", .string(update.phase.rawValue)), ("progress", .number((min(report.progress, 1) * 1000).rounded() / 1000)),
            ("time", .date(WallTime(report.time))),
        ]
        if let from = update.fromVersion { members.append(("fromVersion", .string(from))) }
        if let reason = update.reason { members.append(("reason", .string(reason))) }
        guard var request = try? URLRequest(url: url, method: .post) else {
            logger.warning("firmware: status report not queued: \(url) is not a URL Foundation reads")
            return
        }
        request.headers.update(name: "Content-Type", value: "application/json")
        var key = "fw-\(update.manifestDigest.prefix(16))-\(update.phase.rawValue)-\(update.freshDownloads)"
        // Reports within a phase (a health-check attempt, a wait) differ by their note: a key of
        // their own, still the same when repeated after a crash.
        if let reason = update.reason, update.phase != .failed {
            key += "-" + String(SpoolProgressSlots.checksum(reason) & 0xffff_ffff, radix: 16)
        }
        request.headers.update(name: OfflineQueue.idempotencyKeyHeader, value: key)
        request.httpBody = Data(StatusJSON.object(members).compactText.utf8)
        do {
            try reports.enqueue(request)
        } catch {
            logger.error("firmware report not queued", metadata: ["reason": "\(error)"])
        }
    }

    /// The body of a GET (bounded by the session's in-memory limit), blocking this thread.
    /// A failed manifest or signature fetch in words: too large, or too slow.
    static func why(_ error: TinyFireError) -> String {
        let text = "\(error)"
        if text.contains("in-memory limit") { return "larger than \(FirmwareManifest.maximumBytes / 1024) KiB (\(text))" }
        return text
    }

    /// GETs `url` whole within `firmware.manifestTimeout`, at most 64 KiB (the session's
    /// in-memory limit; a larger `Content-Length` is refused before the body).
    private func fetch(_ url: AbsoluteURL, headers: HTTPHeaders) -> DataResponse<Data, TinyFireError> {
        let box = SendableBox<DataResponse<Data, TinyFireError>?>(nil)
        let done = DispatchSemaphore(value: 0)
        var request: URLRequest
        do {
            request = try URLRequest(url: url, method: .get, headers: headers)
        } catch {
            let failure = (error as? TinyFireError) ?? .invalidURL(url: url.absoluteString, reason: "not a URL")
            return DataResponse(request: nil, response: nil, data: nil, metrics: nil, serializationDuration: 0, result: .failure(failure))
        }
        request.timeoutInterval = Double(config.manifestTimeout.components.seconds)
        session.request(request).responseData(queue: .global(), emptyResponseCodes: [204, 304]) { response in
            box.value = response
            done.signal()
        }
        done.wait()
        guard let response = box.value else {
            return DataResponse(
                request: nil, response: nil, data: nil, metrics: nil, serializationDuration: 0, result: .failure(.explicitlyCancelled))
        }
        return response
    }
}
