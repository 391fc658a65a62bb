import HTTPTypes
import TinyFireCore

/// What a backend says when asked for firmware.
package enum FirmwareSourceAnswer: Sendable {
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
package struct FirmwareOffer: Sendable {
    /// The offer's identity: the flow acts on each at most once.
    package var digest: String
    /// What to install, or why it is refused (signature, syntax).
    package var manifest: Result<FirmwareManifest, FirmwareRefusal>
    /// Who vouched for it (a key fingerprint), for the log.
    package var vouchedBy: String?

    /// An offer.
    package init(digest: String, manifest: Result<FirmwareManifest, FirmwareRefusal>, vouchedBy: String?) {
        self.digest = digest
        self.manifest = manifest
        self.vouchedBy = vouchedBy
    }
}

/// A status event for the backend: where an update stands.
package struct FirmwareReport: Sendable {
    /// The update.
    package var update: UpdateRecord
    /// Image bytes on disk / size (0 to 1).
    package var progress: Double
    /// When.
    package var time: WallTime
}

/// A firmware backend, seen from the flow: asked for offers, told what happened. The flow, the
/// download (an HTTP image URL with size and SHA-256 from the offer), the commands and the
/// state file do not depend on it: a hawkBit DDI or Mender source answers the same three
/// questions from its own protocol (its deployment becomes the offer, its feedback URL gets
/// the reports).
package protocol FirmwareSource: AnyObject, Sendable {
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
    /// - Parameter network: what reachability says about the route to the server now.
    func start(network: OfflineQueueReplay.Network)
    /// Tells report delivery what reachability says now (a route back sends at once).
    func network(_ network: OfflineQueueReplay.Network)
    /// Stops it; later reports wait on disk for the next start.
    func close()
    /// Delivers the queued reports now, in order, until one fails (background delivery off:
    /// the one-shot cycle); blocks the calling thread.
    /// - Returns: reports still queued.
    func flushReports() -> Int
}

/// fire-agent's own backend: a manifest and its detached signature at two URLs, polled with
/// `If-None-Match`; reports POSTed as JSON to a status URL through an offline queue of their
/// own (`firmware.directory/reports`, the core's `DeliveryQueue`), each with an Idempotency-Key.
///
/// Memory: a manifest and its signature while a poll reads them (64 KiB and 4 KiB at most),
/// the report queue's index (at most 1,000 reports, 4 MiB on disk).
package final class SignedManifestSource: FirmwareSource, @unchecked Sendable {
    // @unchecked: `entityTag` is touched only by the updater's thread (`poll`).
    private let config: AgentConfig.Firmware
    private let deviceID: String
    private let client: FirmwareClient
    private let store: FirmwareStore
    private let logger: Logger
    private let reports: DeliveryQueue?
    private var entityTag: String?

    /// Reports kept at most; past them the oldest go.
    static let maximumReports = 1000

    /// The source for `config`.
    /// - Parameters:
    ///   - config: the firmware section.
    ///   - deviceID: the device, in each report.
    ///   - client: sends the polls and the reports.
    ///   - store: where the manifest acted on is kept.
    ///   - logger: refusals, queue failures.
    /// - Throws: `AgentError` when the report queue cannot be opened.
    package init(
        config: AgentConfig.Firmware, deviceID: String, client: FirmwareClient, store: FirmwareStore, logger: Logger
    ) throws(AgentError) {
        self.config = config
        self.deviceID = deviceID
        self.client = client
        self.store = store
        self.logger = logger
        guard let statusURL = config.statusURL else {
            reports = nil
            return
        }
        let directory = config.directory + "/reports"
        let store: OfflineQueueStore
        do throws(OfflineQueueError) {
            store = try OfflineQueueStore(
                directory: directory,
                limits: .init(
                    maxRecords: Self.maximumReports, maxBytes: 4 << 20, dropOldest: true, segmentBytes: 1 << 20,
                    cursorSyncInterval: .seconds(1)),
                logger: logger.output)
        } catch {
            throw AgentError(description: "firmware report queue \(directory): \(error.description)")
        }
        let settings = QueueDeliverySettings(
            backoff: QueueBackoff(initial: config.retryInitial, maximum: config.retryMaximum),
            disposition: { status in
                let answer = StatusClass(status: status)
                if answer == .success { return .delivered }
                // The status server refuses the event for good: kept no longer.
                return answer.isPermanent ? .discard : .retry
            }, judge: nil, deadLetterDirectory: nil, maxConcurrentDeliveries: 1, inlineBodyLimit: 64 << 10)
        do throws(OfflineQueueError) {
            reports = try DeliveryQueue(
                store: store, settings: settings, sender: client.queueSender(for: statusURL), logger: logger.output,
                newKey: newIdempotencyKey, onEvent: { _ in }, loop: client.engine.loop)
        } catch {
            store.close()
            throw AgentError(description: "firmware report queue \(directory): \(error.description)")
        }
    }

    /// Starts delivering queued reports.
    package func start(network: OfflineQueueReplay.Network) { reports?.start(network: network) }

    /// Tells report delivery what reachability says now.
    package func network(_ network: OfflineQueueReplay.Network) { reports?.network(network) }

    /// Removes kept manifests other than `digest`'s.
    /// - Parameter digest: the one an update follows, if any.
    package func forget(except digest: String?) { store.forgetManifests(except: digest) }

    /// Forgets the ETag, so the next poll reads the manifest whole.
    package func checkAgain() { entityTag = nil }

    /// Stops delivering reports and closes their queue.
    package func close() { reports?.close() }

    /// Delivers the queued reports once, in order, until one fails.
    /// - Returns: reports still queued.
    package func flushReports() -> Int {
        guard let reports else { return 0 }
        let outcome = ConditionLocked<Result<QueueFlushOutcome, OfflineQueueError>?>(nil)
        reports.flush { result in outcome.withLock { $0 = result } }
        switch outcome.wait(until: { $0 }) {
        case .success(let flushed): return flushed.remaining
        case .failure: return reports.store.count
        }
    }

    /// GETs the manifest (`If-None-Match` with the last ETag); a new one's signature is
    /// fetched and verified, the manifest read and kept under its digest.
    /// - Parameter known: whether a digest was acted on already (then no signature is fetched).
    /// - Returns: the answer.
    package func poll(known: (String) -> Bool) -> FirmwareSourceAnswer {
        var headers = HTTPHeaders()
        if let entityTag { headers.update(name: "If-None-Match", value: entityTag) }
        let answer = fetch(config.manifestURL, headers: headers, limit: FirmwareManifest.maximumBytes)
        guard case .answered(let status, let fields, let bytes) = answer else {
            if case .failed(let reason, let status) = answer {
                // A body that failed after a 2xx head: the manifest is the problem (size, speed).
                if let status, (200..<300).contains(status) { return .unreachable("the manifest: \(Self.why(reason))") }
                return .unreachable(reason)
            }
            return .unreachable("no response")
        }
        if status == 304 { return .unchanged }
        guard (200..<300).contains(status) else {
            if StatusClass(status: status) == .gone { return .nothing("no manifest at \(config.manifestURL) (HTTP \(status))") }
            return .unreachable("HTTP \(status) for the manifest")
        }
        let digest = hex(SHA256Hasher.digest(of: bytes))
        entityTag = Self.reliableEntityTag(fields)
        if known(digest) { return .unchanged }
        // Read up to the manifest's bound: a larger signature than any key makes is refused by
        // `ManifestSignature.verify` with its size, not taken for a failed fetch.
        let signed = fetch(config.signatureURL, headers: HTTPHeaders(), limit: FirmwareManifest.maximumBytes)
        guard case .answered(let signatureStatus, _, let signature) = signed else {
            // Not the manifest's fault: fetched again at the next poll.
            entityTag = nil
            if case .failed(let reason, _) = signed { return .unreachable("signature not fetched: \(reason)") }
            return .unreachable("signature not fetched: no response")
        }
        guard (200..<300).contains(signatureStatus) else {
            // Fetched whole again next time: the signature may yet be published.
            entityTag = nil
            let refusal = FirmwareRefusal(
                kind: .badSignature, message: "the signature \(config.signatureURL) answered HTTP \(signatureStatus)")
            return .offer(FirmwareOffer(digest: digest, manifest: .failure(refusal), vouchedBy: nil))
        }
        do throws(FirmwareRefusal) {
            let key = try ManifestSignature.verify(signature, of: bytes, keys: config.keys)
            let manifest = try FirmwareManifest.parse(bytes, from: config.manifestURL)
            do throws(AgentError) {
                try store.saveManifest(bytes, signature: signature, digest: digest)
            } catch {
                entityTag = nil
                return .unreachable("the manifest cannot be kept: \(error.description)")
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
        guard let modified = fields[.lastModified].flatMap(HTTPDate.secondsSince1970),
            let date = fields[.date].flatMap(HTTPDate.secondsSince1970)
        else { return tag }
        return date - modified >= 60 ? tag : nil
    }

    /// The manifest kept for `digest`, verified again against the configured keys.
    /// - Parameter digest: the update's manifest digest.
    /// - Returns: the manifest, or nil (missing, changed, or no longer valid by any key).
    package func restore(digest: String) -> FirmwareManifest? {
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
    package func report(_ report: FirmwareReport) {
        guard let url = config.statusURL, let reports else { return }
        let update = report.update
        var members: [(String, StatusJSON)] = [
            ("device", .string(deviceID)), ("manifest", .string(update.manifestDigest)), ("version", .string(update.version)),
            ("state", .string(update.phase.rawValue)), ("progress", .number((min(report.progress, 1) * 1000).rounded() / 1000)),
            ("time", .date(report.time)),
        ]
        if let from = update.fromVersion { members.append(("fromVersion", .string(from))) }
        if let reason = update.reason { members.append(("reason", .string(reason))) }
        var key = "fw-\(update.manifestDigest.prefix(16))-\(update.phase.rawValue)-\(update.freshDownloads)"
        // Reports within a phase (a health-check attempt, a wait) differ by their note: a key of
        // their own, still the same when repeated after a crash.
        if let reason = update.reason, update.phase != .failed {
            key += "-" + String(SpoolProgressSlots.checksum(reason) & 0xffff_ffff, radix: 16)
        }
        var headers = HTTPHeaders()
        headers.update(name: "Content-Type", value: "application/json")
        headers.update(name: DeliveryQueue.idempotencyKeyHeader, value: key)
        let body = Array(StatusJSON.object(members).compactText.utf8)
        do throws(OfflineQueueError) {
            _ = try reports.enqueue(
                QueueSubmission(method: "POST", url: url.absoluteString, headers: headers, body: [.memory(ByteArrayBody(body))]))
        } catch {
            logger.error("firmware report not queued", metadata: ["reason": "\(error.description)"])
        }
    }

    /// A failed manifest fetch in words: too large, or the failure as it is.
    static func why(_ reason: String) -> String {
        if reason.firstRange(ofASCII: "in-memory limit") != nil {
            return "larger than \(FirmwareManifest.maximumBytes / 1024) KiB (\(reason))"
        }
        return reason
    }

    /// GETs `url` whole within `firmware.manifestTimeout`, at most `limit` bytes (a larger
    /// `Content-Length` is refused before the body).
    private func fetch(_ url: AbsoluteURL, headers: HTTPHeaders, limit: Int) -> FirmwareClient.Fetched {
        client.fetch(url, headers: headers, limit: limit, timeout: config.manifestTimeout)
    }
}
