import Foundation
import Testing
import TinyFireCore

@testable import FireAgent

/// The confirmation of a new version as the flow decides it: health check, rollback, deadline.
@Suite("Firmware: health gate, rollback and confirmation deadline in the update flow")
struct HealthGateFlowTests {
    let now = WallTime(secondsSince1970: 1_800_000_000)
    let old = SemanticVersion("2.0.0")!
    let new = SemanticVersion("2.1.0")!
    let gated = ConfirmPolicy(healthCheck: true, healthAttempts: 3, rollback: true, timeout: .seconds(600))

    func manifest(_ version: String) throws -> FirmwareManifest {
        try FirmwareManifest.parse(
            Array(
                #"{"version": "\#(version)", "compatible": ["gw"], "image": "gw.img", "size": 1000, "sha256": "\#(String(repeating: "ab", count: 32))"}"#
                    .utf8), from: AbsoluteURL("https://u.example/m.json")!)
    }

    /// The deadline's timer armed `seconds` ahead.
    func deadline(_ seconds: Int64) -> UpdateEffect { .arm(.confirmDeadline, after: .seconds(seconds)) }

    /// A flow that installed 2.1.0 in boot-1 and was restarted in boot-2, where 2.1.0 runs.
    func booted(_ policy: ConfirmPolicy) throws -> (UpdateFlow, [UpdateEffect]) {
        var flow = UpdateFlow(state: FirmwareState(), maximumFailedAttempts: 3, confirmation: policy)
        _ = flow.resume(version: old, bootID: "boot-1", now: now)
        _ = flow.handle(.offered(digest: "d1", manifest: try manifest("2.1.0"), refusal: nil, running: old), now: now)
        _ = flow.handle(.downloadFinished, now: now)
        _ = flow.handle(.verified(nil, bootID: "boot-1"), now: now)
        _ = flow.handle(.installerExited(success: true, rebootRequired: true, detail: ""), now: now)
        var restarted = UpdateFlow(state: flow.state, maximumFailedAttempts: 3, confirmation: policy)
        let effects = restarted.resume(version: new, bootID: "boot-2", now: now)
        return (restarted, effects)
    }

    /// Drains the reports so that the next `takeReport` is the next effect's.
    func drain(_ flow: inout UpdateFlow) { while flow.takeReport() != nil {} }

    @Test("the check runs as soon as the new version is booted; the commit waits for it and for a sync, in either order")
    func passes() throws {
        var (flow, effects) = try booted(gated)
        #expect(effects == [.report, .persist, .healthCheck])
        #expect(flow.phase == .confirming && flow.awaitsHealthCheck)
        #expect(flow.handle(.synced, now: now) == [], "a sync alone does not commit while the check has not passed")
        #expect(flow.handle(.healthChecked(passed: true, detail: "exit 0: app up"), now: now) == [.report, .persist, .commit])
        drain(&flow)
        #expect(flow.handle(.commitExited(success: true, detail: "exit 0"), now: now) == [.report, .persist, .discardImage])
        #expect(flow.phase == .done && flow.state.highestAccepted == "2.1.0")

        // The other order: the check passes before any sync.
        (flow, _) = try booted(gated)
        #expect(flow.handle(.healthChecked(passed: true, detail: "exit 0"), now: now) == [.report, .persist])
        #expect(flow.state.update?.healthy == true && !flow.awaitsHealthCheck)
        #expect(flow.handle(.synced, now: now) == [.commit])
        #expect(flow.handle(.synced, now: now) == [], "asked once while it runs")
    }

    @Test("no check configured: today's behaviour, a sync commits")
    func noCheck() throws {
        var (flow, effects) = try booted(ConfirmPolicy())
        #expect(effects == [.report, .persist])
        #expect(!flow.awaitsHealthCheck)
        #expect(flow.handle(.synced, now: now) == [.commit])
    }

    @Test("a failing check is tried its attempts, then rolled back once; the next boot of the old version reports the rollback")
    func failsAndRollsBack() throws {
        var (flow, _) = try booted(gated)
        drain(&flow)
        #expect(
            flow.handle(.healthChecked(passed: false, detail: "exit 1: app down"), now: now) == [
                .report, .persist, .arm(.healthCheck, after: .seconds(30)),
            ])
        let takeReport1 = flow.takeReport()
        #expect(takeReport1?.reason == "health check attempt 1 of 3 failed: exit 1: app down")
        #expect(flow.handle(.synced, now: now) == [], "never committed while the check fails")
        #expect(
            flow.handle(.healthChecked(passed: false, detail: "timed out (killed)"), now: now) == [
                .report, .persist, .arm(.healthCheck, after: .seconds(30)),
            ])
        drain(&flow)
        #expect(flow.handle(.healthChecked(passed: false, detail: "exit 1: app down"), now: now) == [.report, .persist, .rollback])
        #expect(flow.phase == .rollingBack)
        let report = flow.takeReport()
        #expect(report?.phase == .rollingBack && report?.reason == "the health check failed 3 times, last: exit 1: app down")
        #expect(flow.handle(.rollbackExited(success: true, detail: "exit 0"), now: now) == [], "not started: refused")
        let rollbackStarts2 = flow.rollbackStarts()
        #expect(rollbackStarts2)
        let rollbackStarts3 = flow.rollbackStarts()
        #expect(!rollbackStarts3, "at most once")
        #expect(flow.state.update?.rollbackRan == true && flow.state.update?.rollbackBootID == "boot-2")
        #expect(flow.handle(.rollbackExited(success: true, detail: "exit 0"), now: now) == [.reboot])

        // Restarted before the reboot: the reboot is asked for again, the rollback never.
        var again = UpdateFlow(state: flow.state, maximumFailedAttempts: 3, confirmation: gated)
        #expect(again.resume(version: new, bootID: "boot-2", now: now) == [.reboot])
        // The old version boots: failed, reported once, remembered, the floor unchanged.
        #expect(again.resume(version: old, bootID: "boot-3", now: now) == [.discardImage, .report, .persist])
        #expect(again.phase == .failed)
        let takeReport4 = again.takeReport()
        #expect(
            takeReport4?.reason
                == "rolled back: 2.0.0 runs again after 2.1.0 failed (the health check failed 3 times, last: exit 1: app down)")
        #expect(again.state.highestAccepted == "2.0.0")
        #expect(again.state.remembers("d1") && again.state.installerRan("d1"))
        #expect(again.handle(.offered(digest: "d1", manifest: try manifest("2.1.0"), refusal: nil, running: old), now: now) == [])
        #expect(again.resume(version: old, bootID: "boot-4", now: now) == [], "reported once")
    }

    @Test("stopped after the rollback was decided but before it started: it starts at the next start; after it started: never again")
    func rollbackAtMostOnce() throws {
        var (flow, _) = try booted(gated)
        for _ in 0..<3 { _ = flow.handle(.healthChecked(passed: false, detail: "exit 1"), now: now) }
        #expect(flow.phase == .rollingBack && flow.state.update?.rollbackRan == false)
        var restarted = UpdateFlow(state: flow.state, maximumFailedAttempts: 3, confirmation: gated)
        #expect(restarted.resume(version: new, bootID: "boot-2", now: now) == [.rollback])
        let rollbackStarts5 = restarted.rollbackStarts()
        #expect(rollbackStarts5)
        var afterStart = UpdateFlow(state: restarted.state, maximumFailedAttempts: 3, confirmation: gated)
        #expect(afterStart.resume(version: new, bootID: "boot-2", now: now) == [.reboot])
        let rollbackStarts6 = afterStart.rollbackStarts()
        #expect(!rollbackStarts6)
        // The reboot brought the new version back: the rollback did not take.
        #expect(afterStart.resume(version: new, bootID: "boot-3", now: now) == [.discardImage, .report, .persist])
        let takeReport7 = afterStart.takeReport()
        #expect(takeReport7?.reason?.hasPrefix("the rollback did not take: 2.1.0 still runs after a reboot") == true)
    }

    @Test("a rollback command that fails: the update fails, uncommitted; without a rollback command the same")
    func rollbackFails() throws {
        var (flow, _) = try booted(gated)
        for _ in 0..<3 { _ = flow.handle(.healthChecked(passed: false, detail: "exit 1"), now: now) }
        let rollbackStarts8 = flow.rollbackStarts()
        #expect(rollbackStarts8)
        drain(&flow)
        #expect(flow.handle(.rollbackExited(success: false, detail: "exit 4"), now: now) == [.discardImage, .report, .persist])
        #expect(flow.phase == .failed && flow.takeReport()?.reason?.hasSuffix("the rollback command failed: exit 4") == true)

        var policy = gated
        policy.rollback = false
        (flow, _) = try booted(policy)
        for _ in 0..<3 { _ = flow.handle(.healthChecked(passed: false, detail: "exit 1"), now: now) }
        #expect(flow.phase == .failed)
        #expect(flow.state.update?.reason?.hasSuffix("no firmware.rollback is configured: the new version stays, uncommitted") == true)
    }

    @Test("the deadline counts boot time across reboots of the new version; passed, the version is rolled back")
    func deadline() throws {
        var (flow, _) = try booted(gated)
        #expect(flow.confirmRemaining == .seconds(600))
        #expect(flow.handle(.confirmClock(bootID: "boot-2", uptime: .seconds(100)), now: now) == [.persist, deadline(600)])
        #expect(flow.handle(.confirmClock(bootID: "boot-2", uptime: .seconds(400)), now: now) == [.persist, deadline(300)])
        #expect(flow.confirmRemaining == .seconds(300))
        // A reboot of the new version: the new boot's clock starts again, the time kept.
        var restarted = UpdateFlow(state: flow.state, maximumFailedAttempts: 3, confirmation: gated)
        #expect(restarted.resume(version: new, bootID: "boot-3", now: now) == [.healthCheck])
        #expect(restarted.handle(.confirmClock(bootID: "boot-3", uptime: .seconds(20)), now: now) == [.persist, deadline(300)])
        #expect(restarted.confirmRemaining == .seconds(300))
        // A wall-clock jump changes nothing: only boot time counts.
        #expect(
            restarted.handle(.confirmClock(bootID: "boot-3", uptime: .seconds(319)), now: now.adding(.seconds(86400 * 365))) == [
                .persist, deadline(1),
            ])
        #expect(restarted.phase == .confirming)
        #expect(restarted.handle(.confirmClock(bootID: "boot-3", uptime: .seconds(320)), now: now) == [.report, .persist, .rollback])
        #expect(restarted.state.update?.reason == "not confirmed within 10m: its health check has not run to an end")

        // Healthy, but the server is never reached.
        (flow, _) = try booted(gated)
        _ = flow.handle(.healthChecked(passed: true, detail: "exit 0"), now: now)
        _ = flow.handle(.confirmClock(bootID: "boot-2", uptime: .seconds(1)), now: now)
        _ = flow.handle(.confirmClock(bootID: "boot-2", uptime: .seconds(601)), now: now)
        #expect(flow.phase == .rollingBack && flow.state.update?.reason == "not confirmed within 10m: no sync with the server succeeded")
    }

    @Test("the bootloader falling back while the new version is confirmed: a rollback, reported, no commit")
    func fallbackWhileConfirming() throws {
        var (flow, _) = try booted(gated)
        drain(&flow)
        #expect(flow.handle(.booted(version: new, bootID: "boot-3"), now: now) == [], "another boot of the new version: still confirming")
        #expect(flow.handle(.booted(version: old, bootID: "boot-4"), now: now) == [.discardImage, .report, .persist])
        let takeReport9 = flow.takeReport()
        #expect(takeReport9?.reason == "rolled back: 2.0.0 booted while 2.1.0 was being confirmed")
        #expect(flow.handle(.synced, now: now) == [])
    }

    @Test("the confirmation's progress survives the state file; an older agent's confirming record is confirmed with the check")
    func persisted() throws {
        var (flow, _) = try booted(gated)
        _ = flow.handle(.healthChecked(passed: false, detail: "exit 1"), now: now)
        _ = flow.handle(.confirmClock(bootID: "boot-2", uptime: .seconds(5)), now: now)
        _ = flow.handle(.confirmClock(bootID: "boot-2", uptime: .seconds(65)), now: now)
        let text = flow.state.json.text
        let read = try FirmwareState(json: JSONValue.parse(Array(text.utf8), file: "state.json"))
        #expect(read == flow.state)
        #expect(read.update?.healthAttempts == 1 && read.update?.confirmElapsedMilliseconds == 60_000)

        var legacy = flow.state
        legacy.update?.healthy = false
        legacy.update?.healthAttempts = 0
        legacy.update?.confirmMark = nil
        legacy.update?.confirmElapsedMilliseconds = 0
        var stripped = legacy.json.text
        for key in ["healthy", "healthAttempts", "confirmElapsedMilliseconds", "rollbackRan"] {
            stripped = stripped.split(separator: "\n").filter { !$0.contains("\"\(key)\"") }.joined(separator: "\n")
        }
        let old = try FirmwareState(json: JSONValue.parse(Array(stripped.utf8), file: "state.json"))
        var resumed = UpdateFlow(state: old, maximumFailedAttempts: 3, confirmation: gated)
        #expect(resumed.resume(version: new, bootID: "boot-2", now: now) == [.healthCheck])
    }
}
