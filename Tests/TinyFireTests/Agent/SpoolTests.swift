import Foundation
import Testing

@testable import FireAgent

@Suite("spool: bounded lines and durable progress (sans-I/O)")
struct SpoolLineTests {
    func lines(_ bytes: [UInt8], maxLineBytes: Int, chunk: Int) -> ([SpoolLineSplitter.Line], SpoolLineSplitter.Line?) {
        var splitter = SpoolLineSplitter(maxLineBytes: maxLineBytes)
        var out: [SpoolLineSplitter.Line] = []
        var start = 0
        while start < bytes.count {
            let end = min(bytes.count, start + chunk)
            _ = bytes[start..<end].withUnsafeBytes {
                splitter.feed($0) { line in
                    out.append(line)
                    return true
                }
            }
            start = end
        }
        return (out, splitter.finish())
    }

    @Test("lines, offsets and numbers are the same however the bytes arrive; long lines keep a prefix; a torn end is told apart")
    func splitter() {
        let long = String(repeating: "x", count: 300)
        let bytes = Array("a x=1\r\n\nm,\(long) v=1\nlast v=2\nno-end".utf8)
        let (whole, wholeTail) = lines(bytes, maxLineBytes: 64, chunk: bytes.count)
        for chunk in [1, 2, 7, 64] {
            let (pieces, tail) = lines(bytes, maxLineBytes: 64, chunk: chunk)
            #expect(pieces == whole && tail == wholeTail, "chunk \(chunk)")
        }
        #expect(whole.map(\.number) == [1, 2, 3, 4] && whole.map(\.end) == [7, 8, 315, 324])
        #expect(whole[0].content == .bytes(Array("a x=1".utf8)) && whole[1].content == .bytes([]))
        #expect(whole[2].content == .tooLong(prefix: Array(("m," + long).utf8.prefix(200)), length: 307))
        #expect(wholeTail == SpoolLineSplitter.Line(number: 5, end: 330, content: .torn(Array("no-end".utf8))))
        // Resumed at a line's start, numbering and offsets go on from there.
        var resumed = SpoolLineSplitter(maxLineBytes: 64, offset: 315, lineNumber: 3)
        var seen: [SpoolLineSplitter.Line] = []
        _ = bytes[315...].withUnsafeBytes { raw in
            resumed.feed(raw) { line in
                seen.append(line)
                return true
            }
        }
        #expect(seen == [whole[3]])
        // Invalid UTF-8 is refused, not replaced.
        let invalid = SpoolLineSplitter.Line(number: 1, end: 6, content: .bytes([0x6D, 0x20, 0x76, 0x3D, 0xFF]))
        #expect(SpoolLineVerdict.judge(invalid, timestamp: nil) == .refused(text: "m v=\u{FFFD}", reason: "not valid UTF-8"))
    }

    @Test("the progress record: two slots, the newest intact one wins, a torn slot falls back to the other")
    func progressSlots() {
        let record = SpoolProgress(
            name: "a b\n.lp", device: 2049, inode: 77, size: 1 << 30, modified: 1_700_000_000_123_456_789, offset: 4096, lineNumber: 12,
            stamp: 1_700_000_000_000_000_000)
        #expect(SpoolProgress(encoded: record.encoded) == record)
        // A name that is not UTF-8 is kept as its bytes; the refusal fields round-trip.
        let raw = SpoolProgress(
            name: SpoolName(bytes: [0x66, 0xFF, 0xFE, 0x2E, 0x6C, 0x70]), device: 1, inode: 2, size: 100, modified: 3, offset: 10,
            lineNumber: 1, stamp: 4, refusedThrough: 60, refusedLines: 5)
        #expect(SpoolProgress(encoded: raw.encoded) == raw)
        #expect(raw.name.description == "f\\xff\\xfe.lp")
        // A record an older version wrote (version 1) reads with nothing refused yet.
        let old = SpoolProgress(encoded: "spool-progress 1 612e6c70 1 2 100 3 10 1 4\n")
        #expect(old?.name == "a.lp" && old?.refusedThrough == 10 && old?.refusedLines == 0)
        let older = SpoolProgressSlots.encode(nil, sequence: 6)
        var newer = SpoolProgressSlots.encode(record, sequence: 7)
        #expect(SpoolProgressSlots.decode(newer + older)?.record == record)
        #expect(SpoolProgressSlots.decode(older + newer)?.sequence == 7)
        // A write cut short: the slot's checksum fails and the other slot's record stands.
        newer.replaceSubrange(40..<60, with: repeatElement(0, count: 20))
        #expect(SpoolProgressSlots.decode(newer + older)?.sequence == 6)
        #expect(SpoolProgressSlots.decode(Array("garbage\n".utf8)) == nil)
        #expect(SpoolProgress(encoded: "spool-progress 1 zz 1 2 3 4 5 6 7\n") == nil)
    }
}

/// A second local user, for attacks from the board: created once (useradd), its commands run
/// through setpriv with its own uid and gid and no other groups.
enum SpoolAttacker {
    static let name = "tfspool"
    /// The system's Python: a pyenv shim under /root is not the attacker's to run.
    static let python = "/usr/bin/python3"

    static func ids() throws -> (uid: uid_t, gid: gid_t) {
        if getpwnam(name) == nil {
            let useradd =
                FileManager.default.isExecutableFile(atPath: "/usr/sbin/useradd") ? "/usr/sbin/useradd" : (which("useradd") ?? "useradd")
            _ = try runCommand(useradd, ["--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name])
        }
        guard let entry = getpwnam(name) else { throw FixtureError(description: "user \(name) could not be created") }
        return (entry.pointee.pw_uid, entry.pointee.pw_gid)
    }

    /// `setpriv … -- arguments`, as the attacker.
    static func command(_ arguments: [String]) throws -> [String] {
        let (uid, gid) = try ids()
        let setpriv = which("setpriv") ?? "/usr/bin/setpriv"
        return [setpriv, "--reuid=\(uid)", "--regid=\(gid)", "--clear-groups", "--"] + arguments
    }

    /// Runs a command as the attacker to its end; throws when it fails.
    static func run(_ arguments: [String]) throws {
        let full = try command(arguments)
        let result = try runCapturingOutput(full[0], Array(full.dropFirst()))
        guard result.status == 0 else { throw FixtureError(description: "\(arguments) as \(name): \(result.stderr)") }
    }

    /// A spool as OPERATIONS.md sets it up: owned by the agent's user (root here, as the tests
    /// run the agent; `fire-agent` on a board), group-writable by the writers' group (here the
    /// attacker's), sticky.
    static func makeSpool(_ path: String) throws {
        let (_, gid) = try ids()
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        guard chown(path, 0, gid) == 0, chmod(path, 0o1775) == 0 else { throw FixtureError(description: "chown/chmod \(path): \(errno)") }
        // The scratch directory above it must be reachable by the attacker.
        chmod((path as NSString).deletingLastPathComponent, 0o755)
    }
}

@Suite("spool: a local user who may write the spool cannot turn the agent against the board", .serialized)
struct SpoolAttackTests {
    static let secretLine = "secret,k=v token=4242i 1700000000000000000\n"

    /// An agent with collectors off, its spool writable by the attacker, and a root-only file
    /// holding valid line protocol beside it.
    func setUp(_ name: String, influx: InfluxFixture, telemetry extra: String = "") throws -> (
        directory: String, agent: TelemetryAgent, secret: String
    ) {
        let directory = try agentScratch(name)
        try SpoolAttacker.makeSpool(directory + "/spool")
        let secret = directory + "/secret.lp"
        try Data(Self.secretLine.utf8).write(to: URL(filePath: secret))
        chmod(secret, 0o600)
        let collectorsOff =
            "cpu: false, memory: false, load: false, uptime: false, disk: false, network: false, thermal: false, pressure: false, agent: false"
        let text = """
            {
              device: { id: "board-7" },
              server: { url: "\(influx.base)", connectTimeout: "2s", requestTimeout: "20s" },
              telemetry: { influx: { database: "fleet", precision: "ns" }, spoolDirectory: "spool", collectors: { \(collectorsOff) }, \(extra) },
              queue: { directory: "queue" },
            }
            """
        try Data(text.utf8).write(to: URL(filePath: directory + "/agent.json5"))
        let agent = try TelemetryAgent(config: try AgentConfig.load(path: directory + "/agent.json5"), logger: Logger(label: "test"))
        return (directory, agent, secret)
    }

    /// Runs `work` on a thread of its own; fails the test instead of hanging if it does not end
    /// within `guardTime` (a hang guard, far beyond what the work takes anywhere).
    func finishes(within guardTime: Duration = .seconds(300), _ work: @escaping @Sendable () -> Void) -> Bool {
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            work()
            done.signal()
        }
        let seconds = Double(guardTime.components.seconds)
        return done.wait(timeout: .now() + seconds) == .success
    }

    /// Every regular, single-link file under `directory` (what the agent wrote or moved there).
    func agentWrittenText(under directory: String) -> String {
        var text = ""
        for name in (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? [] {
            var info = stat()
            let path = directory + "/" + name
            guard lstat(path, &info) == 0, info.st_mode & S_IFMT == S_IFREG, info.st_nlink == 1 else { continue }
            text += (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
        }
        return text
    }

    func expectSecretUntouched(_ secret: String, _ influx: InfluxFixture, _ directory: String) throws {
        #expect(try String(contentsOfFile: secret, encoding: .utf8) == Self.secretLine, "the root-only file was written")
        #expect(!(try influx.measurements()).contains("secret"), "the root-only file's lines were uploaded")
        #expect(!agentWrittenText(under: directory + "/spool/rejected").contains("token=4242"), "the root-only file was copied out")
    }

    @Test("symlinks, hard links, FIFOs, sockets and directories in the spool are set aside by name: never read, never waited on")
    func hostileEntries() throws {
        let influx = try InfluxFixture()
        let (directory, agent, secret) = try setUp("hostile", influx: influx)
        defer {
            agent.close()
            try? FileManager.default.removeItem(atPath: directory)
        }
        let spool = directory + "/spool"
        try SpoolAttacker.run(["ln", "-s", secret, spool + "/link.lp"])
        try SpoolAttacker.run(["mkfifo", spool + "/fifo.lp"])
        try SpoolAttacker.run(["mkdir", spool + "/dir.lp"])
        try SpoolAttacker.run([SpoolAttacker.python, "-c", "import socket; socket.socket(socket.AF_UNIX).bind('\(spool)/sock.lp')"])
        // A hard link to a file the writer may not read (fs.protected_hardlinks stops the
        // attacker making it; another program's mistake, or an older kernel, need not).
        #expect(link(secret, spool + "/hard.lp") == 0)
        try SpoolAttacker.run([
            "sh", "-c", "printf 'good v=1i 1700000000000000001\\n' > \(spool)/.good.lp && mv \(spool)/.good.lp \(spool)/good.lp",
        ])
        let report = SendableBox<SyncReport?>(nil)
        #expect(finishes { report.value = agent.syncOnce() }, "sync blocked on a spool entry")
        #expect(report.value?.spooledLines == 1 && report.value?.rejectedLines == 5, "\(String(describing: report.value))")
        let setAside = try FileManager.default.contentsOfDirectory(atPath: spool + "/rejected").sorted()
        #expect(setAside == ["dir.lp", "fifo.lp", "hard.lp", "link.lp", "sock.lp"])
        #expect(try FileManager.default.contentsOfDirectory(atPath: spool) == ["rejected"])
        #expect(try influx.count("good", field: "v") == 1)
        try expectSecretUntouched(secret, influx, directory)
        // rejected/ is the agent's own: the writers cannot add to it.
        var info = stat()
        #expect(stat(spool + "/rejected", &info) == 0 && info.st_uid == geteuid() && info.st_mode & 0o777 == 0o750)
    }

    @Test("a rejected/ the attacker made, with a symlink to a root-only file in it, is not used: no byte is appended there")
    func attackersRejectedDirectory() throws {
        let influx = try InfluxFixture()
        let (directory, agent, secret) = try setUp("planted", influx: influx)
        defer {
            agent.close()
            try? FileManager.default.removeItem(atPath: directory)
        }
        let spool = directory + "/spool"
        try SpoolAttacker.run(["mkdir", spool + "/rejected"])
        try SpoolAttacker.run(["ln", "-s", secret, spool + "/rejected/evil.lp"])
        try SpoolAttacker.run([
            "sh", "-c",
            "printf 'evil v=oops\\ngood v=2i 1700000000000000002\\n' > \(spool)/.evil.lp && mv \(spool)/.evil.lp \(spool)/evil.lp",
        ])
        let report = agent.syncOnce()
        #expect(report.spooledLines == 1 && report.rejectedLines == 1, "\(report)")
        #expect(try influx.count("good", field: "v") == 1)
        try expectSecretUntouched(secret, influx, directory)
        #expect(try FileManager.default.destinationOfSymbolicLink(atPath: spool + "/rejected/evil.lp") == secret)
    }

    @Test(
        "a renameat2(RENAME_EXCHANGE) race swapping spool files with symlinks and FIFOs over hundreds of syncs reads nothing else and blocks nothing"
    )
    func exchangeRace() throws {
        let influx = try InfluxFixture()
        let (directory, agent, secret) = try setUp("race", influx: influx)
        defer {
            agent.close()
            try? FileManager.default.removeItem(atPath: directory)
        }
        let spool = directory + "/spool"
        // The attacker: write a valid file in, put a symlink to the secret (or a FIFO) beside it
        // under a hidden name, and swap the two names as fast as it can.
        let script = """
            import ctypes, os, sys, time
            libc = ctypes.CDLL(None, use_errno=True)
            spool, secret, stop = sys.argv[1], sys.argv[2], sys.argv[3]
            i = 0
            while not os.path.exists(stop):
                i += 1
                name = os.path.join(spool, "r%d.lp" % (i % 4))
                hidden = os.path.join(spool, ".r%d.tmp" % (i % 4))
                with open(hidden, "w") as f:
                    f.write("race,i=%d v=1i %d\\n" % (i, 1700000000000000000 + i))
                os.rename(hidden, name)
                other = os.path.join(spool, ".r%d.other" % (i % 4))
                try:
                    os.unlink(other)
                except OSError:
                    pass
                if i % 2:
                    os.symlink(secret, other)
                else:
                    os.mkfifo(other)
                for _ in range(200):
                    libc.renameat2(-100, name.encode(), -100, other.encode(), 2)
            """
        try Data(script.utf8).write(to: URL(filePath: directory + "/race.py"))
        let stop = directory + "/stop"
        let command = try SpoolAttacker.command([SpoolAttacker.python, directory + "/race.py", spool, secret, stop])
        let attacker = try ChildProcess(command[0], Array(command.dropFirst()))
        defer {
            _ = FileManager.default.createFile(atPath: stop, contents: nil)
            _ = attacker.wait()
        }
        // The syncs start once the attacker is at work.
        try #require(
            waitUntil(within: .seconds(60)) {
                ((try? FileManager.default.contentsOfDirectory(atPath: spool)) ?? []).contains { $0.hasSuffix(".lp") }
            }, "the attacker never wrote a file")
        let totals = SendableBox((syncs: 0, spooled: 0, rejected: 0))
        // At least 300 syncs, and on until the race was met both ways (a file taken, a swapped
        // entry set aside): whether a given sync meets a swap is up to the scheduler.
        let maxSyncs = 3000
        let ended = finishes(within: .seconds(600)) {
            while totals.value.syncs < maxSyncs && (totals.value.syncs < 300 || totals.value.spooled == 0 || totals.value.rejected == 0) {
                let report = agent.syncOnce()
                totals.value = (
                    totals.value.syncs + 1, totals.value.spooled + report.spooledLines, totals.value.rejected + report.rejectedLines
                )
            }
        }
        _ = FileManager.default.createFile(atPath: stop, contents: nil)
        #expect(ended, "a sync blocked: \(totals.value.syncs) syncs done")
        print("spool race: \(totals.value.syncs) syncs, \(totals.value.spooled) lines taken, \(totals.value.rejected) entries set aside")
        // The race was run: files were taken and swapped entries were met.
        #expect(totals.value.spooled > 0 && totals.value.rejected > 0, "\(totals.value)")
        try expectSecretUntouched(secret, influx, directory)
    }

    @Test("a spool listing that readdir cuts short is logged once, naming the directory and the reason")
    func listingFails() async throws {
        // A real readdir error: /proc/<pid>/fd of a process that has closed every descriptor
        // lists empty while it lives and fails with ENOENT once it has been reaped.
        let sleeper = try ChildProcess(SpoolAttacker.python, ["-c", "import os, time; os.closerange(0, 65536); time.sleep(600)"])
        defer { sleeper.stop() }
        let fdDirectory = "/proc/\(sleeper.pid)/fd"
        #expect(await eventually(within: .seconds(30)) { (try? FileManager.default.contentsOfDirectory(atPath: fdDirectory)) == [] })
        let directory = try agentScratch("listing")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let collectorsOff =
            "cpu: false, memory: false, load: false, uptime: false, disk: false, network: false, thermal: false, pressure: false, agent: false"
        let config = """
            {
              device: { id: "board-7" },
              server: { url: "http://127.0.0.1:9", connectTimeout: "2s", requestTimeout: "2s" },
              telemetry: { influx: { database: "fleet" }, spoolDirectory: "\(fdDirectory)", collectors: { \(collectorsOff) } },
              queue: { directory: "queue" },
            }
            """
        try Data(config.utf8).write(to: URL(filePath: directory + "/agent.json5"))
        var fds: [Int32] = [0, 0]
        try #require(pipe(&fds) == 0)
        defer { close(fds[0]) }
        _ = fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK)
        func logged() -> String {
            var text = ""
            var buffer = [UInt8](repeating: 0, count: 4096)
            while true {
                let count = read(fds[0], &buffer, buffer.count)
                guard count > 0 else { return text }
                text += String(decoding: buffer[..<count], as: UTF8.self)
            }
        }
        let logger = Logger(label: "test", output: LogOutput(format: .text, journal: false, fd: fds[1]), level: .info)
        let agent = try TelemetryAgent(config: try AgentConfig.load(path: directory + "/agent.json5"), logger: logger)
        defer {
            agent.close()
            close(fds[1])
        }
        _ = agent.syncOnce()
        #expect(!logged().contains("listing"), "an empty listing is no error")
        sleeper.signal(SIGKILL)
        _ = sleeper.wait()
        _ = agent.syncOnce()
        let first = logged()
        #expect(
            first.contains("spool directory listing stopped on an error") && first.contains(fdDirectory)
                && first.contains("No such file or directory"), "\(first)")
        _ = agent.syncOnce()
        #expect(!logged().contains("listing stopped"), "logged once until it lists again")
    }
}

@Suite("spool: big files in bounded memory, and a kill -9 in the middle", .serialized)
struct SpoolBigFileTests {
    /// Under qemu-user (cross/test.sh sets QEMU_LD_PREFIX) the agent runs ten to twenty times
    /// slower, and its RSS is the emulator's: the file is 32 MiB there, and the bound looser.
    static let emulated = ProcessInfo.processInfo.environment["QEMU_LD_PREFIX"] != nil
    static let bigBytes = emulated ? 32 << 20 : 256 << 20

    /// A config whose server is `server`, queue large enough for the whole file.
    func writeConfig(in directory: String, server: String) throws -> String {
        let collectorsOff =
            "cpu: false, memory: false, load: false, uptime: false, disk: false, network: false, thermal: false, pressure: false, agent: false"
        let text = """
            {
              device: { id: "board-7" },
              server: { url: "\(server)", connectTimeout: "2s", requestTimeout: "60s" },
              telemetry: { influx: { database: "fleet", precision: "ns" }, spoolDirectory: "spool", spoolMaxFileBytes: "1GiB",
                           batch: { maxPoints: 1000 }, collectors: { \(collectorsOff) } },
              queue: { directory: "queue", maxBytes: "1GiB" },
              logging: { level: "warning" },
            }
            """
        try FileManager.default.createDirectory(atPath: directory + "/spool", withIntermediateDirectories: true)
        try Data(text.utf8).write(to: URL(filePath: directory + "/agent.json5"))
        return directory + "/agent.json5"
    }

    /// A spool file of `bytes` (about 1 KiB a line, each with its sequence number and time).
    func writeSpoolFile(_ path: String, bytes: Int) throws -> Int {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        guard fd >= 0 else { throw FixtureError(description: "open \(path)") }
        defer { close(fd) }
        let pad = String(repeating: "p", count: 960)
        var lines = 0
        var written = 0
        var chunk = ""
        while written < bytes {
            let line = "big,n=\(lines % 100) seq=\(lines)i,pad=\"\(pad)\" \(1_700_000_000_000_000_000 + lines)\n"
            chunk += line
            written += line.utf8.count
            lines += 1
            if chunk.utf8.count >= 1 << 20 || written >= bytes {
                let bytes = Array(chunk.utf8)
                guard bytes.withUnsafeBytes({ write(fd, $0.baseAddress, $0.count) }) == bytes.count else {
                    throw FixtureError(description: "write \(path)")
                }
                chunk = ""
            }
        }
        return lines
    }

    /// `fire-agent sync --once` under GNU time: its exit status and peak RSS in KiB.
    func syncPeakRSS(_ config: String) throws -> (status: Int32, kib: Int) {
        let result = try runCapturingOutput(
            "/usr/bin/time", ["-f", "maxrss=%M", try fireAgentPath(), "sync", "--once", "--config", config])
        let line = result.stderr.split(separator: "\n").last { $0.hasPrefix("maxrss=") } ?? ""
        return (result.status, Int(line.dropFirst("maxrss=".count)) ?? -1)
    }

    @Test("a spool file at spoolMaxFileBytes is queued in the memory of a 1 KiB one (peak RSS within 4 MiB)")
    func boundedMemory() throws {
        let directory = try agentScratch("bigspool")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        // Nothing listens on the server's port: everything stays in the queue.
        let config = try writeConfig(in: directory, server: "http://127.0.0.1:\(freePort())")
        _ = try writeSpoolFile(directory + "/spool/small.lp", bytes: 1024)
        let small = try syncPeakRSS(config)
        let lines = try writeSpoolFile(directory + "/spool/.big.lp", bytes: Self.bigBytes)
        rename(directory + "/spool/.big.lp", directory + "/spool/big.lp")
        let big = try syncPeakRSS(config)
        print("spool peak RSS: 1 KiB file \(small.kib) KiB, \(Self.bigBytes >> 20) MiB file (\(lines) lines) \(big.kib) KiB")
        #expect(small.kib > 0 && big.kib > 0)
        #expect(!FileManager.default.fileExists(atPath: directory + "/spool/big.lp"), "the big file was not taken")
        let bound = Self.emulated ? 8192 : 4096
        #expect(big.kib - small.kib <= bound, "1 KiB file: \(small.kib) KiB, big file: \(big.kib) KiB (bound \(bound) KiB)")
    }

    @Test("kill -9 in the middle of a big spool file: after the restart every line is delivered, none more than one batch twice")
    func killInTheMiddle() throws {
        let directory = try agentScratch("killspool")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        // The recorder answers 503 until the agent has been killed and the file is queued: a
        // queued batch keeps the URL it was queued for.
        let recorder = try RecordingInflux(directory: directory)
        defer { recorder.stop() }
        let config = try writeConfig(in: directory, server: "http://127.0.0.1:\(recorder.port)")
        let lines = try writeSpoolFile(directory + "/spool/.big.lp", bytes: Self.bigBytes / 4)
        rename(directory + "/spool/.big.lp", directory + "/spool/big.lp")
        let progressPath = directory + "/queue/spool-progress"
        func progress() -> SpoolProgress? {
            guard let bytes = try? Data(contentsOf: URL(filePath: progressPath)) else { return nil }
            return SpoolProgressSlots.decode(Array(bytes))?.record
        }
        let agent = try ChildProcess(try fireAgentPath(), ["sync", "--once", "--config", config])
        // Killed once part of the file is queued and more of it is left.
        let midway = waitUntil(within: .seconds(600)) { (progress()?.offset ?? 0) > 0 }
        agent.signal(SIGKILL)
        _ = agent.wait()
        try #require(midway, "the agent never recorded progress through the file")
        let killedAt = try #require(progress())
        #expect(killedAt.offset < killedAt.size, "the kill landed after the whole file was queued")
        #expect(FileManager.default.fileExists(atPath: directory + "/spool/big.lp"))
        // The rest is queued by the next run, which delivers the whole queue to the recorder.
        recorder.open()
        let finish = try runCapturingOutput(try fireAgentPath(), ["sync", "--once", "--config", config])
        #expect(finish.status == 0, "\(finish.stderr.suffix(2000))")
        #expect(!FileManager.default.fileExists(atPath: directory + "/spool/big.lp"))
        var seen = [Int](repeating: 0, count: lines)
        for line in try recorder.lines() {
            guard let range = line.range(of: " seq="), let end = line[range.upperBound...].firstIndex(of: "i"),
                let sequence = Int(line[range.upperBound..<end]), sequence < lines
            else { continue }
            seen[sequence] += 1
        }
        let missing = seen.indices.filter { seen[$0] == 0 }
        let twice = seen.indices.filter { seen[$0] > 1 }
        print(
            "spool kill -9: \(lines) lines, killed at byte \(killedAt.offset) of \(killedAt.size); \(missing.count) missing, \(twice.count) sent twice"
        )
        let (lost, doubled) = (missing.count, twice.count)
        #expect(lost == 0, "lost \(lost) lines, e.g. \(Array(missing.prefix(5)))")
        #expect(doubled <= 1000, "\(doubled) lines sent twice: more than the one batch (1000 lines) in flight")
        #expect(seen.allSatisfy { $0 <= 2 })
    }

    @Test("a writer's 3,000 files are listed in bounded slices (256 names at a time) and all taken by one sync, each line once")
    func manyFiles() throws {
        let directory = try agentScratch("manyfiles")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let recorder = try RecordingInflux(directory: directory)
        defer { recorder.stop() }
        recorder.open()
        let config = try writeConfig(in: directory, server: "http://127.0.0.1:\(recorder.port)")
        let count = 3000
        for index in 0..<count {
            try dropInSpool(
                "many file=\"f\(index)\",seq=\(index)i \(1_700_000_000_000_000_000 + index)\n", as: "f\(index).lp", in: directory)
        }
        let sync = try runCapturingOutput(try fireAgentPath(), ["sync", "--once", "--config", config])
        #expect(sync.status == 0, "\(sync.stderr.suffix(2000))")
        let remaining = try FileManager.default.contentsOfDirectory(atPath: directory + "/spool").filter { !$0.hasPrefix(".") }
        #expect(remaining.filter { $0 != "rejected" }.isEmpty, "\(remaining.count) files left")
        // Batches are filled across files, up to a listing slice (256 names) each: at most 12
        // batches of up to 256 lines, not 3,000 batches of one line.
        let summary = String(decoding: sync.stdout, as: UTF8.self)
        let batches = summary.firstRange(of: /queued (\d+) batches/).flatMap { Int(summary[$0].split(separator: " ")[1]) }
        #expect(batches.map { $0 <= 12 } == true && recorder.requests() == batches, "\(summary) \(recorder.requests())")
        let seen = try recorder.lines().compactMap { line -> Int? in
            guard let range = line.range(of: ",seq="), let end = line[range.upperBound...].firstIndex(of: "i") else { return nil }
            return Int(line[range.upperBound..<end])
        }
        #expect(seen.count == count && Set(seen).count == count, "\(seen.count) lines, \(Set(seen).count) distinct")
    }
}

extension SpoolBigFileTests {
    @Test(
        "batches filled across files: lines the agent stamps end their batch; kill -9 during the sync of 2,000 small files loses nothing")
    func fillingAcrossFiles() throws {
        let directory = try agentScratch("filling")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let recorder = try RecordingInflux(directory: directory)
        defer { recorder.stop() }
        recorder.open()
        let config = try writeConfig(in: directory, server: "http://127.0.0.1:\(recorder.port)")
        // f0–f3 carry their times; f4 has a line the agent stamps: it closes its batch; f5–f9 fill the next.
        for index in 0..<10 {
            let time = index == 4 ? "" : " \(1_700_000_000_000_000_000 + index)"
            try dropInSpool("fill seq=\(index)i\(time)\nfill seq=\(100 + index)i\(time)\n", as: "f\(index).lp", in: directory)
        }
        let sync = try runCapturingOutput(try fireAgentPath(), ["sync", "--once", "--config", config])
        #expect(sync.status == 0 && String(decoding: sync.stdout, as: UTF8.self).contains("queued 2 batches"), "\(sync)")
        let recorded = try recorder.lines().count
        #expect(recorder.requests() == 2 && recorded == 20)

        // 2,000 files of 3 lines each, a sync killed while it delivers, then another sync.
        let count = 2000
        for index in 0..<count {
            let lines = (0..<3).map { "kill file=\"k\(index)\",seq=\(index * 3 + $0)i \(1_700_000_000_000_000_000 + index * 3 + $0)\n" }
            try dropInSpool(lines.joined(), as: String(format: "k%05d.lp", index), in: directory)
        }
        let killed = try ChildProcess(try fireAgentPath(), ["sync", "--once", "--config", config])
        _ = waitUntil(within: .seconds(60)) { recorder.requests() > 3 }
        killed.signal(SIGKILL)
        _ = killed.wait()
        let again = try runCapturingOutput(try fireAgentPath(), ["sync", "--once", "--config", config])
        #expect(again.status == 0, "\(again.stderr.suffix(2000))")
        var seen = [Int](repeating: 0, count: count * 3)
        for line in try recorder.lines() where line.hasPrefix("kill,device=") {
            guard let range = line.range(of: ",seq="), let end = line[range.upperBound...].firstIndex(of: "i"),
                let sequence = Int(line[range.upperBound..<end]), sequence < seen.count
            else { continue }
            seen[sequence] += 1
        }
        let missing = seen.indices.filter { seen[$0] == 0 }
        #expect(missing.isEmpty, "lost \(missing.count) lines, e.g. \(Array(missing.prefix(5)))")
        // At most the batches in flight or queued but not yet removed are sent twice.
        #expect(seen.filter { $0 > 1 }.count <= 3 * 256 * 2, "\(seen.filter { $0 > 1 }.count) lines sent twice")
    }
}

/// An InfluxDB stand-in that records every line it is sent (gunzipped) and answers 204, so a
/// test can count lines sent twice (influxd itself keeps one copy of identical points). Until
/// `open()` it answers 503 and records nothing.
final class RecordingInflux {
    let port: Int
    let log: String
    let hold: String
    private let process: ChildProcess

    init(directory: String) throws {
        port = freePort()
        log = directory + "/recorded.lp"
        hold = directory + "/recorder-hold"
        _ = FileManager.default.createFile(atPath: hold, contents: nil)
        let script = """
            import gzip, http.server, os, sys
            log = open(sys.argv[2], "ab")
            class Handler(http.server.BaseHTTPRequestHandler):
                def do_POST(self):
                    body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                    if os.path.exists(sys.argv[3]):
                        self.send_response(503)
                        self.send_header("Retry-After", "0")
                        self.end_headers()
                        return
                    if self.headers.get("Content-Encoding") == "gzip":
                        body = gzip.decompress(body)
                    log.write(body)
                    log.flush()
                    with open(sys.argv[2] + ".requests", "a") as requests:
                        requests.write("%d\\n" % body.count(b"\\n"))
                    self.send_response(204)
                    self.send_header("X-Influxdb-Version", "1.8-recorder")
                    self.end_headers()
                def log_message(self, *args):
                    pass
            http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
            """
        try Data(script.utf8).write(to: URL(filePath: directory + "/recorder.py"))
        process = try ChildProcess(which("python3") ?? "/usr/bin/python3", [directory + "/recorder.py", String(port), log, hold])
        try waitForPort(port)
    }

    /// From now on, 204 and record.
    func open() { try? FileManager.default.removeItem(atPath: hold) }

    func lines() throws -> [Substring] {
        try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n")
    }

    /// Requests recorded (each a delivered batch).
    func requests() -> Int {
        ((try? String(contentsOfFile: log + ".requests", encoding: .utf8)) ?? "").split(separator: "\n").count
    }

    func stop() { process.stop() }
}
