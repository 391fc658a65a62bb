import Foundation
import Testing

@testable import FireAgent
@testable import TinyFire

/// Replays the fuzzer's seed corpus and every saved crashing input (fuzz/regressions) through
/// the parser and decoder the way the fuzz target does: each must end in a response or a
/// typed error, never a crash.
@Suite("Fuzz regressions")
struct FuzzRegressionTests {
    /// The files in these folders of the repository, sorted.
    static func files(in directories: [String]) -> [String] {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        var paths: [String] = []
        for directory in directories {
            let folder = root.appendingPathComponent(directory)
            let names = (try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []
            paths += names.filter { !$0.hasPrefix(".") }.sorted().map { folder.appendingPathComponent($0).path }
        }
        return paths
    }

    static let inputs = files(in: ["fuzz/corpus", "fuzz/regressions"])
    static let queueInputs = files(in: ["fuzz/corpus-queue", "fuzz/regressions-queue"])
    static let rangeInputs = files(in: ["fuzz/corpus-range", "fuzz/regressions-range"])
    static let manifestInputs = files(in: ["fuzz/corpus-manifest", "fuzz/regressions-manifest"])

    @Test("every saved manifest JSON input is read or refused with a position, never a trap", arguments: manifestInputs)
    func replayManifest(path: String) throws {
        let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
        do {
            _ = try StrictJSON.parse(bytes)
            #expect(!path.hasSuffix("dup.json"), "a key given twice, once escaped, was accepted")
        } catch {
            #expect(error.line >= 1 && error.column >= 1 && !error.reason.isEmpty)
        }
    }

    @Test("the saved inputs exist")
    func inputsExist() {
        #expect(Self.inputs.count >= 8 && Self.queueInputs.count >= 4 && Self.rangeInputs.count >= 6 && Self.manifestInputs.count >= 3)
    }

    @Test("every saved journal or cursor input is read without a trap, numbers under the ceiling", arguments: queueInputs)
    func replayQueue(path: String) throws {
        let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
        bytes.withUnsafeBytes { raw in
            for item in OfflineQueueJournal.scan(raw) {
                guard case .record(let offset, let header) = item else { continue }
                #expect(offset + header.recordLength <= raw.count && header.sequence <= OfflineQueueJournal.maxStoredNumber)
                let start = offset + OfflineQueueJournal.headerLength
                _ = try? OfflineQueueJournal.decodePayload(UnsafeRawBufferPointer(rebasing: raw[start..<offset + header.recordLength]))
            }
            if let cursor = OfflineQueueJournal.decodeCursor(raw) { #expect(cursor.generation <= OfflineQueueJournal.maxStoredNumber) }
        }
    }

    @Test("every saved Content-Range input parses to an ordered, in-bounds range or to nothing", arguments: rangeInputs)
    func replayRange(path: String) throws {
        let value = String(decoding: try Data(contentsOf: URL(fileURLWithPath: path)), as: UTF8.self)
        guard let parsed = ContentRange(value) else { return }
        if let range = parsed.range {
            #expect(range.upperBound < UInt64.max && parsed.completeLength.map { range.upperBound < $0 } ?? true)
        } else {
            #expect(parsed.completeLength != nil)
        }
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
