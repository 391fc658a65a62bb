import Foundation

/// A fresh directory for one agent test (removed by the test).
func agentScratch(_ name: String) throws -> String {
    let path = FileManager.default.temporaryDirectory.appending(path: "tinyfire-agent-\(name)-\(UUID().uuidString.prefix(8))").path
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    return path
}

/// Drops a line-protocol file into `directory/spool` the way other programs must: written
/// under a hidden name, then renamed in.
func dropInSpool(_ text: String, as name: String, in directory: String) throws {
    let hidden = directory + "/spool/." + name
    try Data(text.utf8).write(to: URL(filePath: hidden))
    rename(hidden, directory + "/spool/" + name)
}
