import Testing
import TinyFireCore

@testable import FireAgent

/// The flow's waits as states: which timers it arms, what their firing means, and what a move
/// to another phase or update drops. Fed events, read effects: no thread, no clock.
@Suite("Firmware: the update flow's waits and retries (timers, gates) as states")
struct UpdateWaitsTests {
    let now = WallTime(secondsSince1970: 1_800_000_000)
    let old = SemanticVersion("2.0.0")!
    let policy = WaitPolicy(
        retryInitial: .seconds(10), retryMaximum: .seconds(80), healthInterval: .seconds(7), linkRecheck: .seconds(5),
        gateRecheck: .seconds(15))

    func manifest(_ version: String) throws -> FirmwareManifest {
        try FirmwareManifest.parse(
            Array(
                #"{"version": "\#(version)", "compatible": ["gw"], "image": "gw.img", "size": 1000, "sha256": "\#(String(repeating: "ab", count: 32))"}"#
                    .utf8), from: AbsoluteURL("https://u.example/m.json")!)
    }

    /// A flow downloading 2.1.0, its jitter fixed.
    func downloading(confirmation: ConfirmPolicy = ConfirmPolicy()) throws -> UpdateFlow {
        var flow = UpdateFlow(
            state: FirmwareState(), maximumFailedAttempts: 5, confirmation: confirmation, waitPolicy: policy, random: { 0.5 })
        _ = flow.handle(.offered(digest: "d1", manifest: try manifest("2.1.0"), refusal: nil, running: old), now: now)
        return flow
    }

    @Test(
        "each gate kind arms its own period: the link every 5 s, the install gate every 15 s, space on a growing backoff that starts over once it fits",
        arguments: [
            (GateKind.link, [5, 5, 5]), (GateKind.install, [15, 15, 15]),
            // 10 s doubling (jitter 0.5 is none): 10, 20, 40, capped at 80.
            (GateKind.space, [10, 20, 40, 80, 80]),
        ])
    func gatePeriods(kind: GateKind, seconds: [Int64]) throws {
        var flow = try downloading()
        for expected in seconds {
            let effects = flow.handle(.gateClosed(step: .download(fromZero: false), reason: "r", kind: kind), now: now)
            #expect(effects.first == .arm(.gate, after: .seconds(expected)))
            #expect(flow.handle(.timerFired(.gate), now: now) == [.download(fromZero: false)])
        }
        _ = flow.handle(.gateOpened, now: now)
        let first = flow.handle(.gateClosed(step: .download(fromZero: false), reason: "r", kind: kind), now: now).first
        #expect(first == .arm(.gate, after: .seconds(seconds[0])), "starts over after the gate opened")
    }

    @Test("a note per reason: a second reason is reported, the same one again is not; the end clears it, reported once")
    func notes() throws {
        var flow = try downloading()
        _ = flow.takeReport()
        let link = UpdateEvent.gateClosed(step: .download(fromZero: false), reason: "the route goes over wwan0", kind: .link)
        #expect(flow.handle(link, now: now) == [.arm(.gate, after: .seconds(5)), .report, .persist])
        #expect(flow.handle(link, now: now) == [.arm(.gate, after: .seconds(5))])
        let space = UpdateEvent.gateClosed(step: .download(fromZero: false), reason: "too little space", kind: .space)
        #expect(flow.handle(space, now: now) == [.arm(.gate, after: .seconds(10)), .report, .persist])
        #expect(flow.state.update?.reason == "waiting: too little space")
        #expect(flow.handle(.gateOpened, now: now) == [.report, .persist])
        #expect(flow.state.update?.reason == nil)
        #expect(flow.handle(.gateOpened, now: now) == [])
    }

    @Test("a failed attempt arms the retry; it fires a download only while the update still downloads")
    func downloadRetry() throws {
        var flow = try downloading()
        #expect(
            flow.handle(.downloadFailed(reason: "reset", permanent: false, serverReached: true), now: now) == [
                .persist, .arm(.downloadRetry, after: .seconds(10)),
            ])
        #expect(
            flow.handle(.downloadFailed(reason: "reset", permanent: false, serverReached: true), now: now) == [
                .persist, .arm(.downloadRetry, after: .seconds(20)),
            ])
        #expect(flow.waits.armed == [.downloadRetry])
        #expect(flow.handle(.timerFired(.downloadRetry), now: now) == [.download(fromZero: false)])
        #expect(flow.handle(.timerFired(.downloadRetry), now: now) == [], "fired once")
        // Armed again, then the image arrives: the retry is dropped.
        _ = flow.handle(.downloadFailed(reason: "reset", permanent: false, serverReached: false), now: now)
        _ = flow.handle(.downloadFinished, now: now)
        #expect(flow.phase == .verifying && flow.waits.armed.isEmpty)
        #expect(flow.handle(.timerFired(.downloadRetry), now: now) == [])
    }

    @Test("a held step is dropped when its phase is left or its update ends; a new offer forgets every wait")
    func heldStepsEnd() throws {
        var flow = try downloading()
        _ = flow.handle(.gateClosed(step: .download(fromZero: false), reason: "too little space", kind: .space), now: now)
        _ = flow.handle(.downloadFailed(reason: "404", permanent: true, serverReached: true), now: now)
        #expect(flow.phase == .failed && flow.waits == UpdateWaits())
        #expect(flow.handle(.timerFired(.gate), now: now) == [])

        var superseded = try downloading()
        _ = superseded.handle(.gateClosed(step: .download(fromZero: false), reason: "the route goes over wwan0", kind: .link), now: now)
        _ = superseded.handle(.downloadFailed(reason: "reset", permanent: false, serverReached: true), now: now)
        #expect(superseded.waits.armed == [.gate, .downloadRetry])
        _ = superseded.handle(.offered(digest: "d2", manifest: try manifest("2.2.0"), refusal: nil, running: old), now: now)
        #expect(superseded.state.update?.version == "2.2.0" && superseded.waits == UpdateWaits())
    }

    @Test("confirming: the health check's pause and the deadline are armed by the flow, fire their steps, and end with the phase")
    func confirming() throws {
        let gated = ConfirmPolicy(healthCheck: true, healthAttempts: 3, rollback: true, timeout: .seconds(600))
        var flow = try downloading(confirmation: gated)
        _ = flow.handle(.downloadFinished, now: now)
        _ = flow.handle(.verified(nil, bootID: "boot-1"), now: now)
        _ = flow.handle(.installerExited(success: true, rebootRequired: true, detail: ""), now: now)
        _ = flow.handle(.booted(version: SemanticVersion("2.1.0"), bootID: "boot-2"), now: now)
        #expect(flow.phase == .confirming)
        #expect(
            flow.handle(.confirmClock(bootID: "boot-2", uptime: .seconds(50)), now: now) == [
                .persist, .arm(.confirmDeadline, after: .seconds(600)),
            ])
        #expect(flow.handle(.healthChecked(passed: false, detail: "exit 1"), now: now).last == .arm(.healthCheck, after: .seconds(7)))
        #expect(flow.waits.armed == [.confirmDeadline, .healthCheck])
        #expect(flow.handle(.timerFired(.healthCheck), now: now) == [.healthCheck])
        #expect(flow.handle(.timerFired(.confirmDeadline), now: now) == [.accountConfirmation])
        _ = flow.handle(.healthChecked(passed: false, detail: "exit 1"), now: now)
        _ = flow.handle(.confirmClock(bootID: "boot-2", uptime: .seconds(100)), now: now)
        #expect(flow.waits.armed == [.confirmDeadline, .healthCheck])
        // Passed and synced: committed, and nothing of the confirmation fires afterwards.
        _ = flow.handle(.healthChecked(passed: true, detail: "exit 0"), now: now)
        _ = flow.handle(.synced, now: now)
        _ = flow.handle(.commitExited(success: true, detail: "exit 0"), now: now)
        #expect(flow.phase == .done && flow.waits.armed.isEmpty)
        #expect(flow.handle(.timerFired(.healthCheck), now: now) == [])
        #expect(flow.handle(.timerFired(.confirmDeadline), now: now) == [])
    }
}
