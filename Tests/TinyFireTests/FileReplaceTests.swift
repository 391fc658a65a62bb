import Foundation
import Testing

@testable import TinyFireCore

@Suite("replaceFile: the one write-then-rename, atomic or durable")
struct FileReplaceTests {
    func scratch() throws -> String {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("tinyfire-replace-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        return directory
    }

    @Test("the file is replaced whole, with its mode; nothing is left at the temporary name")
    func replaces() throws {
        let directory = try scratch()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/state.json"
        try Data("old".utf8).write(to: URL(filePath: path))
        for durability in [Durability.atomic, .durable] {
            #expect(replaceFile(path, with: Array("new \(durability)".utf8), mode: 0o640, durability: durability) == nil)
            #expect(try String(contentsOfFile: path, encoding: .utf8) == "new \(durability)")
            let mode = try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int
            #expect(mode == 0o640, "\(String(describing: mode)) (a umask that takes group read would change it)")
            #expect(!FileManager.default.fileExists(atPath: path + ".tmp"))
        }
    }

    @Test("a symlink at the temporary name is never followed: its target stays as it was")
    func symlinkAtTemporaryName() throws {
        let directory = try scratch()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let target = directory + "/precious"
        try Data("keep".utf8).write(to: URL(filePath: target))
        try FileManager.default.createSymbolicLink(atPath: directory + "/floor.new", withDestinationPath: target)
        #expect(replaceFile(directory + "/floor", with: Array("1\n".utf8), durability: .durable, temporarySuffix: ".new") == nil)
        #expect(try String(contentsOfFile: target, encoding: .utf8) == "keep")
        #expect(try String(contentsOfFile: directory + "/floor", encoding: .utf8) == "1\n")
    }

    @Test("failures name the step and the file, and leave the old file: a missing directory, a full file system")
    func failures() throws {
        let missing = replaceFile("/nonexistent-\(UUID().uuidString)/x", with: [1], durability: .durable)
        #expect(missing?.operation == "create" && missing?.code == ENOENT, "\(String(describing: missing))")
        #expect(missing?.description.contains("cannot create: No such file or directory") == true)
        // /dev/full takes no byte: a rename over it is refused before (a device, not our file),
        // so the full file system is tried on a tmpfs of one page when the test may mount one.
        guard getuid() == 0 else { return }
        let directory = try scratch()
        defer {
            umount(directory)
            try? FileManager.default.removeItem(atPath: directory)
        }
        guard mount("tmpfs", directory, "tmpfs", 0, "size=4k") == 0 else {
            Issue.record("cannot mount a tmpfs: \(errnoMessage(errno))")
            return
        }
        let path = directory + "/state.json"
        try Data("old".utf8).write(to: URL(filePath: path))
        let full = replaceFile(path, with: [UInt8](repeating: 7, count: 64 << 10), durability: .durable)
        #expect(full?.operation == "write" && full?.code == ENOSPC, "\(String(describing: full))")
        #expect(try String(contentsOfFile: path, encoding: .utf8) == "old")
        #expect(!FileManager.default.fileExists(atPath: path + ".tmp"))
    }
}
