import FireAgent
import Foundation
import Testing
import TinyFireCore

@testable import TinyFire

/// libfaketime for a dynamically linked fire-agent (LD_PRELOAD does not reach a static binary,
/// such as the release build cross/test.sh runs under qemu): the wall clock follows a file the
/// test rewrites; the monotonic and boot clocks stay real.
struct FakeClock {
    /// The library for this process's own architecture: under qemu-aarch64 the host's x86_64 file
    /// is visible too, and preloading it into an aarch64 agent is silently ignored by ld.so.
    static let library: String? = {
        #if arch(x86_64)
            let path = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"
        #elseif arch(arm64)
            let path = "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1"
        #else
            let path = ""
        #endif
        return FileManager.default.fileExists(atPath: path) ? path : nil
    }()

    /// Whether `path` is a dynamically linked ELF (has a program interpreter).
    static func isDynamic(_ path: String) -> Bool {
        guard let handle = FileHandle(forReadingAtPath: path), let head = try? handle.read(upToCount: 4096) else { return false }
        return head.range(of: Data("ld-linux".utf8)) != nil
    }

    /// Whether the agent under test can be given a fake clock.
    static var usable: Bool {
        guard library != nil, let agent = try? fireAgentPath() else { return false }
        return isDynamic(agent)
    }

    let file: String

    /// A clock at `offset` (libfaketime syntax: "+0", "+365d", "-1d", "@1970-01-01 00:10:00").
    init(in directory: String, _ offset: String) throws {
        file = directory + "/faketime"
        try set(offset)
    }

    func set(_ offset: String) throws {
        try Data((offset + "\n").utf8).write(to: URL(filePath: file + ".new"))
        rename(file + ".new", file)
    }

    /// The environment that puts the agent on this clock.
    var environment: [String: String] {
        var environment = ProcessInfo.processInfo.environment
        environment["LD_PRELOAD"] = FakeClock.library
        environment["FAKETIME_TIMESTAMP_FILE"] = file
        environment["FAKETIME_NO_CACHE"] = "1"
        environment["FAKETIME_DONT_FAKE_MONOTONIC"] = "1"
        for name in ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "FIRE_AGENT_FIRMWARE_EXIT_AT"] { environment[name] = nil }
        return environment
    }
}

@Suite("clock: the floor, the kernel's sync flag, ages on the boot clock")
struct ClockUnitTests {
    @Test("the verdict: below the floor is untrusted; unsynchronized is untrusted only when sync is required")
    func verdicts() {
        let floor = WallTime(secondsSince1970: 1_800_000_000)
        #expect(
            ClockVerdict.judge(now: WallTime(secondsSince1970: 600), floor: floor, synchronized: true, requireSync: false)
                == .belowFloor(floor: floor))
        #expect(ClockVerdict.judge(now: floor, floor: floor, synchronized: false, requireSync: true) == .unsynchronized)
        #expect(ClockVerdict.judge(now: floor, floor: floor, synchronized: false, requireSync: false) == .trusted)
        #expect(ClockVerdict.judge(now: floor, floor: floor, synchronized: true, requireSync: true) == .trusted)
        #expect(ClockVerdict.belowFloor(floor: floor).reason.contains("2027-01-15"))
    }

    @Test("the build time is a floor; a saved floor raises it; it is saved only while synchronized, at most hourly")
    func floors() throws {
        let directory = try agentScratch("clock-floor")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        #expect(WallClock.buildTime > WallTime(secondsSince1970: 1_767_225_600), "the build time is not read: \(WallClock.buildTime)")
        #expect(WallClock.buildTime <= WallTime.now())
        #expect(WallClock.buildTime.date <= Date() && WallTime(WallClock.buildTime.date) == WallClock.buildTime)
        // Not synchronized (no kernel flag we can set here, no timesyncd flag file): nothing saved.
        let missingFlag = directory + "/no-flag"
        let unsynced = WallClock(floorFile: directory + "/clock-floor", requireSync: false, flagFile: missingFlag)
        if !unsynced.synchronized {
            #expect(unsynced.remember() == nil)
            #expect(!FileManager.default.fileExists(atPath: directory + "/clock-floor"))
        }
        // systemd-timesyncd's flag says synchronized: saved once.
        _ = FileManager.default.createFile(atPath: directory + "/synchronized", contents: nil)
        let synced = WallClock(floorFile: directory + "/clock-floor", requireSync: true, flagFile: directory + "/synchronized")
        #expect(synced.synchronized && synced.verdict().isTrusted)
        #expect(synced.remember() == nil)
        let saved = try String(contentsOfFile: directory + "/clock-floor", encoding: .utf8)
        #expect(abs((Double(saved.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0) - Date().timeIntervalSince1970) < 5)
        // A floor a year ahead (the clock was stepped back after it was saved) holds stamping back.
        try Data("\(Int(Date().timeIntervalSince1970) + 365 * 86400)\n".utf8).write(to: URL(filePath: directory + "/clock-floor"))
        let ahead = WallClock(floorFile: directory + "/clock-floor", requireSync: false, flagFile: missingFlag)
        #expect(!ahead.mayStamp())
        if case .belowFloor = ahead.verdict() {} else { Issue.record("a clock below a saved floor is trusted: \(ahead.verdict())") }
    }

    @Test("a record's age: the boot clock in this boot; across boots, the wall clock only when trusted and past the build floor")
    func ages() throws {
        let boot = try #require(BootInstant.now(), "no boot id on this kernel")
        func record(wallAgo: TimeInterval, bootClock: BootInstant?) -> OfflineQueue.Record {
            OfflineQueue.Record(
                sequence: 1, idempotencyKey: "k", enqueuedAt: Date().addingTimeInterval(-wallAgo), enqueuedOnBootClock: bootClock,
                method: .post, url: "http://127.0.0.1:1/write", headers: [:], bodyLength: 0, bodyIsFile: false)
        }
        let trusting = WallClock(floorFile: nil, requireSync: false)
        // Queued 10 s ago by the boot clock, "a year ago" by a wall clock that jumped: 10 s.
        let tenSecondsAgo = BootInstant(bootID: boot.bootID, uptimeMilliseconds: boot.uptimeMilliseconds - 10_000)
        let age = try #require(trusting.age(of: record(wallAgo: 365 * 86400, bootClock: tenSecondsAgo)))
        #expect(age >= .seconds(10) && age < .seconds(20), "\(age)")
        // Another boot: the wall clock, when trusted.
        let otherBoot = BootInstant(bootID: [UInt8](repeating: 7, count: 16), uptimeMilliseconds: 5)
        let wallAge = try #require(trusting.age(of: record(wallAgo: 7200, bootClock: otherBoot)))
        #expect(wallAge >= .seconds(7199) && wallAge <= .seconds(7210))
        // Stamped by a clock that was plainly wrong (1970): unknown.
        #expect(trusting.age(of: record(wallAgo: Date().timeIntervalSince1970 - 86400, bootClock: otherBoot)) == nil)
        // An untrusted clock now (a floor a year ahead): unknown.
        let untrusted = WallClock(floorFile: nil, requireSync: false, buildFloor: WallTime(Date().addingTimeInterval(365 * 86400)))
        #expect(untrusted.age(of: record(wallAgo: 7200, bootClock: nil)) == nil)
    }

    @Test("queue records: version 2 keeps the boot clock; version 1 records (no boot clock) are still read")
    func journalVersions() throws {
        let boot = try #require(BootInstant.now())
        let payload = OfflineQueueJournal.Payload(
            method: "POST", url: "http://h/write", idempotencyKey: "k1", headers: [("A", "b")], body: .inline([1, 2, 3]),
            enqueuedOnBootClock: boot)
        let encoded = OfflineQueueJournal.encodePayload(payload)
        #expect(encoded.first == 2)
        func decode(_ bytes: [UInt8]) -> OfflineQueueJournal.Payload? {
            bytes.withUnsafeBytes { try? OfflineQueueJournal.decodePayload($0) }
        }
        #expect(decode(encoded) == payload)
        // Version 1, byte for byte as earlier releases wrote it: no boot-clock part.
        // Built piece by piece: one long `+` chain takes some compilers too long to type-check.
        var old: [UInt8] = [1, 4]
        old.append(contentsOf: Array("POST".utf8))
        old.append(contentsOf: [13, 0] as [UInt8])
        old.append(contentsOf: Array("http://h/path".utf8))
        old.append(2)
        old.append(contentsOf: Array("k2".utf8))
        old.append(contentsOf: [0, 0, 0] as [UInt8])
        let v1 = try #require(decode(old))
        #expect(v1.url == "http://h/path" && v1.idempotencyKey == "k2" && v1.enqueuedOnBootClock == nil)
        // A version 1 record with trailing bytes is still damage.
        old.append(0)
        #expect(decode(old) == nil)
        #expect(BootInstant.parseUUID(ArraySlice("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0\n".utf8))?.count == 16)
        #expect(BootInstant.parseUUID(ArraySlice("not-a-uuid".utf8)) == nil)
    }

    @Test("a manifest's expiry is checked only against a trusted clock; expiry and waits are never final")
    func manifestDecisions() throws {
        let manifest = try FirmwareManifest.parse(
            Array(
                #"{"version": "2.0.0", "compatible": ["b"], "image": "i.bin", "size": 1, "sha256": "\#(String(repeating: "a", count: 64))", "expires": "2020-01-01T00:00:00Z"}"#
                    .utf8), from: AbsoluteURL("http://h/manifest.json")!)
        let floor = WallTime.now()
        func check(_ now: WallTime, _ verdict: ClockVerdict) -> FirmwareRefusal.Kind? {
            do throws(FirmwareRefusal) {
                try UpdateDecision.check(manifest, deviceType: "b", highestAccepted: nil, allowDowngrade: false, now: now, clock: verdict)
                return nil
            } catch {
                return error.kind
            }
        }
        // 1970 (below the floor): the expired manifest is not installed, and not refused for good.
        #expect(check(WallTime(secondsSince1970: 600), .belowFloor(floor: floor)) == .clockUntrusted)
        #expect(check(.now(), .unsynchronized) == .clockUntrusted)
        #expect(check(.now(), .trusted) == .expired)
        // The flow does not remember an expired offer: the next poll looks again.
        var flow = UpdateFlow(state: FirmwareState(), maximumFailedAttempts: 3)
        _ = flow.handle(
            .offered(digest: "d1", manifest: manifest, refusal: FirmwareRefusal(kind: .expired, message: "expired"), running: nil),
            now: .now())
        #expect(!flow.state.remembers("d1") && flow.phase == .failed)
        let effects = flow.handle(.offered(digest: "d1", manifest: manifest, refusal: nil, running: nil), now: .now())
        #expect(flow.phase == .downloading, "\(effects)")
    }
}

@Suite("clock: a wrong or jumping wall clock drops, dead-letters, stalls and stamps nothing (libfaketime)", .serialized)
struct ClockJumpTests {
    @Test(
        "the wall clock jumps a year ahead, a day back, then to 1970: nothing dead-lettered, stalled or stamped before the floor",
        .enabled(if: FakeClock.usable, "needs libfaketime and a dynamically linked fire-agent"))
    func jumps() async throws {
        let directory = try agentScratch("clock-jump")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let recorder = try RecordingInflux(directory: directory)
        defer { recorder.stop() }
        let text = """
            {
              device: { id: "board-clock" },
              server: { url: "http://127.0.0.1:\(recorder.port)", connectTimeout: "2s" },
              telemetry: { influx: { database: "fleet", precision: "ns" }, spoolDirectory: "spool", syncInterval: "1s", jitter: 0,
                           collectors: { cpu: false, memory: false, load: false, uptime: false, disk: false, network: false,
                                         thermal: false, pressure: false, agent: false } },
              queue: { directory: "queue", maxRecordAge: "1h", retry: { initial: "200ms", maximum: "1s" } },
              daemon: { statusFile: "status.json" },
            }
            """
        try FileManager.default.createDirectory(atPath: directory + "/spool", withIntermediateDirectories: true)
        try Data(text.utf8).write(to: URL(filePath: directory + "/agent.json5"))
        let clock = try FakeClock(in: directory, "+0")
        let agent = try ChildProcess(
            try fireAgentPath(), ["run", "--config", directory + "/agent.json5"], environment: clock.environment,
            stdout: .file(directory + "/log"), stderr: .file(directory + "/log"))
        defer { agent.stop() }
        func status() -> AgentStatus? {
            guard let status = try? AgentStatus.read(path: directory + "/status.json"), status.pid == agent.pid else { return nil }
            return status
        }
        func log() -> String { (try? String(contentsOfFile: directory + "/log", encoding: .utf8)) ?? "" }
        let base = Int64(Date().timeIntervalSince1970) * 1_000_000_000
        try dropInSpool(
            (0..<50).map { "clk,phase=before seq=\($0)i \(base + Int64($0))" }.joined(separator: "\n") + "\n", as: "a.lp", in: directory)
        #expect(
            await eventually(within: .seconds(60)) { (status()?.queue.headFailures ?? 0) >= 2 },
            "the batch was never refused: \(log().suffix(2000))")

        // A year ahead, as a board without an RTC sees it when NTP arrives late, or a bad RTC.
        try clock.set("+365d")
        #expect(
            await eventually(within: .seconds(30)) {
                (status()?.updatedAt.date ?? .distantPast) > Date().addingTimeInterval(300 * 86400)
            }, "libfaketime did not move the agent's clock")
        try await Task.sleep(for: .seconds(4))
        let afterJump = try #require(status())
        #expect(afterJump.deadLetters == 0, "a refused batch was dead-lettered for an age the wall clock invented")
        #expect(afterJump.queue.records >= 1)

        // A day back (still ahead of the floor): nothing waits for the wall clock to catch up.
        try clock.set("+364d")
        try dropInSpool(
            (50..<100).map { "clk,phase=after seq=\($0)i \(base + Int64($0))" }.joined(separator: "\n") + "\n", as: "b.lp", in: directory)
        try await Task.sleep(for: .seconds(3))
        recorder.open()
        #expect(
            await eventually(within: .seconds(60)) { ((try? recorder.lines()) ?? []).count >= 100 && status()?.queue.records == 0 },
            "not delivered: \(status().map { "\($0.queue)" } ?? "no status") \(log().suffix(2000))")
        #expect(try recorder.lines().count == 100, "some lines sent twice or lost")

        // 1970, as a board without an RTC boots: below the floor (the build time), so no point
        // is stamped; a spool line without a time waits in its file.
        try clock.set("@1970-01-01 00:10:00")
        #expect(
            await eventually(within: .seconds(30)) { log().contains("clock before its floor") }, "\(log().suffix(2000))")
        try dropInSpool("clk,phase=untimed seq=200i\n", as: "c.lp", in: directory)
        try await Task.sleep(for: .seconds(3))
        #expect(FileManager.default.fileExists(atPath: directory + "/spool/c.lp"), "a line was stamped by a 1970 clock")
        #expect(!(try recorder.lines()).contains { $0.contains("phase=untimed") })
        // The clock is set: the line goes, stamped after the floor.
        try clock.set("+0")
        #expect(
            await eventually(within: .seconds(60)) { ((try? recorder.lines()) ?? []).contains { $0.contains("phase=untimed") } },
            "\(log().suffix(2000))")
        let untimed = try #require(try recorder.lines().first { $0.contains("phase=untimed") })
        let stamp = try #require(untimed.split(separator: " ").last.flatMap { Int64($0) })
        #expect(stamp >= WallClock.buildTime.secondsSince1970 * 1_000_000_000, "\(untimed)")
        #expect(status()?.deadLetters == 0)
        let deadLetters = (try? FileManager.default.contentsOfDirectory(atPath: directory + "/dead-letters")) ?? []
        let reasons = deadLetters.filter { $0.hasSuffix(".json") }.map {
            (try? String(contentsOfFile: directory + "/dead-letters/" + $0, encoding: .utf8)) ?? $0
        }
        #expect(deadLetters.isEmpty, "\(reasons)")
    }

    @Test(
        "a manifest's expiry waits for a trusted clock: not installed at 1970, refused when the clock is set, installed once a wrong clock is corrected",
        .enabled(if: FakeClock.usable, "needs libfaketime and a dynamically linked fire-agent"))
    func manifestExpiry() async throws {
        let server = try FirmwareServer("clock")
        defer { server.remove() }
        try server.vendor.makeEC("ec")
        let board = try FakeBoard(in: server.vendor.directory + "/board", version: "1.0.0")
        let image = FirmwareServer.image(size: 64 << 10, seed: 70)
        try server.publish(version: "2.0.0", image: image, expires: "2020-01-01T00:00:00Z")
        let config = try board.writeConfig(server: server)
        let clock = try FakeClock(in: board.directory, "@1970-01-01 00:10:00")
        let agent = try ChildProcess(
            try fireAgentPath(), ["run", "--config", config], environment: clock.environment, stdout: .file(board.directory + "/log"),
            stderr: .file(board.directory + "/log"))
        defer { agent.stop() }
        func result() -> String {
            guard let status = board.status, status.pid == agent.pid else { return "" }
            return status.firmware?.lastCheckResult ?? ""
        }
        func log() -> String { (try? String(contentsOfFile: board.directory + "/log", encoding: .utf8)) ?? "" }
        // 1970: an expiry of 2020 is "in the future" to this clock; the manifest must wait.
        #expect(await eventually(within: .seconds(60)) { result().hasPrefix("waiting: ") }, "\(result()) \(log().suffix(2000))")
        try await Task.sleep(for: .seconds(3))
        #expect(board.installs.isEmpty, "an expired manifest was installed on a 1970 clock")
        #expect(board.status?.clock?.contains("before") == true, "\(board.status?.clock ?? "no clock in the status")")
        // The clock is set: now it is judged, and refused as expired.
        try clock.set("+0")
        #expect(await eventually(within: .seconds(60)) { result().contains("expired") }, "\(result()) \(log().suffix(2000))")
        #expect(board.installs.isEmpty)
        // A clock a year ahead refuses a good manifest as expired; corrected, the same manifest installs.
        try clock.set("+365d")
        let expires = Date().addingTimeInterval(30 * 86400)
        try server.publish(version: "3.0.0", image: image, expires: rfc3339Timestamp(expires))
        #expect(await eventually(within: .seconds(60)) { result().contains("expired: the manifest for 3.0.0") }, "\(result())")
        #expect(board.installs.isEmpty)
        try clock.set("+0")
        #expect(
            await eventually(within: .seconds(60)) { board.installs.contains { $0.hasSuffix(" 3.0.0") } },
            "an expired refusal was final: \(result()) \(log().suffix(2000))")
    }
}
