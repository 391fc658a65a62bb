import TinyFireCore

/// Where one firmware update stands. The flow only moves forward:
///
/// ```
/// idle → downloading → verifying → installing → installed → confirming → done
///            ↓            ↓            ↓            ↓            ↓  ↘
///          failed       failed       failed       failed       failed  rollingBack → failed
///            ↓            ↓
///        superseded   superseded
/// ```
///
/// `installed` waits for the booted version to be the new one (after a reboot, or at once for
/// an installer that needs none); `confirming` runs the health check (`firmware.healthCheck`)
/// and waits for a successful sync with the server before the commit command runs; a check
/// that fails its attempts, or a confirmation that does not end within `firmware.confirmTimeout`,
/// goes to `rollingBack`: the rollback command runs (at most once), then the reboot command,
/// and the next boot shows the old version (`failed`, "rolled back: …").
package enum UpdatePhase: String, Sendable, CaseIterable {
    /// No update under way.
    case idle
    /// The image is being fetched into the staging directory.
    case downloading
    /// Its size and SHA-256 are being compared with the signed manifest's.
    case verifying
    /// The install command is running (it runs at most once per manifest).
    case installing
    /// Installed; waiting for the new version to be the booted one.
    case installed
    /// The new version runs; waiting for a successful sync before committing it.
    case confirming
    /// The new version failed its health check or its confirmation deadline: the rollback
    /// command runs, then the reboot into the old version.
    case rollingBack
    /// Committed.
    case done
    /// Given up, with a reason.
    case failed
    /// Replaced mid-way by a manifest of a higher version: not a failure of its release (only
    /// ever reported; the successor's record is what the state keeps).
    case superseded

    /// No update under way: idle, or ended (done, failed, superseded).
    package var isTerminal: Bool { [.idle, .done, .failed, .superseded].contains(self) }
}

/// A manifest the flow acted on: it reached the installer, `done` or `failed` after it was
/// accepted. Never acted on again.
package struct HistoryEntry: Sendable, Equatable {
    /// SHA-256 (hex) of the manifest's bytes.
    package var digest: String
    /// Its version ("" when unknown: an entry from a state file written before versions were kept).
    package var version: String
    /// The installer was started for it.
    package var installerRan: Bool

    /// An entry.
    package init(digest: String, version: String, installerRan: Bool) {
        self.digest = digest
        self.version = version
        self.installerRan = installerRan
    }
}

/// One update: the manifest it follows and where it stands (persisted in the state file).
package struct UpdateRecord: Sendable, Equatable {
    /// The phase.
    package var phase: UpdatePhase
    /// SHA-256 (hex) of the manifest's exact bytes: the update's identity.
    package var manifestDigest: String
    /// The version offered ("" when the manifest could not be read).
    package var version: String
    /// The version running when it was offered.
    package var fromVersion: String?
    /// The image's size from the manifest.
    package var size: Int64
    /// The boot ID when the installer started (a different one later means a reboot).
    package var bootID: String?
    /// Why it failed (`kind: message`), or a note (an installer whose outcome is unknown).
    package var reason: String?
    /// Downloads started over from zero after the image did not match.
    package var freshDownloads: Int
    /// Download attempts that failed with the server reachable.
    package var failedAttempts: Int
    /// When the phase was entered.
    package var since: WallTime
    /// Health-check attempts that failed since the new version runs.
    package var healthAttempts: Int = 0
    /// The health check passed (or none is configured) in `confirming`.
    package var healthy: Bool = false
    /// Time spent confirming, accounted in boot time (`CLOCK_BOOTTIME`, which wall-clock
    /// jumps do not move) across the boots of the new version, in milliseconds.
    package var confirmElapsedMilliseconds: Int64 = 0
    /// The boot, and its boot time in milliseconds, of the last confirmation accounting.
    package var confirmMark: ConfirmMark?
    /// The rollback command was started (it runs at most once per update).
    package var rollbackRan: Bool = false
    /// The boot the rollback command ran in (a different one later means the reboot happened).
    package var rollbackBootID: String?

    /// A record in `phase` for `digest`.
    package init(phase: UpdatePhase, manifestDigest: String, version: String, fromVersion: String?, size: Int64, since: WallTime) {
        self.phase = phase
        self.manifestDigest = manifestDigest
        self.version = version
        self.fromVersion = fromVersion
        self.size = size
        self.freshDownloads = 0
        self.failedAttempts = 0
        self.since = since
    }
}

/// What the firmware flow keeps across restarts (`firmware/state.json`).
package struct FirmwareState: Sendable, Equatable {
    /// The current or last update.
    package var update: UpdateRecord?
    /// The highest version ever committed on this device (the rollback floor), with the
    /// running version as a floor too.
    package var highestAccepted: String?
    /// Manifests acted on (the installer ran, or the update reached `done` or `failed`): never
    /// acted on again, whatever the server answers later. No answer evicts one: past
    /// `historyLimit` entries only those the rollback floor refuses anyway (a version not above
    /// `highestAccepted`, with downgrades off) are dropped, oldest first; when none can be, new
    /// offers are refused (`historyFull`) until an operator clears the state. Memory: at most
    /// `historyLimit` entries (about 120 bytes each in `state.json`).
    package var history: [HistoryEntry]
    /// Digests of manifests refused before anything was done (a bad manifest, another device
    /// type, not newer): remembered only so that each is reported once; the newest
    /// `refusalLimit`. Forgetting one costs a second report, never an install: the same checks
    /// refuse it again.
    package var refused: [String]

    /// Entries of `history` kept.
    package static let historyLimit = 512
    /// Entries of `refused` kept.
    package static let refusalLimit = 64

    /// Nothing yet.
    package init() {
        update = nil
        highestAccepted = nil
        history = []
        refused = []
    }

    /// Whether the manifest `digest` was acted on or refused already.
    package func remembers(_ digest: String) -> Bool {
        refused.contains(digest) || history.contains { $0.digest == digest }
    }

    /// Whether the installer was started for `digest`.
    package func installerRan(_ digest: String) -> Bool {
        history.contains { $0.digest == digest && $0.installerRan }
    }
}

/// Where the confirmation time was last accounted: a boot and its boot time.
package struct ConfirmMark: Sendable, Equatable {
    /// The boot ID.
    package var bootID: String
    /// `CLOCK_BOOTTIME` then, in milliseconds.
    package var uptimeMilliseconds: Int64

    /// A mark.
    package init(bootID: String, uptimeMilliseconds: Int64) {
        self.bootID = bootID
        self.uptimeMilliseconds = uptimeMilliseconds
    }
}

/// How a new version is confirmed before its commit (`firmware.healthCheck`,
/// `firmware.rollback`, `firmware.confirmTimeout`).
package struct ConfirmPolicy: Sendable, Equatable {
    /// A health check is configured: it must pass before the commit.
    package var healthCheck: Bool
    /// Attempts the check gets before the new version is rolled back.
    package var healthAttempts: Int
    /// A rollback command is configured.
    package var rollback: Bool
    /// Confirmation (check passed and a sync) must end within this, or the new version is
    /// rolled back; nil: no deadline.
    package var timeout: Duration?

    /// A policy; the default is today's: commit after a sync, no check, no deadline.
    package init(healthCheck: Bool = false, healthAttempts: Int = 1, rollback: Bool = false, timeout: Duration? = nil) {
        self.healthCheck = healthCheck
        self.healthAttempts = max(1, healthAttempts)
        self.rollback = rollback
        self.timeout = timeout
    }
}

/// What happened, fed to `UpdateFlow`.
package enum UpdateEvent: Sendable, Equatable {
    /// The server offers a manifest: read and checked (`refusal` nil) or refused.
    case offered(digest: String, manifest: FirmwareManifest?, refusal: FirmwareRefusal?, running: SemanticVersion?)
    /// The image is complete in the staging directory.
    case downloadFinished
    /// A resumed download found that the server's image is another file than the partial one
    /// (If-Range answered with the whole of a new version): nothing of it was kept.
    case imageChanged(reason: String)
    /// The poll asked for with `.pollFirst` ended (whatever it found; offers were fed first).
    case polled
    /// The download failed: for good (404, 410, the image larger than signed, no space), or
    /// for now (`permanent` false: retried with backoff, bounded when the server was
    /// reachable).
    case downloadFailed(reason: String, permanent: Bool, serverReached: Bool)
    /// The image was compared with the manifest: nil when it matches. `bootID` is the boot
    /// the installer will run in.
    case verified(FirmwareRefusal?, bootID: String?)
    /// The installer ended; `rebootRequired`: the new version runs only after a reboot (the
    /// config says so, or the installer's exit code).
    case installerExited(success: Bool, rebootRequired: Bool, detail: String)
    /// The agent looked at what runs: at start, and while `installed`.
    case booted(version: SemanticVersion?, bootID: String?)
    /// A successful sync with the server since the new version runs.
    case synced
    /// The commit command ended.
    case commitExited(success: Bool, detail: String)
    /// The health check ended (an attempt); `detail` is its result and the end of its output.
    case healthChecked(passed: Bool, detail: String)
    /// The boot time now, while confirming: accounts the confirmation time and checks the
    /// deadline.
    case confirmClock(bootID: String?, uptime: Duration)
    /// The rollback command ended.
    case rollbackExited(success: Bool, detail: String)
    /// The install gate (`firmware.installWindow`, `firmware.inhibitFile`) is open: the
    /// verified image may be installed now.
    case installAllowed
    /// A gate holds `step` (the link, the staging space, the install window, the inhibit lock):
    /// the flow arms its timer to ask again and notes `waiting: reason` (reported once per reason).
    case gateClosed(step: UpdateEffect, reason: String, kind: GateKind)
    /// The gate a step asked is open: the step goes on now; a hold ends, its note cleared.
    case gateOpened
    /// A timer the flow armed (`UpdateEffect.arm`) fired.
    case timerFired(UpdateTimer)
}

/// What the flow asks its host to do, in order: report before persisting (a report repeated
/// after a crash has the same Idempotency-Key), persist before acting.
package enum UpdateEffect: Sendable, Equatable {
    /// Report the record as it was when this effect was made (`UpdateFlow.takeReport()`
    /// gives it: one event can report two updates, the superseded one and its successor).
    case report
    /// Write the state durably.
    case persist
    /// Fetch the image: from zero, or continuing the staged partial file.
    case download(fromZero: Bool)
    /// Poll the manifest now, feed what it offers, then feed `.polled`.
    case pollFirst
    /// Fire `timer` (feed `.timerFired`) after `after`; arming it again moves it. A timer the
    /// flow no longer lists in `waits.armed` is dropped unfired.
    case arm(UpdateTimer, after: Duration)
    /// Account the confirmation time now: feed `.confirmClock` with the boot and its boot time.
    case accountConfirmation
    /// Compare the staged image with the manifest.
    case verify
    /// Run the install command (once per manifest, ever).
    case install
    /// Run the reboot command, if one is configured.
    case reboot
    /// Look at the booted version now (an installer that needs no reboot).
    case checkBooted
    /// Run the commit command (or none configured: report success).
    case commit
    /// Remove the staged image and its resume record.
    case discardImage
    /// Run the health check (one attempt).
    case healthCheck
    /// Run the rollback command (once per update, ever).
    case rollback
    /// The image is verified: ask the install gate, and feed `.installAllowed` once it is
    /// open (only with `gatedInstall`).
    case installGate
}

/// The firmware update as a state machine: sans-I/O, fed `UpdateEvent`s, answering with
/// `UpdateEffect`s. Invariants (tested from events):
/// - the installer is asked for at most once per manifest digest, whatever the events;
/// - a manifest acted on (done, failed or refused) is never acted on again;
/// - nothing newer than `highestAccepted` is required twice: a replayed older manifest is
///   refused (`UpdateDecision`), and `highestAccepted` only grows.
package struct UpdateFlow: Sendable {
    /// The persisted state.
    package internal(set) var state: FirmwareState
    /// Failed download attempts (with the server reachable) before the update fails.
    package let maximumFailedAttempts: Int
    /// The records of `.report` effects not yet taken, oldest first.
    private var pendingReports: [UpdateRecord] = []
    /// The commit command was asked for and has not answered (in memory: after a restart the
    /// next sync asks again; committing twice is harmless, `rauc status mark-good` is).
    private var commitPending = false
    /// What to do once the poll asked for with `.pollFirst` ended (`.polled`), unless an offer
    /// superseded the update meanwhile. In memory: a restart polls first again.
    private var afterPoll: UpdateEffect?
    /// Downgrades are allowed (`firmware.allowDowngrade`): then the rollback floor refuses
    /// nothing, and no history entry may be dropped.
    package let allowDowngrade: Bool
    /// How a new version is confirmed.
    package let confirmation: ConfirmPolicy
    /// A sync with the server succeeded since the new version runs (in memory: after a restart
    /// the next poll syncs again).
    private var synced = false
    /// Installs wait for a gate (`firmware.installWindow`, `firmware.inhibitFile`): a verified
    /// image is installed on `.installAllowed`, not at once.
    package let gatedInstall: Bool
    /// The image was verified in this process and waits for the install gate.
    private var verifiedAwaitingGate = false
    /// This boot's ID, as the last event that carried one said.
    private var bootID: String?
    /// The timers armed and the step a gate holds (UpdateWaits.swift).
    package internal(set) var waits = UpdateWaits()
    /// How long each wait lasts.
    package let waitPolicy: WaitPolicy
    /// A number in 0...1 for the jitter of backoffs.
    let random: @Sendable () -> Double

    /// A flow over `state`.
    /// - Parameters:
    ///   - state: as read from disk.
    ///   - maximumFailedAttempts: download attempts that may fail with the server reachable.
    ///   - allowDowngrade: `firmware.allowDowngrade`.
    ///   - confirmation: the health check, rollback and deadline of the confirmation.
    ///   - gatedInstall: installs wait for `.installAllowed`.
    ///   - waitPolicy: how long each wait lasts.
    ///   - random: a number in 0...1 for each backoff's jitter.
    package init(
        state: FirmwareState, maximumFailedAttempts: Int, allowDowngrade: Bool = false, confirmation: ConfirmPolicy = ConfirmPolicy(),
        gatedInstall: Bool = false, waitPolicy: WaitPolicy = WaitPolicy(),
        random: @escaping @Sendable () -> Double = { Double.random(in: 0...1) }
    ) {
        self.waitPolicy = waitPolicy
        self.random = random
        self.state = state
        self.maximumFailedAttempts = maximumFailedAttempts
        self.allowDowngrade = allowDowngrade
        self.confirmation = confirmation
        self.gatedInstall = gatedInstall
    }

    /// Confirmation time left before the deadline (nil: none, or not confirming).
    package var confirmRemaining: Duration? {
        guard phase == .confirming, let timeout = confirmation.timeout, let update = state.update else { return nil }
        return max(.zero, timeout - .milliseconds(update.confirmElapsedMilliseconds))
    }

    /// The health check still has to pass before the commit.
    package var awaitsHealthCheck: Bool {
        phase == .confirming && confirmation.healthCheck && state.update?.healthy == false
    }

    /// The record a `.report` effect reports, in the order the effects were made.
    /// - Returns: the record, or nil when none is waiting.
    package mutating func takeReport() -> UpdateRecord? {
        pendingReports.isEmpty ? nil : pendingReports.removeFirst()
    }

    /// The current update's phase (idle when none).
    package var phase: UpdatePhase { state.update?.phase ?? .idle }

    /// What to do after a start (of the agent, after a crash or a reboot), given what runs.
    /// - Parameters:
    ///   - version: the booted version.
    ///   - bootID: this boot's ID.
    ///   - now: the time.
    /// - Returns: the effects.
    package mutating func resume(version: SemanticVersion?, bootID: String?, now: WallTime) -> [UpdateEffect] {
        raiseFloor(running: version)
        if let bootID { self.bootID = bootID }
        // Judged again before anything acts on it: a state written by an older agent (or changed
        // on disk) must not make this one trap at every start, before it ever polls.
        if let problem = recordProblem { return fail(problem, now: now) }
        switch phase {
        case .downloading:
            // A release published while the agent was down supersedes before a byte of the old
            // image is fetched again.
            afterPoll = .download(fromZero: false)
            return [.pollFirst]
        case .verifying: return [.verify]
        case .installing: return handle(.booted(version: version, bootID: bootID), now: now)
        case .installed:
            let effects = handle(.booted(version: version, bootID: bootID), now: now)
            // Still the old version in the boot the install ran in: the reboot the install
            // asked for did not happen (the agent stopped first). Asked for again.
            return effects.isEmpty ? [.reboot] : effects
        case .confirming:
            let effects = handle(.booted(version: version, bootID: bootID), now: now)
            if !effects.isEmpty { return effects }
            return awaitsHealthCheck ? [.healthCheck] : []
        case .rollingBack:
            let effects = handle(.booted(version: version, bootID: bootID), now: now)
            // The agent stopped after the rollback, before the reboot: asked for again.
            return effects.isEmpty && state.update?.rollbackRan == true ? [.reboot] : effects
        case .idle, .done, .failed, .superseded: return []
        }
    }

    /// Feeds an event.
    /// - Parameters:
    ///   - event: what happened.
    ///   - now: the time.
    /// - Returns: the effects, in order.
    package mutating func handle(_ event: UpdateEvent, now: WallTime) -> [UpdateEffect] {
        switch event {
        case .offered(let digest, let manifest, let refusal, let running):
            return offer(digest: digest, manifest: manifest, refusal: refusal, running: running, now: now)
        case .downloadFinished:
            guard phase == .downloading else { return [] }
            return enter(.verifying, now: now) + [.verify]
        case .imageChanged(let reason):
            // The partial image is of another file than the server's now: most likely a new
            // release. Its manifest is polled before anything is downloaded; if the same
            // manifest still stands, the image is fetched from zero, once.
            guard phase == .downloading, var update = state.update else { return [] }
            guard update.freshDownloads < 1 else { return fail("\(reason), and the manifest still names it", now: now) }
            update.freshDownloads += 1
            update.reason = "\(reason); polling the manifest before downloading again"
            state.update = update
            afterPoll = .download(fromZero: true)
            return [.persist, .pollFirst]
        case .polled:
            guard let next = afterPoll else { return [] }
            afterPoll = nil
            return phase == .downloading ? [next] : []
        case .downloadFailed(let reason, let permanent, let serverReached):
            guard phase == .downloading, var update = state.update else { return [] }
            if permanent { return fail(reason, now: now) }
            if serverReached { update.failedAttempts += 1 }
            state.update = update
            if update.failedAttempts >= maximumFailedAttempts {
                return fail("\(reason) (after \(update.failedAttempts) failed attempts)", now: now)
            }
            return [.persist, arm(.downloadRetry, after: waitPolicy.retryDelay(afterFailure: update.failedAttempts, random: random()))]
        case .verified(let refusal, let bootID):
            guard phase == .verifying, var update = state.update else { return [] }
            if let refusal {
                // The staging file system failed, not the image: fetching it again cannot help.
                if refusal.kind == .stagingFailed { return fail(refusal.description, now: now) }
                // Once more from zero: a partial file damaged on disk, or continued across
                // a change the validators missed, must not fail an update the server got right.
                guard update.freshDownloads < 1 else { return fail(refusal.description, now: now) }
                update.freshDownloads += 1
                update.reason = "\(refusal.description); downloading again from zero"
                state.update = update
                return enter(.downloading, now: now) + [.discardImage, .download(fromZero: true)]
            }
            if state.installerRan(update.manifestDigest) {
                // Cannot happen through these events; if the file says so, it is the truth.
                update.reason = "the installer already ran for this manifest; not run again"
                state.update = update
                return enter(.installed, now: now) + [.checkBooted]
            }
            update.bootID = bootID
            update.reason = nil
            state.update = update
            if gatedInstall {
                verifiedAwaitingGate = true
                return [.installGate]
            }
            return startInstall(now: now)
        case .installAllowed:
            guard phase == .verifying, verifiedAwaitingGate else { return [] }
            verifiedAwaitingGate = false
            return startInstall(now: now)
        case .gateClosed(let step, let reason, let kind): return hold(step, reason: reason, kind: kind)
        case .gateOpened: return release()
        case .timerFired(let timer): return fired(timer)
        case .installerExited(let success, let rebootRequired, let detail):
            guard phase == .installing else { return [] }
            guard success else { return fail("the installer failed: \(detail)", now: now) }
            return enter(.installed, now: now) + (rebootRequired ? [.reboot] : [.checkBooted])
        case .booted(let version, let bootID):
            if let bootID { self.bootID = bootID }
            return booted(version: version, bootID: bootID, now: now)
        case .synced:
            guard phase == .confirming else { return [] }
            synced = true
            return commitIfConfirmed()
        case .healthChecked(let passed, let detail):
            guard awaitsHealthCheck, var update = state.update else { return [] }
            if passed {
                update.healthy = true
                update.reason = "health check passed: \(detail)"
                state.update = update
                return reporting() + [.persist] + commitIfConfirmed()
            }
            update.healthAttempts += 1
            update.reason = "health check attempt \(update.healthAttempts) of \(confirmation.healthAttempts) failed: \(detail)"
            state.update = update
            if update.healthAttempts >= confirmation.healthAttempts {
                return rollBack("the health check failed \(update.healthAttempts) times, last: \(detail)", now: now)
            }
            return reporting() + [.persist, arm(.healthCheck, after: waitPolicy.healthInterval)]
        case .confirmClock(let bootID, let uptime):
            if let bootID { self.bootID = bootID }
            guard phase == .confirming, var update = state.update else { return [] }
            let nowMilliseconds = Int64(clamping: uptime.totalNanoseconds / 1_000_000)
            if let mark = update.confirmMark, mark.bootID == bootID ?? "" {
                update.confirmElapsedMilliseconds += max(0, nowMilliseconds - mark.uptimeMilliseconds)
            }
            // Another boot of the new version: the time between the last mark and that reboot
            // is not counted (at most one accounting period, as often as the deadline needs).
            update.confirmMark = ConfirmMark(bootID: bootID ?? "", uptimeMilliseconds: nowMilliseconds)
            state.update = update
            if let timeout = confirmation.timeout, update.confirmElapsedMilliseconds >= timeout.totalNanoseconds / 1_000_000 {
                let what =
                    awaitsHealthCheck
                    ? (update.healthAttempts > 0 ? "its health check has not passed" : "its health check has not run to an end")
                    : "no sync with the server succeeded"
                return rollBack("not confirmed within \(ConfigReader.describe(timeout)): \(what)", now: now)
            }
            // Accounted again when the deadline would pass.
            return [.persist] + (confirmRemaining.map { [arm(.confirmDeadline, after: $0)] } ?? [])
        case .rollbackExited(let success, let detail):
            guard phase == .rollingBack, state.update?.rollbackRan == true else { return [] }
            guard success else {
                return fail("\(state.update?.reason ?? "rolled back"); the rollback command failed: \(detail)", now: now)
            }
            return [.reboot]
        case .commitExited(let success, let detail):
            guard phase == .confirming, commitPending, let update = state.update else { return [] }
            commitPending = false
            guard success else { return fail("the commit command failed: \(detail)", now: now) }
            if let version = SemanticVersion(update.version) { raiseFloor(to: version) }
            remember(update, installerRan: false)
            return enter(.done, now: now) + [.discardImage]
        }
    }

    /// Why the recorded update may not be acted on, or nil. While it downloads or is verified,
    /// its size is what the download and the disk-space check compute with: bounded as a
    /// manifest's (`FirmwareManifest.sizeProblem`). From `installing` on the size is not used.
    private var recordProblem: String? {
        guard let update = state.update, update.phase == .downloading || update.phase == .verifying,
            let problem = FirmwareManifest.sizeProblem(update.size)
        else { return nil }
        return "badManifest: the update recorded in the firmware state is not acted on: \(problem)"
    }

    /// The installer starts: remembered (at most once per manifest) in the same write.
    private mutating func startInstall(now: WallTime) -> [UpdateEffect] {
        guard let update = state.update, !state.installerRan(update.manifestDigest) else { return [] }
        remember(update, installerRan: true)
        return enter(.installing, now: now) + [.install]
    }

    /// The commit, once the health check passed (or none is configured) and a sync succeeded.
    private mutating func commitIfConfirmed() -> [UpdateEffect] {
        guard phase == .confirming, synced, !awaitsHealthCheck, !commitPending else { return [] }
        commitPending = true
        return [.commit]
    }

    /// The new version failed its confirmation: the rollback command runs, once, after its
    /// start is on disk; without one the update fails uncommitted.
    private mutating func rollBack(_ reason: String, now: WallTime) -> [UpdateEffect] {
        guard confirmation.rollback else {
            return fail("\(reason); no firmware.rollback is configured: the new version stays, uncommitted", now: now)
        }
        state.update?.reason = reason
        return enter(.rollingBack, now: now) + [.rollback]
    }

    /// Marks the rollback started, in this boot: the host persists this before it runs the
    /// command, so that it runs at most once whatever stops the agent.
    /// - Returns: false when it may not run (not rolling back, or started before).
    package mutating func rollbackStarts() -> Bool {
        guard phase == .rollingBack, var update = state.update, !update.rollbackRan else { return false }
        update.rollbackRan = true
        update.rollbackBootID = bootID ?? update.confirmMark?.bootID
        state.update = update
        return true
    }

    private mutating func offer(
        digest: String, manifest: FirmwareManifest?, refusal: FirmwareRefusal?, running: SemanticVersion?, now: WallTime
    ) -> [UpdateEffect] {
        raiseFloor(running: running)
        switch phase {
        case .installing, .installed, .confirming, .rollingBack:
            return []  // an install under way is seen through first
        case .downloading, .verifying:
            guard let current = state.update, current.manifestDigest != digest else { return [] }
            guard refusal == nil, let manifest else { return [] }  // a bad offer does not stop a good update
            // Forward only: an older or equal version (a replayed signed manifest) leaves the
            // update alone, and is not remembered: judged afresh once this update ended.
            if let version = SemanticVersion(current.version), manifest.version <= version { return [] }
            guard !state.remembers(digest), historyHasRoom else { return [] }
            afterPoll = nil
            // Not a failure of the superseded release: not remembered, reported as superseded.
            // Reported, not persisted: the successor's record is what gets written.
            state.update?.reason = "superseded by a newer manifest (\(manifest.version))"
            state.update?.phase = .superseded
            state.update?.since = now
            return [.discardImage] + reporting()
                + offer(digest: digest, manifest: manifest, refusal: refusal, running: running, now: now)
        case .idle, .done, .failed, .superseded:
            break
        }
        guard !state.remembers(digest) else { return [] }
        if let refusal, refusal.kind == .badSignature || refusal.kind == .expired {
            // Not remembered as finished: a signature published after its manifest, a server
            // error for it, or a clock that was wrong for one poll must not block the release
            // for good. Reported once per reason; the next poll checks again.
            if state.update?.manifestDigest == digest, state.update?.reason == refusal.description { return [] }
            state.update = UpdateRecord(
                phase: .failed, manifestDigest: digest, version: manifest.map { "\($0.version)" } ?? "", fromVersion: running?.description,
                size: manifest?.size ?? 0, since: now)
            state.update?.reason = refusal.description
            return reporting() + [.persist]
        }
        if let refusal {
            // The manifest of what already runs is no news: remembered, not reported.
            if refusal.kind == .notNewer, let manifest, let running, manifest.version == running {
                rememberRefusal(digest)
                return [.persist]
            }
            state.update = UpdateRecord(
                phase: .failed, manifestDigest: digest, version: manifest.map { "\($0.version)" } ?? "", fromVersion: running?.description,
                size: manifest?.size ?? 0, since: now)
            state.update?.reason = refusal.description
            rememberRefusal(digest)
            return reporting() + [.persist]
        }
        guard let manifest else { return [] }
        guard historyHasRoom else {
            // Only reachable when `historyLimit` releases above the rollback floor have failed.
            if state.update?.manifestDigest == digest { return [] }
            state.update = UpdateRecord(
                phase: .failed, manifestDigest: digest, version: manifest.version.description, fromVersion: running?.description,
                size: manifest.size, since: now)
            state.update?.reason =
                "historyFull: \(FirmwareState.historyLimit) releases above the committed version failed; "
                + "nothing new is installed until the firmware state is cleared"
            return reporting() + [.persist]
        }
        state.update = UpdateRecord(
            phase: .downloading, manifestDigest: digest, version: manifest.version.description, fromVersion: running?.description,
            size: manifest.size, since: now)
        forgetWaits()
        return reporting() + [.persist, .discardImage, .download(fromZero: true)]
    }

    private mutating func booted(version: SemanticVersion?, bootID: String?, now: WallTime) -> [UpdateEffect] {
        if phase == .confirming { return bootedWhileConfirming(version: version, bootID: bootID, now: now) }
        if phase == .rollingBack { return bootedWhileRollingBack(version: version, bootID: bootID, now: now) }
        guard phase == .installing || phase == .installed, var update = state.update else { return [] }
        let target = SemanticVersion(update.version)
        if let version, let target, version == target {
            if phase == .installing { update.reason = "the agent stopped while the installer ran; the new version runs" }
            update.healthy = !confirmation.healthCheck
            update.healthAttempts = 0
            update.confirmElapsedMilliseconds = 0
            update.confirmMark = nil
            state.update = update
            synced = false
            return enter(.confirming, now: now) + (confirmation.healthCheck ? [.healthCheck] : [])
        }
        let rebooted = bootID != nil && update.bootID != nil && bootID != update.bootID
        if rebooted {
            let running = version.map { "\($0)" } ?? "an unknown version"
            return fail("rolled back: \(running) booted after installing \(update.version)", now: now)
        }
        if phase == .installing {
            // The agent stopped while the installer ran: its outcome is unknown and it does
            // not run again. The next boot tells (the new version, or a rollback).
            update.reason = "the agent stopped while the installer ran; not run again: the next boot decides"
            state.update = update
            return enter(.installed, now: now)
        }
        return []
    }

    /// The bootloader may fall back to the old version on its own (a watchdog reset, boot
    /// attempts used up) before the new one was confirmed.
    private mutating func bootedWhileConfirming(version: SemanticVersion?, bootID: String?, now: WallTime) -> [UpdateEffect] {
        guard let update = state.update, let version, let target = SemanticVersion(update.version), version != target else { return [] }
        return fail("rolled back: \(version) booted while \(update.version) was being confirmed", now: now)
    }

    /// After the rollback command: the reboot into the old version is what ends it.
    private mutating func bootedWhileRollingBack(version: SemanticVersion?, bootID: String?, now: WallTime) -> [UpdateEffect] {
        guard let update = state.update else { return [] }
        let cause = update.reason ?? "its confirmation failed"
        guard update.rollbackRan else { return [.rollback] }  // stopped before it started
        let target = SemanticVersion(update.version)
        let rebooted = bootID != nil && update.rollbackBootID != nil && bootID != update.rollbackBootID
        guard rebooted || (version != nil && version != target) else { return [] }
        if let version, version != target {
            return fail("rolled back: \(version) runs again after \(update.version) failed (\(cause))", now: now)
        }
        return fail("the rollback did not take: \(update.version) still runs after a reboot, uncommitted (\(cause))", now: now)
    }

    /// Moves to `phase`: report, persist.
    private mutating func enter(_ phase: UpdatePhase, now: WallTime) -> [UpdateEffect] {
        settleWaits(entering: phase, from: self.phase)
        state.update?.phase = phase
        state.update?.since = now
        return reporting() + [.persist]
    }

    /// `.report`, with the record as it is now kept for `takeReport()`.
    mutating func reporting() -> [UpdateEffect] {
        guard let update = state.update else { return [] }
        pendingReports.append(update)
        return [.report]
    }

    private mutating func fail(_ reason: String, now: WallTime) -> [UpdateEffect] {
        state.update?.reason = reason
        if let update = state.update { remember(update, installerRan: false) }
        // The image goes first: on a full disk its space is what recording the failure needs.
        return [.discardImage] + enter(.failed, now: now)
    }

    /// Adds `update`'s manifest to the history (or marks that its installer ran). Past the
    /// limit, drops the oldest entry the rollback floor refuses anyway.
    private mutating func remember(_ update: UpdateRecord, installerRan: Bool) {
        if let index = state.history.firstIndex(where: { $0.digest == update.manifestDigest }) {
            if installerRan { state.history[index].installerRan = true }
            return
        }
        state.history.append(HistoryEntry(digest: update.manifestDigest, version: update.version, installerRan: installerRan))
        while state.history.count > FirmwareState.historyLimit, let index = state.history.firstIndex(where: coveredByFloor) {
            state.history.remove(at: index)
        }
    }

    /// Whether the floor refuses `entry`'s manifest whatever the history says.
    private func coveredByFloor(_ entry: HistoryEntry) -> Bool {
        guard !allowDowngrade, let version = SemanticVersion(entry.version),
            let floor = state.highestAccepted.flatMap(SemanticVersion.init)
        else { return false }
        return version <= floor
    }

    /// A new update can be remembered when it ends without dropping an entry that protects.
    private var historyHasRoom: Bool {
        state.history.count < FirmwareState.historyLimit || state.history.contains(where: coveredByFloor)
    }

    /// Remembers a refused manifest so that it is reported once (the newest `refusalLimit`).
    private mutating func rememberRefusal(_ digest: String) {
        guard !state.refused.contains(digest) else { return }
        state.refused.append(digest)
        if state.refused.count > FirmwareState.refusalLimit { state.refused.removeFirst(state.refused.count - FirmwareState.refusalLimit) }
    }

    /// The running version is a floor too, except the update's own version before it is
    /// committed: a release that fails its confirmation must not keep its fixes below it out.
    private mutating func raiseFloor(running version: SemanticVersion?) {
        if let update = state.update, [.installing, .installed, .confirming, .rollingBack].contains(update.phase),
            let version, SemanticVersion(update.version) == version
        {
            return
        }
        raiseFloor(to: version)
    }

    /// `highestAccepted` only grows.
    private mutating func raiseFloor(to version: SemanticVersion?) {
        guard let version else { return }
        if let current = state.highestAccepted.flatMap(SemanticVersion.init), current >= version { return }
        state.highestAccepted = version.description
    }
}
