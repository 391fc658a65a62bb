import Foundation
import Testing
import TinyFireCore

@testable import FireAgent

/// Byte rates are `Int` in the engine, 32 bits on armv7 boards: the config bounds them where it
/// reads them, so a large value is a problem named by its key, never a trap in the conversion.
@Suite("firmware rates: bounded at parse, a problem beyond 1 GiB/s")
struct RateBoundTests {
    func problems(firmware extra: String) -> [String] {
        let text = """
            { device: { id: 'board-1' }, server: { url: 'https://fleet.example:8086' }, telemetry: { influx: { database: 'fleet' } },
              firmware: { manifestURL: 'https://u.example/m.json', keys: ['/nonexistent/vendor.pub'], deviceType: 'gw',
                          versionFile: '/etc/v', install: ['i', '{file}'], \(extra) } }
            """
        do {
            _ = try AgentConfig.parse(Data(text.utf8), file: "test.json5", machineIDPath: "/nonexistent", environment: { _ in nil })
            return []
        } catch {
            return error.problems.map(\.description)
        }
    }

    @Test(
        "maxBytesPerSecond and lowSpeedBytesPerSecond of 3GiB are problems naming the key and the 1 GiB maximum",
        arguments: ["maxBytesPerSecond", "lowSpeedBytesPerSecond"])
    func threeGiB(key: String) {
        let found = problems(firmware: "\(key): '3GiB'")
        #expect(found.contains { $0.hasPrefix("firmware.\(key): \"3GiB\" is out of range") && $0.hasSuffix("…1GiB") }, "\(found)")
        #expect(problems(firmware: "\(key): 4294967296").contains { $0.hasPrefix("firmware.\(key): 4294967296 is out of range") })
    }

    @Test("up to the maximum, a rate is read, and it fits a 32-bit Int")
    func withinTheBound() throws {
        #expect(AgentConfig.Firmware.maximumBytesPerSecond == 1 << 30)
        #expect(AgentConfig.Firmware.maximumBytesPerSecond <= Int64(Int32.max))
        let found = problems(firmware: "maxBytesPerSecond: '1GiB', lowSpeedBytesPerSecond: '512MiB'")
        #expect(!found.contains { $0.contains("BytesPerSecond") }, "\(found)")
    }
}
