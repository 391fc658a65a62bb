import Foundation
import Testing
import TinyFireCore

@testable import FireAgent

@Suite("Firmware: install windows, the inhibit lock and the gated install in the flow")
struct UpdateGateTests {
    @Test("install windows: days, ranges, past midnight, whole days; malformed ones named")
    func windows() throws {
        // (window, weekday (0 Sunday), minute of the day, inside)
        let cases: [(String, Int, Int, Bool)] = [
            ("02:00-05:00", 3, 120, true), ("02:00-05:00", 3, 299, true), ("02:00-05:00", 3, 300, false), ("02:00-05:00", 3, 119, false),
            ("Mon-Fri 01:30-04:00", 1, 100, true), ("Mon-Fri 01:30-04:00", 6, 100, false), ("Mon-Fri 01:30-04:00", 0, 100, false),
            ("Sat,Sun 00:00-24:00", 6, 0, true), ("Sat,Sun 00:00-24:00", 0, 1439, true), ("Sat,Sun 00:00-24:00", 1, 0, false),
            // Past midnight: Friday 22:00 to Saturday 02:00, not Friday 01:00.
            ("Fri 22:00-02:00", 5, 1380, true), ("Fri 22:00-02:00", 6, 60, true), ("Fri 22:00-02:00", 5, 60, false),
            ("Fri 22:00-02:00", 6, 1380, false),
            // A day range that wraps the week.
            ("Sat-Mon 03:00-04:00", 0, 200, true), ("Sat-Mon 03:00-04:00", 2, 200, false),
            ("mon,WED 03:00-04:00", 3, 200, true),
        ]
        for (text, weekday, minute, inside) in cases {
            let window = try InstallWindow(parsing: text)
            #expect(window.contains(weekday: weekday, minute: minute) == inside, "\(text) at day \(weekday) minute \(minute)")
        }
        for bad in ["", "2:00-5:00", "02:00", "02:00-02:00", "Funday 02:00-03:00", "02:00-25:00", "02:60-03:00", "Mon 02:00-03:00 x"] {
            #expect(throws: InstallWindowError.self, "\(bad)") { try InstallWindow(parsing: bad) }
        }
    }

    @Test("the config names a bad window and an unknown interface type")
    func configProblems() throws {
        do {
            _ = try AgentConfig.parse(
                Data(
                    #"""
                    { server: { url: "http://127.0.0.1:1" }, telemetry: { influx: { database: "d" } },
                      firmware: { manifestURL: "http://127.0.0.1:1/m.json", keys: ["/nonexistent.pub"], deviceType: "b", versionFile: "/v",
                                  install: ["i", "{file}"], installWindow: ["Mon-Fri 02:00-05:00", "Sun 25:00-26:00"],
                                  avoidInterfaces: ["cellular", "satellite"] } }
                    """#.utf8), file: "/tmp/agent.json5", machineIDPath: "/nonexistent")
            Issue.record("accepted")
        } catch {
            let text = "\(error)"
            #expect(text.contains("firmware.installWindow[1]") && text.contains("\"Sun 25:00-26:00\" needs a time range"), "\(text)")
            #expect(text.contains("firmware.avoidInterfaces[1]") && text.contains("\"satellite\" is not an interface type"), "\(text)")
        }
    }

    @Test("a gated install: verified, the gate asked; installed only on installAllowed, once; a wait is reported once per reason")
    func gatedFlow() throws {
        let now = WallTime(secondsSince1970: 1_800_000_000)
        let manifest = try FirmwareManifest.parse(
            Array(
                #"{"version": "2.1.0", "compatible": ["gw"], "image": "gw.img", "size": 1000, "sha256": "\#(String(repeating: "ab", count: 32))"}"#
                    .utf8), from: AbsoluteURL("https://u.example/m.json")!)
        var flow = UpdateFlow(state: FirmwareState(), maximumFailedAttempts: 3, gatedInstall: true)
        _ = flow.handle(.offered(digest: "d1", manifest: manifest, refusal: nil, running: SemanticVersion("2.0.0")), now: now)
        #expect(flow.handle(.installAllowed, now: now) == [], "nothing verified yet")
        _ = flow.handle(.downloadFinished, now: now)
        #expect(flow.handle(.verified(nil, bootID: "b1"), now: now) == [.installGate])
        #expect(flow.phase == .verifying && !flow.state.installerRan("d1"))
        let closed = UpdateEvent.gateClosed(step: .installGate, reason: "outside firmware.installWindow", kind: .install)
        #expect(flow.handle(closed, now: now) == [.arm(.gate, after: .seconds(15)), .report, .persist])
        #expect(flow.handle(closed, now: now) == [.arm(.gate, after: .seconds(15))], "reported once")
        #expect(flow.state.update?.reason == "waiting: outside firmware.installWindow")
        #expect(flow.waits.held == HeldStep(step: .installGate, reason: "outside firmware.installWindow"))
        #expect(flow.handle(.timerFired(.gate), now: now) == [.installGate], "asked again when its timer fires")
        #expect(flow.handle(.timerFired(.gate), now: now) == [], "fired once per arming")
        #expect(flow.handle(.gateOpened, now: now) == [.report, .persist])
        #expect(flow.waits.held == nil && flow.waits.armed.isEmpty && flow.state.update?.reason == nil)
        #expect(flow.handle(.installAllowed, now: now) == [.report, .persist, .install])
        #expect(flow.state.installerRan("d1") && flow.phase == .installing)
        #expect(flow.handle(.installAllowed, now: now) == [], "at most once")
        // A restart in verifying verifies again and asks the gate again: installAllowed before that does nothing.
        var restarted = UpdateFlow(state: FirmwareState(), maximumFailedAttempts: 3, gatedInstall: true)
        _ = restarted.handle(.offered(digest: "d2", manifest: manifest, refusal: nil, running: SemanticVersion("2.0.0")), now: now)
        _ = restarted.handle(.downloadFinished, now: now)
        var again = UpdateFlow(state: restarted.state, maximumFailedAttempts: 3, gatedInstall: true)
        #expect(again.resume(version: SemanticVersion("2.0.0"), bootID: "b1", now: now) == [.verify])
        #expect(again.handle(.installAllowed, now: now) == [])
        // A wait's end clears only a wait's note.
        #expect(again.handle(.gateOpened, now: now) == [])
    }
}
