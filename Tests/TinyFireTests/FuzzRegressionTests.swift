import Foundation
import Testing

@testable import TinyFire

/// Replays the fuzzer's seed corpus and every saved crashing input (fuzz/regressions) through
/// the parser and decoder the way the fuzz target does: each must end in a response or a
/// typed error, never a crash.
@Suite("Fuzz regressions")
struct FuzzRegressionTests {
    static let inputs: [String] = {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        var paths: [String] = []
        for directory in ["fuzz/corpus", "fuzz/regressions"] {
            let folder = root.appendingPathComponent(directory)
            let names = (try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []
            paths += names.filter { !$0.hasPrefix(".") }.sorted().map { folder.appendingPathComponent($0).path }
        }
        return paths
    }()

    @Test("the saved inputs exist")
    func inputsExist() {
        #expect(Self.inputs.count >= 8)
    }

    @Test("every saved input parses or fails with a typed error", arguments: inputs)
    func replay(path: String) throws {
        let data = try Data(contentsOf: URL(fileURLWithPath: path))
        guard let options = data.first else { return }
        let body = Array(data.dropFirst())
        do {
            let parsed = try parseAll(body, split: [1, 2, 7, 64, 4096, Int.max][Int(options >> 1) % 6], isHead: options & 1 != 0)
            if let head = parsed.head, parsed.complete,
                let coding = try? ContentCoding.from(headerValues: head.listValues("Content-Encoding"))
            {
                _ = try? decodeAll(coding, Data(parsed.body), limit: 1 << 20)
            }
        } catch {
            #expect(!error.description.isEmpty)
        }
    }
}
