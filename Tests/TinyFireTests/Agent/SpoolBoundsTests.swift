import FireAgent
import Foundation
import Testing

/// Spool intake bounded in time, disk and log whatever a writer of the spool does (issue 47):
/// each test is the attack, run as a second local user.
extension SpoolAttackTests {
    /// `fire-agent sync --once` on `directory`'s config; with `capabilities: false`, as the
    /// shipped unit runs it: root without any capability (no CAP_DAC_OVERRIDE).
    func syncCommand(_ directory: String, capabilities: Bool = true) throws -> (result: CLIResult, seconds: Double) {
        var arguments = [try fireAgentPath(), "sync", "--once", "--config", directory + "/agent.json5"]
        if !capabilities {
            arguments =
                [which("setpriv") ?? "/usr/bin/setpriv", "--bounding-set=-all", "--inh-caps=-all", "--ambient-caps=-all", "--"]
                + arguments
        }
        let started = Date()
        let result = try runCapturingOutput(arguments[0], Array(arguments.dropFirst()))
        return (result, Date().timeIntervalSince(started))
    }

    /// Bytes on disk under `directory` (its entries' blocks, not following anything).
    func diskBytes(_ directory: String) -> Int64 {
        var total: Int64 = 0
        for name in (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? [] {
            var info = stat()
            if lstat(directory + "/" + name, &info) == 0 { total += Int64(info.st_blocks) * 512 }
        }
        return total
    }

    @Test(
        "a 16 MiB spool file of lines InfluxDB would refuse: 100 kept, the file set aside whole by rename and dropped by rejected/'s bound, a few log lines"
    )
    func floodOfRefusedLines() throws {
        let influx = try InfluxFixture()
        let (directory, agent, _) = try setUp("flood", influx: influx, telemetry: "spoolRejectedMaxBytes: \"1MiB\"")
        agent.close()  // the command below is the agent
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let spool = directory + "/spool"
        try SpoolAttacker.run([
            SpoolAttacker.python, "-c",
            "import os, sys; p = sys.argv[1]; open(p + '/.flood', 'wb').write(b'x\\n' * (8 << 20)); os.rename(p + '/.flood', p + '/flood.lp')",
            spool,
        ])
        let (result, seconds) = try syncCommand(directory)
        print("spool flood: a 16 MiB file of refused lines cost one sync \(String(format: "%.2f", seconds)) s")
        #expect(result.status == 0, "\(result.stderr.suffix(2000))")
        let spoolLines = result.stderr.split(separator: "\n").filter { $0.contains("spool") }
        #expect(spoolLines.count <= 4, "\(spoolLines.count) log lines: \(spoolLines.prefix(8))")
        #expect(!FileManager.default.fileExists(atPath: spool + "/flood.lp"))
        // The refusals kept: 100 lines, each once; the file itself, set aside whole, is larger
        // than rejected/ may hold and went first.
        let kept = try String(contentsOfFile: spool + "/rejected/flood.lp", encoding: .utf8)
        let headers = kept.split(separator: "\n").filter { $0.hasPrefix("# flood.lp:") }
        #expect(headers.count == 100 && Set(headers).count == 100, "\(headers.count) refusals kept")
        #expect(!FileManager.default.fileExists(atPath: spool + "/rejected/flood.lp.1"))
        #expect(diskBytes(spool + "/rejected") < 1 << 20)
        #expect(result.stderr.contains("spool rejected/ over its bounds"), "\(spoolLines)")
    }

    @Test(
        "a pass stopped at its deadline and an agent started anew (as after a kill) keep each refused line once and deliver every good one")
    func refusalsRecordedAcrossRestarts() throws {
        let influx = try InfluxFixture()
        var (directory, agent, _) = try setUp("refusals", influx: influx)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        // 40,000 good lines with 60 long refused lines among them (120 KiB of refusals: more
        // than one write of them).
        var text = ""
        var refusedAt: [Int] = []
        var lineNumber = 0
        let pad = String(repeating: "z", count: 2000)
        for index in 0..<40_000 {
            if index % 650 == 0 && refusedAt.count < 60 {
                text += "broken \(pad) \(index)\n"
                lineNumber += 1
                refusedAt.append(lineNumber)
            }
            text += "mixed seq=\(index)i \(1_700_000_000_000_000_000 + index)\n"
            lineNumber += 1
        }
        try dropInSpool(text, as: "mixed.lp", in: directory)
        var yielded = 0
        for _ in 0..<1000 {
            var report = SyncReport()
            agent.queuePending(into: &report, spoolDeadline: .milliseconds(1))
            guard report.spoolYielded else { break }
            yielded += 1
            // Everything in memory is gone, as after kill -9: a new agent on the same directories.
            agent.close()
            agent = try TelemetryAgent(config: try AgentConfig.load(path: directory + "/agent.json5"), logger: Logger(label: "test"))
        }
        let final = agent.syncOnce()
        agent.close()
        #expect(yielded >= 2, "the file was taken in \(yielded + 1) passes")
        #expect(final.failure == nil && final.remaining == 0, "\(final)")
        #expect(try influx.count("mixed", field: "seq") == 40_000)
        let kept = try String(contentsOfFile: directory + "/spool/rejected/mixed.lp", encoding: .utf8)
        let numbers = kept.split(separator: "\n").compactMap { line -> Int? in
            guard line.hasPrefix("# mixed.lp:") else { return nil }
            return Int(line.dropFirst("# mixed.lp:".count).prefix { $0.isNumber })
        }
        #expect(numbers.sorted() == refusedAt, "kept \(numbers.count) of \(refusedAt.count), \(Set(numbers).count) distinct")
    }

    @Test(
        "a spool file that grows sparsely to 8 TiB after the agent judged its size (held at its first read by fanotify) is read only to that size, its lines queued, then set aside"
    )
    func fileGrowsWhileRead() throws {
        let influx = try InfluxFixture()
        let (directory, agent, _) = try setUp("grow", influx: influx)
        defer {
            agent.close()
            try? FileManager.default.removeItem(atPath: directory)
        }
        let spool = directory + "/spool"
        // The writer renames a finished two-line file in.
        let writer = """
            import os, sys
            path = os.path.join(sys.argv[1], "grow.lp")
            with open(path + ".tmp", "w") as f:
                f.write("grow v=1i 1700000000000000001\\ngrow v=2i 1700000000000000002\\n")
            os.rename(path + ".tmp", path)
            """
        try SpoolAttacker.run([SpoolAttacker.python, "-c", writer, spool])
        // The growth lands between the agent's fstat and its first read, every time: a fanotify
        // permission watch (root's, only to time the race; the writer could win it by chance)
        // holds the agent's first read until the file is 8 TiB long, then lets every read go.
        let holder = """
            import ctypes, os, struct, sys
            libc = ctypes.CDLL(None, use_errno=True)
            path = sys.argv[1]
            fd = libc.fanotify_init(0x08 | 0x01, os.O_RDONLY)  # FAN_CLASS_CONTENT | FAN_CLOEXEC
            if fd < 0 or libc.fanotify_mark(fd, 1, ctypes.c_uint64(0x00020000), -100, path.encode()) < 0:
                print("fanotify failed", os.strerror(ctypes.get_errno()), flush=True)
                sys.exit(1)
            print("ready", flush=True)
            grown = False
            while True:
                events = os.read(fd, 4096)
                offset = 0
                while offset < len(events):
                    length, _, _, _, _, event_fd, _ = struct.unpack_from("IBBHQii", events, offset)
                    if not grown:
                        os.truncate(path, 8 << 40)
                        grown = True
                        print("grown", flush=True)
                    os.write(fd, struct.pack("iI", event_fd, 1))  # FAN_ALLOW
                    os.close(event_fd)
                    offset += length
            """
        let holderOut = directory + "/holder.out"
        let process = try ChildProcess(SpoolAttacker.python, ["-c", holder, spool + "/grow.lp"], stdout: .file(holderOut))
        defer { process.stop() }
        try #require(
            waitUntil(within: .seconds(30)) {
                ((try? String(contentsOfFile: holderOut, encoding: .utf8)) ?? "").contains("ready")
            }, "\((try? String(contentsOfFile: holderOut, encoding: .utf8)) ?? "")")
        let report = SendableBox<SyncReport?>(nil)
        #expect(finishes(within: .seconds(120)) { report.value = agent.syncOnce() }, "the sync read on into the 8 TiB")
        #expect(((try? String(contentsOfFile: holderOut, encoding: .utf8)) ?? "").contains("grown"), "the agent never read the file")
        #expect(!FileManager.default.fileExists(atPath: spool + "/grow.lp"))
        let setAside = (try? FileManager.default.contentsOfDirectory(atPath: spool + "/rejected")) ?? []
        #expect(setAside.contains("grow.lp"), "\(setAside)")
        #expect(report.value?.rejectedLines == 0, "\(String(describing: report.value))")
        // The two lines there were when the agent judged the file are delivered, and no line of zeros.
        #expect(try influx.count("grow", field: "v") == 2)
        #expect(!(try influx.measurements()).contains { $0.isEmpty || $0.contains("\0") })
    }

    @Test(
        "300 entries with names that are not UTF-8 and 300 mode-000 files of the writer, all before a good file in name order: under the unit's capabilities one sync takes every one of them and the good file"
    )
    func entriesThatStarveIntake() throws {
        let influx = try InfluxFixture()
        let (directory, agent, _) = try setUp("starve", influx: influx)
        agent.close()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let spool = directory + "/spool"
        let script = """
            import os, sys
            spool = os.fsencode(sys.argv[1])
            for i in range(300):
                name = b"0\\xff\\xfe%03d.lp" % i
                with open(os.path.join(spool, b"." + name), "w") as f:
                    f.write("binary seq=%di %d\\n" % (i, 1700000000000000000 + i))
                os.rename(os.path.join(spool, b"." + name), os.path.join(spool, name))
            for i in range(300):
                path = os.path.join(spool, b"1locked%03d.lp" % i)
                with open(path, "w") as f:
                    f.write("locked v=1i\\n")
                os.chmod(path, 0)
            with open(os.path.join(spool, b".good.lp"), "w") as f:
                f.write("good v=7i 1700000000000000007\\n")
            os.rename(os.path.join(spool, b".good.lp"), os.path.join(spool, b"good.lp"))
            """
        try SpoolAttacker.run([SpoolAttacker.python, "-c", script, spool])
        let (result, _) = try syncCommand(directory, capabilities: false)
        #expect(result.status == 0, "\(result.stderr.suffix(2000))")
        #expect(try influx.count("good", field: "v") == 1, "the good file behind them was not taken")
        #expect(try influx.count("binary", field: "seq") == 300)
        // The locked files are set aside by rename (no read access needed), the spool is empty.
        #expect(try FileManager.default.contentsOfDirectory(atPath: spool) == ["rejected"])
        let setAside = try FileManager.default.contentsOfDirectory(atPath: spool + "/rejected")
        #expect(setAside.filter { $0.hasPrefix("1locked") }.count == 300)
        // One line per file up to the pass's limit, one for the rest: not 300.
        let spoolLines = result.stderr.split(separator: "\n").filter { $0.contains("spool") }
        #expect(spoolLines.count <= 20, "\(spoolLines.count) log lines")
    }

    @Test("a spool line naming another board's device is stored under this board's; the tag it carried is kept under spoolDeviceTagKeptAs")
    func spoolPointsCarryTheBoardsDevice() throws {
        let influx = try InfluxFixture()
        let (directory, agent, _) = try setUp("device", influx: influx, telemetry: "spoolDeviceTagKeptAs: \"claimed\"")
        defer {
            agent.close()
            try? FileManager.default.removeItem(atPath: directory)
        }
        try SpoolAttacker.run([
            "sh", "-c",
            "printf 'spoofed,device=board-9,zone=a v=1i 1700000000000000011\\nplain v=2i 1700000000000000012\\n' > \(directory)/spool/.d.lp && mv \(directory)/spool/.d.lp \(directory)/spool/d.lp",
        ])
        let report = agent.syncOnce()
        #expect(report.spooledLines == 2 && report.failure == nil, "\(report)")
        let spoofed = try influx.rows(#"SELECT "v", "device", "claimed", "zone" FROM "spoofed""#)
        #expect(spoofed.count == 1 && spoofed[0].count == 5, "\(spoofed)")
        #expect(spoofed.first?[2] as? String == "board-7" && spoofed.first?[3] as? String == "board-9", "\(spoofed)")
        #expect(try influx.rows(#"SELECT "v" FROM "plain" WHERE "device" = 'board-7'"#).count == 1)
        #expect(try influx.rows(#"SELECT "v" FROM "spoofed" WHERE "device" = 'board-9'"#).isEmpty)
    }
}

@Suite("spool: the board's device tag on every spool line (sans-I/O)")
struct SpoolDeviceTagTests {
    @Test(
        "the line's own device tag is dropped or kept under another key, the board's set, tags sorted, escapes and fields untouched",
        arguments: [
            ("m v=1i", nil, "m,device=b\\ 1 v=1i"),
            ("m,device=x v=1i 5", nil, "m,device=b\\ 1 v=1i 5"),
            ("m,zone=a,device=x v=1i 5", "claimed", "m,claimed=x,device=b\\ 1,zone=a v=1i 5"),
            ("m,claimed=old,device=x v=1i", "claimed", "m,claimed=x,device=b\\ 1 v=1i"),
            ("m,claimed=own v=1i", "claimed", "m,claimed=own,device=b\\ 1 v=1i"),
            ("my\\ m,a\\,b=c\\=d s=\"x,device=y \" 1", nil, "my\\ m,a\\,b=c\\=d,device=b\\ 1 s=\"x,device=y \" 1"),
        ] as [(String, String?, String)])
    func settingDeviceTag(line: String, keptAs: String?, expected: String) {
        #expect(LineProtocol.problem(in: Substring(line)) == nil)
        let tagged = LineProtocol.settingDeviceTag(line, to: "b 1", keptAs: keptAs)
        #expect(tagged == expected)
        #expect(LineProtocol.problem(in: Substring(tagged)) == nil)
    }

    @Test("a spool name that is not UTF-8 shows escaped, and orders by its bytes")
    func spoolNames() {
        let name = SpoolName(bytes: [0x30, 0xFF, 0x0A, 0xC3, 0xA9, 0x5C])
        #expect(name.description == "0\\xff\\x0aé\\x5c")
        #expect(SpoolName("a") < SpoolName(bytes: [0x61, 0x80]) && SpoolName(bytes: [0x30, 0xFF]) < SpoolName("1"))
        #expect(SpoolName(bytes: [0x2E, 0x61]).isHidden)
    }
}
