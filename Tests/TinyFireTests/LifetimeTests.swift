import Foundation
import Synchronization
import Testing

@testable import TinyFire

#if canImport(Glibc)
    import Glibc
#endif

/// Descriptors and children outlive nothing they should not: the failures that slow machines
/// (qemu) expose by timing are forced here by construction.
@Suite("Lifetimes of descriptors and child processes", .serialized)
struct LifetimeTests {
    /// What `/proc/self/fd/N` points at, or nil when N is closed.
    private func descriptorTarget(_ fd: Int32) -> String? {
        try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(fd)")
    }

    @Test("a DNS answer that arrives after its Session is gone finds the loop's descriptors still its own")
    func lateDNSAnswerAfterSessionEnds() throws {
        // A loopback address no other test uses: the hook holds back only this answer.
        let host = "127.0.0.77"
        let entered = DispatchSemaphore(value: 0)
        let held = Mutex<(@Sendable () -> Void)?>(nil)
        DNSResolver.answerHook.withLock {
            $0 = { answeredHost, deliver in
                guard answeredHost == host else { return deliver() }
                held.withLock { $0 = deliver }
                entered.signal()
            }
        }
        defer { DNSResolver.answerHook.withLock { $0 = nil } }

        weak var weakLoop: EventLoop?
        var wakeFD: Int32 = -1
        weak var weakSession: Session?
        do {
            // The request gives up on its connect timeout while the answer is held; then the
            // request and its Session are released.
            let session = Session(configuration: SessionConfiguration(connectTimeout: .milliseconds(50)))
            weakSession = session
            let loop = try #require(session.engine.loop)
            weakLoop = loop
            wakeFD = loop.wakeFD
            let finished = DispatchSemaphore(value: 0)
            let failure = Mutex<TinyFireError?>(nil)
            session.request("http://\(host):9/late").response { response in
                failure.withLock { $0 = response.error }
                finished.signal()
            }
            #expect(entered.wait(timeout: .now() + 30) == .success, "the resolver never answered")
            #expect(finished.wait(timeout: .now() + 30) == .success, "the connect timeout never fired")
            #expect(failure.withLock { $0 } != nil)
        }
        waitUntil { weakSession == nil }
        try #require(weakSession == nil, "the Session outlived its finished request")
        // The Session is gone and its loop thread has ended; the answer is still held.
        #expect(descriptorTarget(wakeFD) == "anon_inode:[eventfd]", "the loop's eventfd was closed while a DNS answer could still wake it")
        // Anything opened now must not get the loop's numbers (they are still taken).
        let probe = open("/dev/null", O_RDONLY | O_CLOEXEC)
        defer { close(probe) }
        #expect(probe != wakeFD)

        do {
            let deliver = try #require(held.withLock { $0 })
            held.withLock { $0 = nil }
            deliver()
        }
        #expect(descriptorTarget(probe) == "/dev/null", "the late answer touched another descriptor")
        // The answer was dropped (the loop had stopped), and with it the last reference.
        waitUntil { weakLoop == nil }
        #expect(weakLoop == nil, "the stopped loop was never released")
    }

    @Test("a partial file that cannot be continued is left alone: no second close, no removal, no false length")
    func refusedResumeLeavesPartialAlone() throws {
        let directory = try makeTemporaryDirectory("refused-resume")
        let partial = directory + "/.fw.bin.partial"
        try Data(repeating: 7, count: 10).write(to: URL(fileURLWithPath: partial))
        let kept = Mutex<[(String, UInt64)]>([])
        #expect(throws: SinkError.self) {
            _ = try AtomicFileSink(
                destination: URL(fileURLWithPath: directory + "/fw.bin"), createIntermediateDirectories: false, replaceExisting: true,
                partial: .append(path: partial, offset: 100), keepPartial: { path, length in kept.withLock { $0.append((path, length)) } })
        }
        #expect(kept.withLock { $0.isEmpty }, "a refused sink reported a partial file of the length it refused")
        #expect(FileManager.default.fileExists(atPath: partial))

        #expect(throws: SinkError.self) {
            _ = try AtomicFileSink(
                destination: URL(fileURLWithPath: directory + "/fw.bin"), createIntermediateDirectories: false, replaceExisting: true,
                partial: .append(path: partial, offset: 100))
        }
        #expect(FileManager.default.fileExists(atPath: partial), "a refused sink removed the partial file")
    }

    @Test("a child started from a thread that blocks signals gets a clean mask and stops on SIGTERM")
    func childrenGetCleanSignalMask() throws {
        // Dispatch's worker threads block signals, as the test runner's do.
        let result = Mutex<CLIResult?>(nil)
        let done = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            var blocked = sigset_t()
            sigemptyset(&blocked)
            sigaddset(&blocked, SIGTERM)
            var previous = sigset_t()
            pthread_sigmask(SIG_BLOCK, &blocked, &previous)
            result.withLock { $0 = try? runCapturingOutput("/bin/sh", ["-c", "grep -E '^Sig(Blk|Ign)' /proc/self/status"]) }
            pthread_sigmask(SIG_SETMASK, &previous, nil)
            done.signal()
        }
        done.wait()
        let text = String(decoding: try #require(result.withLock { $0 }).stdout, as: UTF8.self)
        #expect(text.contains("SigBlk:\t0000000000000000"), "\(text)")
        #expect(!text.contains("SigIgn:\t0000000000004000") && !text.contains("SigIgn:\t0000000000004001"), "SIGTERM ignored: \(text)")

        // A real server of the fixtures: SIGTERM alone ends it.
        let openssl = try #require(which("openssl"))
        let tls = try tlsServer()
        let port = freePort()
        let server = try startProcess(
            openssl,
            [
                "s_server", "-accept", "127.0.0.1:\(port)", "-cert", tls.directory + "/server.pem", "-key", tls.directory + "/server.key",
                "-quiet",
            ])
        try waitForPort(port)
        server.stop(grace: .seconds(30))
        #expect(server.exitStatus == 128 + SIGTERM, "s_server ended with \(server.exitStatus), not by SIGTERM")
    }

    @Test("scripts/run-contained.sh stops what a run leaves behind, even a process that ignores SIGTERM")
    func runContainedStopsLeftovers() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let script = root.appendingPathComponent("scripts/run-contained.sh").path
        // The command exits at once, leaving a child that ignores SIGTERM, as a crashed test
        // runner leaves its servers.
        let result = try runCapturingOutput(script, ["/bin/sh", "-c", "trap '' TERM; (trap '' TERM; exec sleep 300) & echo $!; exit 3"])
        #expect(result.status == 3, "the command's exit status is the script's")
        let pid = try #require(Int32(String(decoding: result.stdout, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)))
        #expect(result.stderr.contains("stopping what the run left behind"), "\(result.stderr)")
        #expect(waitUntil { kill(pid, 0) != 0 }, "the leftover \(pid) is still running")
    }

    @Test(
        "a server that resets during a sendfile upload is an error, never a SIGPIPE death (fire-agent queue flush does not ignore SIGPIPE)")
    func resetDuringSendfileIsNoSIGPIPE() throws {
        // Reads the head, then goes away: the client is in the middle of sending 24 MiB.
        let server = try HostileServer { client in
            client.readHeadOnly()
            // Half-close first (FIN: the client's socket goes to CLOSE_WAIT), then close with the
            // upload unread (RST): the kernel then answers the client's next write with EPIPE,
            // and SIGPIPE, not ECONNRESET.
            shutdown(client.fd, Int32(SHUT_WR))
            client.sleep(0.05)
            client.close()
        }
        let directory = try makeTemporaryDirectory("sigpipe")
        let body = directory + "/body.bin"
        try Data(repeating: 0x5A, count: 24 << 20).write(to: URL(fileURLWithPath: body))
        let added = try fireAgent(["queue", "add", "--dir", directory + "/queue", "-d", "@" + body, "\(server.base)/upload"])
        #expect(added.status == 0, "\(added.stderr)")
        for _ in 0..<6 {
            let flush = try fireAgent(["queue", "flush", "--dir", directory + "/queue", "--timeout", "20"])
            print("flush exit \(flush.status): \(flush.stderr)")
            #expect(flush.status != 128 + SIGPIPE, "killed by SIGPIPE: \(flush.stderr)")
            #expect(flush.status == 7 || flush.status == 55 || flush.status == 56, "exit \(flush.status): \(flush.stderr)")
        }
    }

    @Test("every I/O thread blocks SIGPIPE, so no peer can kill a host program that does not ignore it")
    func ioThreadsBlockSIGPIPE() throws {
        let session = Session()
        let loop = try #require(session.engine.loop)
        // Ask the loop thread itself for its mask.
        let mask = Mutex<String?>(nil)
        let done = DispatchSemaphore(value: 0)
        loop.execute {
            let status = (try? String(contentsOfFile: "/proc/thread-self/status", encoding: .utf8)) ?? ""
            mask.withLock { $0 = status.split(separator: "\n").first { $0.hasPrefix("SigBlk:") }.map(String.init) }
            done.signal()
        }
        #expect(done.wait(timeout: .now() + 30) == .success)
        let line = try #require(mask.withLock { $0 })
        let bits = try #require(UInt64(line.dropFirst("SigBlk:".count).trimmingCharacters(in: .whitespaces), radix: 16))
        #expect(bits & (1 << (UInt64(SIGPIPE) - 1)) != 0, "SIGPIPE not blocked on the I/O thread: \(line)")
    }

    @Test(
        "a Content-Length beyond Int64.max with a progress handler: no trap; in memory it is refused before the body, to a file it is a truncated body"
    )
    func hugeContentLengthWithProgress() async throws {
        let server = try HostileServer { client in
            while true {
                guard !client.readRequest().isEmpty else { return }
                guard client.send("HTTP/1.1 200 OK\r\nContent-Length: 9999999999999999999\r\n\r\nsome bytes") else { return }
                return
            }
        }
        let seen = Mutex<[TransferProgress]>([])
        // In memory: above maxInMemoryBodyBytes, refused at the head.
        let request = Session().request(server.base).downloadProgress { progress in seen.withLock { $0.append(progress) } }
        let response = await request.serializingData().response
        guard case .bodyLimitExceeded = response.error?.transferError?.reason else {
            Issue.record("got \(String(describing: response.error))")
            return
        }
        // To a file: the body is taken, and ends short of the (absurd) length.
        let destination = try makeTemporaryDirectory("huge-length") + "/body"
        let download = Session().download(server.base, to: { _, _ in (URL(filePath: destination), []) })
            .downloadProgress { progress in seen.withLock { $0.append(progress) } }
        let downloaded = await download.serializingDownloadedFileURL().response
        guard case .invalidResponse(.truncatedBody(let expected, let received)) = downloaded.error?.transferError?.reason else {
            Issue.record("got \(String(describing: downloaded.error))")
            return
        }
        #expect(expected == 9_999_999_999_999_999_999 && received == 10)
        _ = await eventually { !seen.withLock { $0.isEmpty } }
        #expect(seen.withLock { $0 }.allSatisfy { $0.totalUnitCount == Int64.max }, "\(seen.withLock { $0 })")
    }

    @Test("partial files abandoned by a dead process are swept; live, recent or foreign files are not")
    func abandonedPartialsAreSwept() throws {
        let directory = try makeTemporaryDirectory("abandoned")
        func make(_ name: String, daysOld: Int) throws -> String {
            let path = directory + "/" + name
            try Data("partial".utf8).write(to: URL(fileURLWithPath: path))
            let then = Date().addingTimeInterval(-Double(daysOld) * 86_400)
            try FileManager.default.setAttributes([.modificationDate: then], ofItemAtPath: path)
            return path
        }
        let abandoned = try make(".TinyFire_A.tmp.tinyfire-aaaaaa", daysOld: 2)
        let recent = try make(".TinyFire_B.tmp.tinyfire-bbbbbb", daysOld: 0)
        let foreign = try make(".other.tmp.tinyfire-cccccc", daysOld: 2)
        // A live download: a sink writing a partial file holds its lock, however old it looks.
        let sink = try AtomicFileSink(
            destination: URL(fileURLWithPath: directory + "/TinyFire_D.tmp"), createIntermediateDirectories: false, replaceExisting: true)
        let live = sink.partialPath
        try FileManager.default.setAttributes([.modificationDate: Date().addingTimeInterval(-3 * 86_400)], ofItemAtPath: live)

        #expect(AtomicFileSink.removeAbandonedPartials(in: directory) == 1)
        #expect(!FileManager.default.fileExists(atPath: abandoned))
        for path in [recent, foreign, live] { #expect(FileManager.default.fileExists(atPath: path), "\(path) was removed") }
        sink.discard()
    }
}
