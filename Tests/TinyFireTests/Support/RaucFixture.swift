import Foundation

/// A real RAUC (Debian's `rauc` 1.8) for one test: `rauc service` on a private D-Bus system
/// bus of its own (`DBUS_SYSTEM_BUS_ADDRESS`), `bootloader=noop`, two file-backed raw slots
/// (A and B), a keyring made with openssl, and bundles built with `rauc bundle`. The booted
/// slot is what `--override-boot-slot` says: `boot(_:)` restarts the service as a reboot would.
final class RaucFixture: @unchecked Sendable {
    let directory: String
    private var bus: ChildProcess?
    private var service: ChildProcess?
    private let rauc: String

    /// The environment commands need to reach the service.
    var environment: [String: String] { ["DBUS_SYSTEM_BUS_ADDRESS": "unix:path=\(directory)/bus"] }

    init(in directory: String) throws {
        guard let rauc = which("rauc"), let dbus = which("dbus-daemon"), which("mksquashfs") != nil else {
            throw FixtureError(description: "rauc, dbus-daemon and mksquashfs are needed (scripts/install-deps.sh installs them)")
        }
        self.rauc = rauc
        self.directory = directory
        try FileManager.default.createDirectory(atPath: directory + "/data", withIntermediateDirectories: true)
        try run(
            "/usr/bin/openssl",
            [
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", directory + "/key.pem", "-out", directory + "/cert.pem",
                "-subj", "/CN=tinyfire-rauc-test", "-days", "30",
            ])
        for slot in ["A", "B"] {
            _ = FileManager.default.createFile(atPath: "\(directory)/slot\(slot).img", contents: Data(count: 4 << 20))
        }
        try """
        [system]
        compatible=tinyfire-test
        bootloader=noop
        data-directory=\(directory)/data

        [keyring]
        path=\(directory)/cert.pem

        [slot.rootfs.0]
        device=\(directory)/slotA.img
        type=raw
        bootname=A

        [slot.rootfs.1]
        device=\(directory)/slotB.img
        type=raw
        bootname=B
        """.write(toFile: directory + "/system.conf", atomically: true, encoding: .utf8)
        try """
        <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
         "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
        <busconfig>
          <type>system</type>
          <listen>unix:path=\(directory)/bus</listen>
          <auth>EXTERNAL</auth>
          <policy context="default"><allow user="*"/><allow own="*"/><allow send_destination="*"/><allow receive_sender="*"/></policy>
        </busconfig>
        """.write(toFile: directory + "/bus.conf", atomically: true, encoding: .utf8)
        bus = try ChildProcess(dbus, ["--config-file=\(directory)/bus.conf", "--nofork"])
        guard waitUntil(within: .seconds(10), { access(directory + "/bus", F_OK) == 0 }) else {
            throw FixtureError(description: "dbus-daemon did not create its socket")
        }
        try boot("A")
    }

    /// "Boots" `slot`: the service restarted with it as the booted slot.
    func boot(_ slot: String) throws {
        service?.stop()
        service = try ChildProcess(
            rauc, ["service", "--conf=\(directory)/system.conf", "--override-boot-slot=\(slot)", "--mount=\(directory)/mnt"],
            environment: ProcessInfo.processInfo.environment.merging(environment) { $1 },
            stdout: .file(directory + "/service.log"), stderr: .file(directory + "/service.log"))
        guard waitUntil(within: .seconds(20), { (try? self.status()) != nil }) else {
            throw FixtureError(description: "rauc service did not answer: \(serviceLog)")
        }
    }

    /// `rauc status` through the service.
    func status() throws -> String {
        let result = try runCapturingOutput(
            rauc, ["status", "--conf=\(directory)/system.conf"],
            environment: ProcessInfo.processInfo.environment.merging(environment) { $1 })
        guard result.status == 0 else { throw FixtureError(description: result.stderr) }
        return String(decoding: result.stdout, as: UTF8.self)
    }

    var serviceLog: String { (try? String(contentsOfFile: directory + "/service.log", encoding: .utf8)) ?? "" }

    /// A signed bundle of `image` (the rootfs slot's content) for `version`.
    func bundle(version: String, image: Data) throws -> Data {
        let content = "\(directory)/content-\(version)"
        try? FileManager.default.removeItem(atPath: content)
        try FileManager.default.createDirectory(atPath: content, withIntermediateDirectories: true)
        try image.write(to: URL(filePath: content + "/rootfs.img"))
        try """
        [update]
        compatible=tinyfire-test
        version=\(version)

        [bundle]
        format=plain

        [image.rootfs]
        filename=rootfs.img
        """.write(toFile: content + "/manifest.raucm", atomically: true, encoding: .utf8)
        let output = "\(directory)/\(version).raucb"
        try? FileManager.default.removeItem(atPath: output)
        try run(rauc, ["bundle", "--cert=\(directory)/cert.pem", "--key=\(directory)/key.pem", content, output])
        return try Data(contentsOf: URL(filePath: output))
    }

    /// The first `count` bytes of slot `slot`'s file.
    func slot(_ slot: String, count: Int) throws -> Data {
        try Data(contentsOf: URL(filePath: "\(directory)/slot\(slot).img")).prefix(count)
    }

    private func run(_ program: String, _ arguments: [String]) throws {
        let result = try runCapturingOutput(
            program, arguments, environment: ProcessInfo.processInfo.environment.merging(environment) { $1 })
        guard result.status == 0 else { throw FixtureError(description: "\(program) \(arguments.first ?? ""): \(result.stderr)") }
    }

    func stop() {
        service?.stop()
        bus?.stop()
    }

    deinit { stop() }
}
