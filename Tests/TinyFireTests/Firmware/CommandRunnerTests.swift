import Foundation
import Testing

@testable import FireAgent

@Suite("Firmware: commands run without a shell, bounded and timed")
struct CommandRunnerTests {
    @Test("exit codes and output; arguments reach the program as they are, never through a shell")
    func exitAndArguments() throws {
        let directory = try agentScratch("command")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let marker = directory + "/injected"
        let hostile = "x; touch \(marker) $(touch \(marker)) `touch \(marker)`"
        let echo = try CommandRunner.run(["printf", "%s|", hostile, "two words"], timeout: .seconds(10))
        #expect(echo.succeeded && echo.exitCode == 0)
        #expect(String(decoding: echo.output, as: UTF8.self) == hostile + "|two words|")
        #expect(!FileManager.default.fileExists(atPath: marker))
        let failing = try CommandRunner.run(["sh", "-c", "echo to-stderr >&2; exit 3"], timeout: .seconds(10))
        #expect(!failing.succeeded && failing.exitCode == 3 && failing.summary == "exit 3")
        #expect(failing.outputText == "to-stderr\n")
        let killed = try CommandRunner.run(["sh", "-c", "kill -9 $$"], timeout: .seconds(10))
        #expect(killed.signal == 9 && killed.summary == "killed by signal 9")
        #expect(
            CommandRunner.expand(["rauc", "install", "{file}", "--v={version}"], file: "/a b/img", version: "2.1.0")
                == ["rauc", "install", "/a b/img", "--v=2.1.0"])
    }

    @Test("a command inherits its streams and the held descriptor, nothing else the agent has open")
    func onlyItsOwnDescriptors() throws {
        let directory = try agentScratch("descriptors")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        // As a thread of the agent might have it at the moment of the spawn: open for writing,
        // without O_CLOEXEC.
        let leaked = open(directory + "/being-written", O_WRONLY | O_CREAT, 0o644)
        #expect(leaked > 4)
        defer { close(leaked) }
        let held = open(directory + "/lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        defer { close(held) }
        let listing = "for fd in /proc/self/fd/*; do echo ${fd##*/}; done"
        for (descriptor, expected) in [(nil, ["0", "1", "2"]), (held, ["0", "1", "2", "3"])] {
            let result = try CommandRunner.run(["sh", "-c", listing], timeout: .seconds(30), heldDescriptor: descriptor)
            // The shell lists its own descriptors: the glob runs in the shell itself, which
            // holds one more while it reads the directory.
            let open = result.outputText.split(separator: "\n").map(String.init)
            #expect(!open.contains(String(leaked)), "descriptor \(leaked) leaked into the command: \(open)")
            #expect(Set(expected).isSubset(of: open) && open.count == expected.count + 1, "\(open)")
        }
    }

    @Test("output beyond the limit is counted, not kept")
    func boundedOutput() throws {
        let result = try CommandRunner.run(["head", "-c", "1000000", "/dev/zero"], timeout: .seconds(10), outputLimit: 4096)
        #expect(result.succeeded && result.output.count == 4096 && result.droppedOutputBytes == 1_000_000 - 4096)
        #expect(result.outputText.hasSuffix("…(995904 more bytes)"))
    }

    @Test("past its timeout the whole process group is killed, children included")
    func timeout() throws {
        let directory = try agentScratch("timeout")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let pidFile = directory + "/child.pid"
        let result = try CommandRunner.run(
            ["sh", "-c", "sleep 60 & echo $! > \(pidFile); echo started; wait"], timeout: .milliseconds(500))
        #expect(result.timedOut && !result.succeeded && result.summary == "timed out (killed)")
        #expect(result.outputText == "started\n")
        let child = try #require(
            Int32(try String(contentsOfFile: pidFile, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)))
        // The grandchild got the group's signal too (reaped by init once killed).
        #expect(waitUntil(within: .seconds(10)) { kill(child, 0) != 0 }, "the background sleep \(child) outlived the timeout")
    }

    @Test("a program that does not exist is a typed error naming it")
    func missingProgram() throws {
        let error = #expect(throws: CommandError.self) { try CommandRunner.run(["/nonexistent/installer", "x"], timeout: .seconds(1)) }
        #expect(error?.description == "cannot run /nonexistent/installer: No such file or directory")
        #expect(throws: CommandError.self) { try CommandRunner.run([], timeout: .seconds(1)) }
        let unknown = #expect(throws: CommandError.self) { try CommandRunner.run(["no-such-installer-here"], timeout: .seconds(1)) }
        #expect(unknown?.description == "cannot run no-such-installer-here: No such file or directory")
        let directory = try agentScratch("noexec")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try "#!/bin/sh\n".write(toFile: directory + "/install", atomically: true, encoding: .utf8)
        chmod(directory + "/install", 0o644)
        let notExecutable = #expect(throws: CommandError.self) { try CommandRunner.run([directory + "/install"], timeout: .seconds(1)) }
        #expect(notExecutable?.description == "cannot run \(directory)/install: Permission denied")
    }
}
