import Foundation
import Testing
import TinyFireCore

@testable import FireAgent

@Suite("Firmware: the update flow as a state machine, fed events")
struct UpdateFlowTests {
    let now = WallTime(secondsSince1970: 1_800_000_000)
    let old = SemanticVersion("2.0.0")!
    let new = SemanticVersion("2.1.0")!

    func manifest(_ version: String) throws -> FirmwareManifest {
        try FirmwareManifest.parse(
            Array(
                #"{"version": "\#(version)", "compatible": ["gw"], "image": "gw.img", "size": 1000, "sha256": "\#(String(repeating: "ab", count: 32))"}"#
                    .utf8), from: AbsoluteURL("https://u.example/m.json")!)
    }

    func flow(attempts: Int = 3) -> UpdateFlow {
        UpdateFlow(state: FirmwareState(), maximumFailedAttempts: attempts, random: { 0.5 })
    }

    /// The backoff the flow arms after failed attempt `failure` (its jitter fixed at 0.5).
    func retry(_ failure: Int) -> UpdateEffect {
        .arm(.downloadRetry, after: WaitPolicy().retryDelay(afterFailure: failure, random: 0.5))
    }

    @Test("an A/B update: offered, downloaded, verified, installed once, rebooted into the new version, synced, committed")
    func happyPath() throws {
        var flow = flow()
        #expect(flow.resume(version: old, bootID: "boot-1", now: now) == [])
        #expect(flow.state.highestAccepted == "2.0.0")
        let offer = UpdateEvent.offered(digest: "d1", manifest: try manifest("2.1.0"), refusal: nil, running: old)
        #expect(flow.handle(offer, now: now) == [.report, .persist, .discardImage, .download(fromZero: true)])
        #expect(flow.phase == .downloading && flow.state.update?.version == "2.1.0" && flow.state.update?.fromVersion == "2.0.0")
        #expect(flow.handle(offer, now: now) == [], "the same manifest again changes nothing")
        #expect(flow.handle(.downloadFinished, now: now) == [.report, .persist, .verify])
        #expect(flow.handle(.verified(nil, bootID: "boot-1"), now: now) == [.report, .persist, .install])
        #expect(flow.state.installerRan("d1") && flow.state.history == [HistoryEntry(digest: "d1", version: "2.1.0", installerRan: true)])
        #expect(
            flow.handle(.installerExited(success: true, rebootRequired: true, detail: "exit 0"), now: now) == [.report, .persist, .reboot])
        #expect(flow.phase == .installed)
        // Not rebooted yet: still the old version in the same boot.
        #expect(flow.handle(.booted(version: old, bootID: "boot-1"), now: now) == [])
        // The agent restarted before the reboot happened: the reboot is asked for again.
        var restarted = UpdateFlow(state: flow.state, maximumFailedAttempts: 3)
        #expect(restarted.resume(version: old, bootID: "boot-1", now: now) == [.reboot])
        // The agent starts again after the reboot.
        #expect(flow.resume(version: new, bootID: "boot-2", now: now) == [.report, .persist])
        #expect(flow.phase == .confirming)
        #expect(flow.handle(.commitExited(success: true, detail: ""), now: now) == [], "no commit before the command was asked for")
        #expect(flow.phase == .confirming)
        #expect(flow.handle(.synced, now: now) == [.commit])
        #expect(flow.handle(.commitExited(success: true, detail: "exit 0"), now: now) == [.report, .persist, .discardImage])
        #expect(flow.phase == .done && flow.state.highestAccepted == "2.1.0" && flow.state.history.map(\.digest) == ["d1"])
        // Served again, the done manifest is not acted on.
        #expect(flow.handle(offer, now: now) == [])
    }

    @Test("an installer that needs no reboot: the booted version is checked at once")
    func withoutReboot() throws {
        var flow = flow()
        _ = flow.handle(.offered(digest: "d1", manifest: try manifest("2.1.0"), refusal: nil, running: old), now: now)
        _ = flow.handle(.downloadFinished, now: now)
        _ = flow.handle(.verified(nil, bootID: "b"), now: now)
        #expect(
            flow.handle(.installerExited(success: true, rebootRequired: false, detail: ""), now: now) == [.report, .persist, .checkBooted])
        #expect(flow.handle(.booted(version: new, bootID: "b"), now: now) == [.report, .persist])
        #expect(flow.phase == .confirming)
    }

    @Test("the old version booting after the install is a rollback: failed, reported, never installed again")
    func rollback() throws {
        var flow = flow()
        _ = flow.handle(.offered(digest: "d1", manifest: try manifest("2.1.0"), refusal: nil, running: old), now: now)
        _ = flow.handle(.downloadFinished, now: now)
        _ = flow.handle(.verified(nil, bootID: "boot-1"), now: now)
        _ = flow.handle(.installerExited(success: true, rebootRequired: true, detail: ""), now: now)
        // The image goes before the failure is recorded: on a full disk its space is needed.
        #expect(flow.resume(version: old, bootID: "boot-2", now: now) == [.discardImage, .report, .persist])
        #expect(flow.phase == .failed && flow.state.update?.reason?.contains("rolled back: 2.0.0 booted after installing 2.1.0") == true)
        #expect(flow.state.highestAccepted == "2.0.0")
        #expect(flow.handle(.offered(digest: "d1", manifest: try manifest("2.1.0"), refusal: nil, running: old), now: now) == [])
    }

    @Test("refusals fail the offer once with the reason; the manifest of what already runs is no news")
    func refusals() throws {
        var flow = flow()
        let refusal = FirmwareRefusal(kind: .badSignature, message: "not valid")
        #expect(flow.handle(.offered(digest: "bad", manifest: nil, refusal: refusal, running: old), now: now) == [.report, .persist])
        #expect(flow.phase == .failed && flow.state.update?.reason == "badSignature: not valid")
        #expect(flow.handle(.offered(digest: "bad", manifest: nil, refusal: refusal, running: old), now: now) == [], "reported once")
        // The same manifest once its signature is right (published late): accepted.
        var late = flow
        #expect(
            late.handle(.offered(digest: "bad", manifest: try manifest("2.5.0"), refusal: nil, running: old), now: now)
                == [.report, .persist, .discardImage, .download(fromZero: true)])
        let same = FirmwareRefusal(kind: .notNewer, message: "2.0.0 is not newer")
        #expect(flow.handle(.offered(digest: "same", manifest: try manifest("2.0.0"), refusal: same, running: old), now: now) == [.persist])
        #expect(flow.state.update?.manifestDigest == "bad", "a silent refusal leaves the last update as it was")
        // A refused offer does not stop an update under way.
        _ = flow.handle(.offered(digest: "d1", manifest: try manifest("2.1.0"), refusal: nil, running: old), now: now)
        #expect(flow.handle(.offered(digest: "replay", manifest: try manifest("1.0.0"), refusal: same, running: old), now: now) == [])
        #expect(flow.phase == .downloading && flow.state.update?.manifestDigest == "d1")
    }

    @Test("a mismatched image is fetched once more from zero, then the update fails; the installer never runs")
    func mismatch() throws {
        var flow = flow()
        _ = flow.handle(.offered(digest: "d1", manifest: try manifest("2.1.0"), refusal: nil, running: old), now: now)
        _ = flow.handle(.downloadFinished, now: now)
        let wrong = FirmwareRefusal(kind: .hashMismatch, message: "sha256 differs")
        #expect(flow.handle(.verified(wrong, bootID: nil), now: now) == [.report, .persist, .discardImage, .download(fromZero: true)])
        #expect(flow.phase == .downloading)
        _ = flow.handle(.downloadFinished, now: now)
        #expect(flow.handle(.verified(wrong, bootID: nil), now: now) == [.discardImage, .report, .persist])
        #expect(flow.phase == .failed && !flow.state.installerRan("d1") && flow.state.remembers("d1"))
    }

    @Test(
        "a staging file system that fails the verified image (cannot be moved into place, read back) ends the update at once: nothing is fetched again"
    )
    func stagingFailed() throws {
        var flow = flow()
        _ = flow.handle(.offered(digest: "d1", manifest: try manifest("2.1.0"), refusal: nil, running: old), now: now)
        _ = flow.handle(.downloadFinished, now: now)
        let failed = FirmwareRefusal(kind: .stagingFailed, message: "the image cannot be moved into place: Read-only file system")
        #expect(flow.handle(.verified(failed, bootID: nil), now: now) == [.discardImage, .report, .persist])
        #expect(flow.phase == .failed && !flow.state.installerRan("d1"))
        #expect(flow.state.update?.reason?.hasPrefix("stagingFailed: the image cannot be moved into place") == true)
    }

    @Test("failed attempts count only when the server was reached; permanent failures (404, 410) end at once")
    func downloadFailures() throws {
        var flow = flow(attempts: 2)
        _ = flow.handle(.offered(digest: "d1", manifest: try manifest("2.1.0"), refusal: nil, running: old), now: now)
        for _ in 0..<5 {
            #expect(
                flow.handle(.downloadFailed(reason: "offline", permanent: false, serverReached: false), now: now) == [
                    .persist, retry(1),
                ])
        }
        #expect(
            flow.handle(.downloadFailed(reason: "reset", permanent: false, serverReached: true), now: now) == [
                .persist, retry(1),
            ])
        #expect(
            flow.handle(.downloadFailed(reason: "reset", permanent: false, serverReached: true), now: now) == [
                .discardImage, .report, .persist,
            ])
        #expect(flow.phase == .failed && flow.state.update?.reason == "reset (after 2 failed attempts)")
        var gone = self.flow()
        _ = gone.handle(.offered(digest: "d2", manifest: try manifest("2.2.0"), refusal: nil, running: old), now: now)
        #expect(
            gone.handle(.downloadFailed(reason: "HTTP 404", permanent: true, serverReached: true), now: now) == [
                .discardImage, .report, .persist,
            ])
        #expect(gone.phase == .failed)
    }

    @Test("a newer manifest during the download supersedes it (not a failure of its release); during the install it waits")
    func supersede() throws {
        var flow = flow()
        _ = flow.handle(.offered(digest: "d1", manifest: try manifest("2.1.0"), refusal: nil, running: old), now: now)
        let newer = UpdateEvent.offered(digest: "d2", manifest: try manifest("2.2.0"), refusal: nil, running: old)
        #expect(flow.handle(newer, now: now) == [.discardImage, .report, .report, .persist, .discardImage, .download(fromZero: true)])
        #expect(flow.phase == .downloading && flow.state.update?.version == "2.2.0")
        #expect(flow.state.history.isEmpty && !flow.state.remembers("d1"), "a superseded release is not remembered as acted on")
        // Each report is of the record as it was: the superseded update, then its successor.
        let superseded = flow.takeReport()
        #expect(superseded?.phase == .downloading && superseded?.version == "2.1.0", "the first offer's own report")
        let failed = flow.takeReport()
        #expect(failed?.phase == .superseded && failed?.version == "2.1.0" && failed?.reason == "superseded by a newer manifest (2.2.0)")
        let successor = flow.takeReport()
        #expect(successor?.phase == .downloading && successor?.version == "2.2.0")
        #expect(flow.takeReport() == nil)
        _ = flow.handle(.downloadFinished, now: now)
        _ = flow.handle(.verified(nil, bootID: "b"), now: now)
        #expect(flow.handle(.offered(digest: "d3", manifest: try manifest("2.3.0"), refusal: nil, running: old), now: now) == [])
        #expect(flow.phase == .installing)
    }

    @Test("forward only: an older or equal signed manifest during the download leaves it alone and is not remembered")
    func supersedeForwardOnly() throws {
        var flow = flow()
        _ = flow.handle(.offered(digest: "d3", manifest: try manifest("3.0.0"), refusal: nil, running: old), now: now)
        _ = flow.takeReport()
        for (digest, version) in [("d2", "2.5.0"), ("d3b", "3.0.0"), ("d1", "2.0.1")] {
            #expect(flow.handle(.offered(digest: digest, manifest: try manifest(version), refusal: nil, running: old), now: now) == [])
            #expect(flow.phase == .downloading && flow.state.update?.manifestDigest == "d3", "\(version) displaced 3.0.0")
            #expect(!flow.state.remembers(digest))
        }
        #expect(flow.takeReport() == nil)
        _ = flow.handle(.downloadFinished, now: now)
        #expect(flow.handle(.offered(digest: "d2", manifest: try manifest("2.5.0"), refusal: nil, running: old), now: now) == [])
        #expect(flow.phase == .verifying && flow.state.update?.manifestDigest == "d3")
        // 3.0.0 fails: 2.5.0 is judged afresh (not a failed release), 3.0.0 never again.
        _ = flow.handle(.verified(FirmwareRefusal(kind: .hashMismatch, message: "x"), bootID: nil), now: now)
        _ = flow.handle(.downloadFinished, now: now)
        _ = flow.handle(.verified(FirmwareRefusal(kind: .hashMismatch, message: "x"), bootID: nil), now: now)
        #expect(flow.phase == .failed)
        #expect(flow.handle(.offered(digest: "d3", manifest: try manifest("3.0.0"), refusal: nil, running: old), now: now) == [])
        #expect(
            flow.handle(.offered(digest: "d2", manifest: try manifest("2.5.0"), refusal: nil, running: old), now: now)
                == [.report, .persist, .discardImage, .download(fromZero: true)])
    }

    @Test("history no server can evict: 40 refused manifests, then a failed and a rolled-back release replayed: never acted on")
    func historyCannotBeEvicted() throws {
        var flow = flow()
        // A release that fails to download, and one that is installed and rolled back.
        _ = flow.handle(.offered(digest: "failed", manifest: try manifest("2.1.0"), refusal: nil, running: old), now: now)
        _ = flow.handle(.downloadFailed(reason: "HTTP 404", permanent: true, serverReached: true), now: now)
        _ = flow.handle(.offered(digest: "rolled", manifest: try manifest("2.2.0"), refusal: nil, running: old), now: now)
        _ = flow.handle(.downloadFinished, now: now)
        _ = flow.handle(.verified(nil, bootID: "b1"), now: now)
        _ = flow.handle(.installerExited(success: true, rebootRequired: true, detail: ""), now: now)
        _ = flow.handle(.booted(version: old, bootID: "b2"), now: now)
        #expect(flow.phase == .failed && flow.state.update?.reason?.contains("rolled back") == true)
        // Refusals of every kind that is remembered, far past any limit.
        let kinds: [FirmwareRefusal.Kind] = [.badManifest, .incompatible, .notNewer]
        for index in 0..<(FirmwareState.refusalLimit + 40) {
            let refusal = FirmwareRefusal(kind: kinds[index % 3], message: "x")
            _ = flow.handle(.offered(digest: "r\(index)", manifest: try manifest("1.\(index).0"), refusal: refusal, running: old), now: now)
        }
        #expect(flow.state.refused.count == FirmwareState.refusalLimit)
        for (digest, version) in [("failed", "2.1.0"), ("rolled", "2.2.0")] {
            #expect(flow.handle(.offered(digest: digest, manifest: try manifest(version), refusal: nil, running: old), now: now) == [])
        }
        // Through the state file too.
        let restored = try FirmwareState(json: JSONValue.parse(Array(flow.state.json.text.utf8), file: "state.json"))
        #expect(restored == flow.state)
        var restarted = UpdateFlow(state: restored, maximumFailedAttempts: 3)
        #expect(restarted.handle(.offered(digest: "rolled", manifest: try manifest("2.2.0"), refusal: nil, running: old), now: now) == [])
    }

    @Test("the history's bound: past it only entries the rollback floor refuses anyway go; when none can, new releases are refused")
    func historyBound() throws {
        var flow = flow()
        _ = flow.resume(version: old, bootID: "b", now: now)
        // Releases that fail, all above the floor (2.0.0): none may be forgotten.
        for index in 0..<FirmwareState.historyLimit {
            _ = flow.handle(.offered(digest: "f\(index)", manifest: try manifest("3.\(index).0"), refusal: nil, running: old), now: now)
            _ = flow.handle(.downloadFailed(reason: "HTTP 410", permanent: true, serverReached: true), now: now)
        }
        #expect(flow.state.history.count == FirmwareState.historyLimit)
        #expect(
            flow.handle(.offered(digest: "next", manifest: try manifest("9.0.0"), refusal: nil, running: old), now: now) == [
                .report, .persist,
            ])
        #expect(flow.phase == .failed && flow.state.update?.reason?.hasPrefix("historyFull:") == true)
        #expect(flow.state.history.first?.digest == "f0", "nothing was dropped")
        for index in [0, 17, FirmwareState.historyLimit - 1] {
            #expect(
                flow.handle(.offered(digest: "f\(index)", manifest: try manifest("3.\(index).0"), refusal: nil, running: old), now: now)
                    == [])
        }
        // Once a higher version is committed, older entries are covered by the floor: they may go.
        var state = flow.state
        state.highestAccepted = "3.5.0"
        var raised = UpdateFlow(state: state, maximumFailedAttempts: 3)
        #expect(
            raised.handle(.offered(digest: "next", manifest: try manifest("9.0.0"), refusal: nil, running: old), now: now).last
                == .download(fromZero: true))
        _ = raised.handle(.downloadFailed(reason: "HTTP 410", permanent: true, serverReached: true), now: now)
        #expect(raised.state.history.count == FirmwareState.historyLimit && raised.state.history.last?.digest == "next")
        #expect(raised.state.history.first?.digest == "f1", "the oldest covered entry (3.0.0 <= 3.5.0) went")
        // With downgrades allowed the floor refuses nothing: nothing may go.
        var downgrades = UpdateFlow(state: state, maximumFailedAttempts: 3, allowDowngrade: true)
        _ = downgrades.handle(.offered(digest: "next", manifest: try manifest("9.0.0"), refusal: nil, running: old), now: now)
        #expect(downgrades.phase == .failed && downgrades.state.update?.reason?.hasPrefix("historyFull:") == true)
    }

    @Test("after a restart mid-download the manifest is polled before a byte is fetched; a changed image polls too")
    func pollBeforeResuming() throws {
        var flow = flow()
        _ = flow.handle(.offered(digest: "d1", manifest: try manifest("2.1.0"), refusal: nil, running: old), now: now)
        var restarted = UpdateFlow(state: flow.state, maximumFailedAttempts: 3)
        #expect(restarted.resume(version: old, bootID: "b", now: now) == [.pollFirst])
        // The same manifest stands: the download continues.
        var same = restarted
        #expect(same.handle(.polled, now: now) == [.download(fromZero: false)])
        #expect(same.handle(.polled, now: now) == [], "once")
        // A newer release was published meanwhile: it supersedes; the old download does not resume.
        _ = restarted.handle(.offered(digest: "d2", manifest: try manifest("2.2.0"), refusal: nil, running: old), now: now)
        #expect(restarted.state.update?.manifestDigest == "d2")
        #expect(restarted.handle(.polled, now: now) == [])
        // If-Range answered 200 with another file: poll, then (same manifest) once from zero.
        #expect(restarted.handle(.imageChanged(reason: "ETag a → b"), now: now) == [.persist, .pollFirst])
        #expect(restarted.handle(.polled, now: now) == [.download(fromZero: true)])
        #expect(restarted.handle(.imageChanged(reason: "ETag b → c"), now: now) == [.discardImage, .report, .persist])
        #expect(restarted.phase == .failed && restarted.state.update?.reason?.contains("the manifest still names it") == true)
    }

    @Test(
        "a recorded update whose size is out of bounds (an older agent's state) is failed at resume with the reason, not acted on",
        arguments: [1 << 62, Int64.max - (1 << 20) + 1, 0, -1] as [Int64])
    func outOfBoundsRecordFails(size: Int64) throws {
        var flow = flow()
        _ = flow.handle(.offered(digest: "d1", manifest: try manifest("2.1.0"), refusal: nil, running: old), now: now)
        var state = flow.state
        state.update?.size = size
        for phase in [UpdatePhase.downloading, .verifying] {
            state.update?.phase = phase
            // Through the file, as an older agent left it.
            let read = try FirmwareState(json: JSONValue.parse(Array(state.json.text.utf8), file: "state.json"))
            var restarted = UpdateFlow(state: read, maximumFailedAttempts: 3)
            #expect(restarted.resume(version: old, bootID: "b", now: now) == [.discardImage, .report, .persist], "\(phase) \(size)")
            #expect(restarted.phase == .failed)
            #expect(
                restarted.state.update?.reason?.hasPrefix(
                    "badManifest: the update recorded in the firmware state is not acted on: size \(size) ") == true,
                "\(String(describing: restarted.state.update?.reason))")
            #expect(restarted.state.remembers("d1"), "never acted on again")
        }
        // In bounds: resumed as before.
        var fine = UpdateFlow(state: flow.state, maximumFailedAttempts: 3)
        #expect(fine.resume(version: old, bootID: "b", now: now) == [.pollFirst])
    }

    @Test("a state file of an agent before `history` is read with all it remembered; its legacy lists are still written")
    func legacyState() throws {
        let old = #"{"finished": ["a", "b"], "installerRuns": ["b"], "highestAccepted": "2.0.0"}"#
        let state = try FirmwareState(json: JSONValue.parse(Array(old.utf8), file: "state.json"))
        #expect(
            state.history == [
                HistoryEntry(digest: "a", version: "", installerRan: false), HistoryEntry(digest: "b", version: "", installerRan: true),
            ])
        #expect(state.installerRan("b") && state.remembers("a"))
        let text = state.json.text
        #expect(text.contains(#""finished""#) && text.contains(#""installerRuns""#))
    }

    @Test("a crash while the installer runs: not run again; the booted version decides")
    func interruptedInstall() throws {
        var flow = flow()
        _ = flow.handle(.offered(digest: "d1", manifest: try manifest("2.1.0"), refusal: nil, running: old), now: now)
        _ = flow.handle(.downloadFinished, now: now)
        _ = flow.handle(.verified(nil, bootID: "boot-1"), now: now)
        var restarted = UpdateFlow(state: flow.state, maximumFailedAttempts: 3)
        #expect(restarted.resume(version: old, bootID: "boot-1", now: now) == [.report, .persist])
        #expect(restarted.phase == .installed && restarted.state.update?.reason?.contains("not run again") == true)
        var again = UpdateFlow(state: restarted.state, maximumFailedAttempts: 3)
        #expect(again.resume(version: new, bootID: "boot-2", now: now) == [.report, .persist])
        #expect(again.phase == .confirming)
    }

    @Test("random events, restarts and crashes before a write: the installer is asked for at most once per manifest")
    func neverTwice() throws {
        var random = SplitMix64(seed: 17)
        let manifests = try ["2.1.0", "2.2.0", "1.9.0"].map { try manifest($0) }
        var totalInstalls = 0
        var completed = 0
        for round in 0..<300 {
            var persisted = FirmwareState()
            var flow = UpdateFlow(state: persisted, maximumFailedAttempts: 3)
            var installs: [String: Int] = [:]
            var booted = old
            var boot = 0
            for _ in 0..<60 {
                var event: UpdateEvent
                // Half the time what the phase waits for (so the walk gets far), else anything.
                let natural: UpdateEvent? =
                    switch flow.phase {
                    case .downloading: .downloadFinished
                    case .verifying: .verified(nil, bootID: "b\(boot)")
                    case .installing: .installerExited(success: true, rebootRequired: true, detail: "")
                    case .confirming: Bool.random(using: &random) ? .synced : .commitExited(success: true, detail: "")
                    default: nil
                    }
                if let natural, Bool.random(using: &random) {
                    event = natural
                } else {
                    switch Int.random(in: 0..<10, using: &random) {
                    case 0, 1:
                        let index = Int.random(in: 0..<3, using: &random)
                        event = .offered(digest: "d\(index)", manifest: manifests[index], refusal: nil, running: booted)
                    case 2: event = .downloadFinished
                    case 3: event = .downloadFailed(reason: "x", permanent: Bool.random(using: &random), serverReached: true)
                    case 4:
                        event = .verified(
                            Bool.random(using: &random) ? nil : FirmwareRefusal(kind: .hashMismatch, message: "x"), bootID: "b\(boot)")
                    case 5:
                        event = .installerExited(
                            success: Int.random(in: 0..<4, using: &random) > 0, rebootRequired: Bool.random(using: &random), detail: "")
                    case 6:
                        event = Bool.random(using: &random) ? .synced : (Bool.random(using: &random) ? .polled : .imageChanged(reason: "x"))
                    case 7: event = .commitExited(success: Bool.random(using: &random), detail: "")
                    case 8:
                        // A reboot, into the new version or not.
                        boot += 1
                        if let version = flow.state.update.flatMap({ SemanticVersion($0.version) }), Bool.random(using: &random) {
                            booted = version
                        }
                        event = .booted(version: booted, bootID: "b\(boot)")
                    default:
                        // A crash: what was not persisted is gone; the agent starts again.
                        flow = UpdateFlow(state: persisted, maximumFailedAttempts: 3)
                        _ = flow.resume(version: booted, bootID: "b\(boot)", now: now)
                        continue
                    }
                }
                let effects = flow.handle(event, now: now)
                // The host persists before it acts; a crash between loses the action too.
                guard let persist = effects.firstIndex(of: .persist) else {
                    #expect(!effects.contains(.install), "round \(round): an install without persisting first")
                    continue
                }
                if Int.random(in: 0..<8, using: &random) == 0 {
                    flow = UpdateFlow(state: persisted, maximumFailedAttempts: 3)
                    continue
                }
                persisted = flow.state
                if effects[persist...].contains(.install), let digest = flow.state.update?.manifestDigest {
                    installs[digest, default: 0] += 1
                }
            }
            #expect(installs.values.allSatisfy { $0 <= 1 }, "round \(round): \(installs)")
            totalInstalls += installs.values.reduce(0, +)
            if persisted.update?.phase == .done { completed += 1 }
            if let floor = persisted.highestAccepted.flatMap(SemanticVersion.init) { #expect(floor >= old) }
        }
        // The walk must reach the installer and the end often, or it proves nothing.
        #expect(totalInstalls > 100 && completed > 10, "\(totalInstalls) installs, \(completed) completed")
    }

    @Test("the state survives the store: written durably, read back equal; a damaged file is a typed error")
    func store() throws {
        let directory = try agentScratch("store")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try FirmwareStore(directory: directory + "/firmware")
        #expect(try store.loadState() == FirmwareState(), "no file: a fresh state")
        var flow = flow()
        _ = flow.handle(.offered(digest: "d1", manifest: try manifest("2.1.0"), refusal: nil, running: old), now: now)
        _ = flow.handle(.downloadFinished, now: now)
        _ = flow.handle(.verified(nil, bootID: "boot \"1\"\n"), now: now)
        try store.save(flow.state)
        #expect(try store.loadState() == flow.state)
        #expect(!FileManager.default.fileExists(atPath: directory + "/firmware/state.json.tmp"))
        try Data("{\"finished\": [1]}".utf8).write(to: URL(filePath: directory + "/firmware/state.json"))
        let error = #expect(throws: AgentError.self) { try store.loadState() }
        #expect(error?.description.contains("state.json is damaged: finished holds a non-string") == true, "\(String(describing: error))")
        store.quarantineState()
        #expect(try store.loadState() == FirmwareState())
        #expect(FileManager.default.fileExists(atPath: directory + "/firmware/state.json.damaged"))
    }
}
