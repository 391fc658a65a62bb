import Foundation
import Testing

@Suite("the test harness's child processes: a start stuck before execve is seen and ended")
struct ChildProcessTests {
    @Test("a child that ran its program is left to finish; one whose command line never names it is killed after the limit")
    func neverExecutedWatch() throws {
        // Runs its program past the limit: its output is collected whole.
        let running = try ChildProcess("/usr/bin/perl", ["-e", "sleep 2; print qq(done)"], stdout: .pipe, stderr: .pipe)
        let result = try #require(running.collectOutput(neverExecuted: ("/usr/bin/perl", .seconds(1))))
        #expect(result.status == 0 && String(decoding: result.stdout, as: UTF8.self) == "done")
        // Renames itself (its /proc cmdline no longer names the program), as a fork that never
        // reached execve looks: killed once the limit passes, long before it would end.
        let start = ContinuousClock.now
        let stuck = try ChildProcess("/usr/bin/perl", ["-e", "$0 = q(stuck); sleep 60"], stdout: .pipe, stderr: .pipe)
        #expect(stuck.collectOutput(neverExecuted: ("/usr/bin/perl", .seconds(1))) == nil)
        #expect(stuck.wasSignalled && ContinuousClock.now - start < .seconds(30))
    }
}
