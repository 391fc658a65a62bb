import Foundation
import Testing

@testable import FireAgent

/// The agent's state directories are judged along the path the kernel follows: a symbolic
/// link in the middle leads into whatever directory it names, and every directory there is
/// judged as the ones on the written path are.
@Suite("agent state directories: symbolic links in the path are followed and judged", .serialized)
struct DirectoryTrustTests {
    /// `scratch/foreign` owned by another user (mode 0755) holding `state` (root's, 0700), and
    /// `scratch/agent`, the agent's own, where the links go.
    func layout(_ name: String) throws -> (scratch: String, foreign: String, agent: String, uid: uid_t) {
        let scratch = try agentScratch(name)
        let (uid, gid) = try SpoolAttacker.ids()
        let foreign = scratch + "/foreign"
        try FileManager.default.createDirectory(atPath: foreign + "/state", withIntermediateDirectories: true)
        #expect(chown(foreign, uid, gid) == 0 && chmod(foreign, 0o755) == 0)
        chmod(foreign + "/state", 0o700)
        let agent = scratch + "/agent"
        try FileManager.default.createDirectory(atPath: agent, withIntermediateDirectories: true)
        chmod(scratch, 0o755)
        chmod(agent, 0o755)
        return (scratch, foreign, agent, uid)
    }

    @Test("a link in the middle of the path into a directory another user owns: that directory is named")
    func linkIntoForeignDirectory() throws {
        let (scratch, foreign, agent, uid) = try layout("link-foreign")
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        // Absolute and relative targets; the queue below does not exist yet (the agent makes it).
        #expect(symlink(foreign + "/state", agent + "/absolute") == 0)
        #expect(symlink("../foreign/./state", agent + "/relative") == 0)
        for link in ["absolute", "relative"] {
            for below in ["/queue", "", "/queue/../queue"] {
                let path = agent + "/" + link + below
                let problem = FileTrust.privateDirectoryProblem(path)
                #expect(
                    problem?.hasPrefix("\(foreign) is owned by uid \(uid), not by the agent's user") == true,
                    "\(path): \(String(describing: problem))")
                #expect(problem?.contains("through the symbolic link \(agent)/\(link)") == true, "\(String(describing: problem))")
            }
        }
        // A chain: a link to a link that leads there.
        #expect(symlink(agent + "/relative", agent + "/chain") == 0)
        #expect(FileTrust.privateDirectoryProblem(agent + "/chain/queue")?.hasPrefix("\(foreign) is owned by uid \(uid)") == true)
        // The same directory reached by its own path is judged the same.
        #expect(FileTrust.privateDirectoryProblem(foreign + "/state/queue")?.hasPrefix("\(foreign) is owned by uid \(uid)") == true)
    }

    @Test("links into the agent's own directories pass; loops, files and open directories behind a link are named")
    func linksTheAgentOwns() throws {
        let (scratch, _, agent, _) = try layout("link-own")
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let own = scratch + "/own/state"
        try FileManager.default.createDirectory(atPath: own, withIntermediateDirectories: true)
        chmod(scratch + "/own", 0o755)
        chmod(own, 0o700)
        #expect(symlink(own, agent + "/state") == 0)
        #expect(FileTrust.privateDirectoryProblem(agent + "/state/queue") == nil)
        #expect(FileTrust.privateDirectoryProblem(agent + "/state") == nil)
        // The directory a link names is the agent's state itself: not writable by others.
        chmod(own, 0o777)
        #expect(FileTrust.privateDirectoryProblem(agent + "/state")?.hasPrefix("\(own) is writable by group or others (mode 0777)") == true)
        chmod(own, 0o700)
        // A loop, and a link to a file.
        #expect(symlink(agent + "/loop-b", agent + "/loop-a") == 0 && symlink(agent + "/loop-a", agent + "/loop-b") == 0)
        #expect(FileTrust.privateDirectoryProblem(agent + "/loop-a/queue")?.contains("too many symbolic links") == true)
        #expect(FileManager.default.createFile(atPath: scratch + "/file", contents: Data()))
        #expect(symlink(scratch + "/file", agent + "/file") == 0)
        #expect(FileTrust.privateDirectoryProblem(agent + "/file/queue") == "\(scratch)/file is not a directory")
    }
}
