import Foundation
import Testing
import TinyFireCore

@testable import FireAgent

@Suite("Firmware: versions, manifests and the update decision")
struct FirmwareManifestTests {
    @Test("semantic versions order as SemVer 2.0.0 says; what is not a version is refused")
    func versions() throws {
        let ordered = try [
            "0.9.9", "1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta", "1.0.0-beta.2", "1.0.0-beta.11",
            "1.0.0-rc.1", "1.0.0", "1.0.1", "1.2", "1.10.0", "v2.0.0", "10.0.0",
        ].map { try #require(SemanticVersion($0), "\($0)") }
        for (lower, higher) in zip(ordered, ordered.dropFirst()) { #expect(lower < higher, "\(lower) < \(higher)") }
        #expect(SemanticVersion("1.2") == SemanticVersion("1.2.0"))
        #expect(SemanticVersion("1.2.0+build.7") == SemanticVersion("v1.2.0"))
        for bad in [
            "", "1..2", "1.2.3.4", "a.b.c", "1.2.x", "1.0.0-", "1.0.0-rc..1", "1.0.0+", "-1.0.0", "99999999999999999999.0.0", "1.0.0-ä",
        ] {
            #expect(SemanticVersion(bad) == nil, "\(bad)")
        }
    }

    let base = AbsoluteURL("https://updates.example/acme/gw/manifest.json")!

    func manifest(_ fields: String) -> [UInt8] {
        Array("{ \(fields) }".utf8)
    }

    let good = #"""
        "version": "2.1.0", "compatible": ["acme-gw-1", "acme-gw-2"], "image": "images/gw-2.1.0.img", "size": 73400320,
        "sha256": "9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0F00A08", "expires": "2027-01-31T00:00:00Z",
        "notes": "fixes", "future": { "anything": 1 }
        """#

    @Test("a manifest is read with its image resolved against the manifest's URL; unknown fields are ignored")
    func parsesManifest() throws {
        let parsed = try FirmwareManifest.parse(manifest(good), from: base)
        #expect(parsed.version == SemanticVersion("2.1.0"))
        #expect(parsed.compatible == ["acme-gw-1", "acme-gw-2"])
        #expect(parsed.image.absoluteString == "https://updates.example/acme/gw/images/gw-2.1.0.img")
        #expect(parsed.size == 73_400_320)
        #expect(parsed.sha256.count == 32 && parsed.sha256.first == 0x9F && parsed.sha256.last == 0x08)
        #expect(parsed.expires == WallTime(secondsSince1970: 1_801_353_600))
        #expect(parsed.notes == "fixes")
        let absolute = try FirmwareManifest.parse(
            manifest(good.replacingOccurrences(of: "images/gw-2.1.0.img", with: "http://cdn.example/x.img")), from: base)
        #expect(absolute.image.absoluteString == "http://cdn.example/x.img")
    }

    @Test("each bad field is refused by name; a key given twice and an oversized document too")
    func refusesBadManifests() {
        let cases: [(String, String)] = [
            (good.replacingOccurrences(of: #""version": "2.1.0","#, with: ""), "version is missing"),
            (good.replacingOccurrences(of: "2.1.0\",", with: "two\","), "version \"two\" is not a version"),
            (good.replacingOccurrences(of: #"["acme-gw-1", "acme-gw-2"]"#, with: "[]"), "compatible must be a non-empty array"),
            (good.replacingOccurrences(of: "images/gw-2.1.0.img", with: "ftp://x/y"), "is not an http(s) URL"),
            (good.replacingOccurrences(of: "73400320", with: "-5"), "size -5 is not a whole number"),
            (good.replacingOccurrences(of: "73400320", with: "1.5"), "is not a whole number"),
            (good.replacingOccurrences(of: "73400320", with: "\"big\""), "size must be a number"),
            (good.replacingOccurrences(of: "9F86D0", with: "XX86D0"), "sha256 must be 64 hexadecimal digits"),
            (good.replacingOccurrences(of: "2027-01-31T00:00:00Z", with: "next year"), "expires must be an RFC 3339 time"),
            (good.replacingOccurrences(of: "2027-01-31T00:00:00Z", with: "2027-02-30T00:00:00Z"), "expires must be an RFC 3339 time"),
            (good + #", "version": "9.9.9""#, "appears twice"),
        ]
        for (fields, expected) in cases {
            #expect(throws: FirmwareRefusal.self) { try FirmwareManifest.parse(manifest(fields), from: base) }
            do {
                _ = try FirmwareManifest.parse(manifest(fields), from: base)
            } catch {
                #expect(error.kind == .badManifest && error.message.contains(expected), "\(error) for \(expected)")
            }
        }
        let huge = manifest(good + ", \"pad\": \"" + String(repeating: "x", count: 70_000) + "\"")
        #expect(throws: FirmwareRefusal(kind: .badManifest, message: "\(huge.count) bytes, more than 65536")) {
            try FirmwareManifest.parse(huge, from: base)
        }
        #expect(throws: FirmwareRefusal.self) { try FirmwareManifest.parse(Array("[1]".utf8), from: base) }
    }

    @Test("size is bounded at 2^48 when the manifest is read: 2^62 and 2^63-1 (whose arithmetic overflowed) are refused by name")
    func sizeBound() throws {
        #expect(FirmwareManifest.maximumImageSize == 1 << 48)
        let largest = try FirmwareManifest.parse(manifest(good.replacingOccurrences(of: "73400320", with: "\(1 << 48)")), from: base)
        #expect(largest.size == 1 << 48)
        for size in ["281474976710657", "4611686018427387904", "9223372036854775807"] {
            do {
                _ = try FirmwareManifest.parse(manifest(good.replacingOccurrences(of: "73400320", with: size)), from: base)
                Issue.record("size \(size) accepted")
            } catch {
                #expect(error.kind == .badManifest, "\(error)")
                #expect(error.message == "size \(size) is above 281474976710656 bytes (2^48), the largest image accepted", "\(error)")
            }
        }
        #expect(FirmwareManifest.sizeProblem(0) == "size 0 is not a whole number of bytes above 0")
        #expect(FirmwareManifest.sizeProblem(1) == nil && FirmwareManifest.sizeProblem(1 << 48) == nil)
    }

    @Test("the staging space check saturates: no signed size, reserve or block count overflows it; too large for the file system is final")
    func stagingSpace() {
        let directory = "/fw/staging"
        let mib: Int64 = 1 << 20
        let small = StagingSpace.FileSystem(available: 6 * mib, total: 8 * mib)
        #expect(StagingSpace.judge(imageSize: 3 * mib, onDisk: 0, reserve: mib, fileSystem: small, directory: directory) == .fits)
        // Short now (6 MiB free for 5 + 1): it waits; the reason names no free count, so it stays one reason.
        let short = StagingSpace.judge(imageSize: 5 * mib, onDisk: 0, reserve: 2 * mib, fileSystem: small, directory: directory)
        #expect(
            short
                == .waits(
                    "not enough space in /fw/staging: 5242880 bytes to download and firmware.stagingReserveBytes (2097152) to keep free"))
        // What is on disk already counts.
        #expect(StagingSpace.judge(imageSize: 5 * mib, onDisk: 2 * mib, reserve: 2 * mib, fileSystem: small, directory: directory) == .fits)
        // Larger than the file system less the reserve: never.
        #expect(
            StagingSpace.judge(imageSize: 12 * mib, onDisk: 0, reserve: mib, fileSystem: small, directory: directory)
                == .never(
                    "tooLarge: the image (12582912 bytes) cannot fit in /fw/staging: its file system holds 8388608 bytes in all, "
                        + "less firmware.stagingReserveBytes (1048576) kept free"))
        #expect(
            StagingSpace.judge(imageSize: mib, onDisk: 0, reserve: 16 * mib, fileSystem: small, directory: directory) != .fits,
            "a reserve above the file system leaves no room")
        // The figures that overflowed: a signed size near 2^63 with the reserve added, a block
        // count times the block size beyond Int64.
        let huge = StagingSpace.FileSystem(availableBlocks: .max, totalBlocks: .max, blockSize: 4096)
        #expect(huge.available == .max && huge.total == .max)
        #expect(
            StagingSpace.judge(imageSize: .max - 1, onDisk: 0, reserve: 1 << 30, fileSystem: huge, directory: directory) != .fits)
        #expect(StagingSpace.judge(imageSize: .max, onDisk: .max, reserve: .max, fileSystem: small, directory: directory) != .fits)
        #expect(StagingSpace.judge(imageSize: 4 * mib, onDisk: -5, reserve: -1, fileSystem: small, directory: directory) == .fits)
    }

    /// Manifests each reader could read differently, or that are JSON5 rather than JSON.
    static let looseManifests: [(name: String, text: String, expected: String)] = [
        ("escaped duplicate", #"{ "version": "1.0.0", "versio\u006e": "99.0.0" }"#, #"the key "version" appears twice"#),
        ("escaped duplicate, both escaped", #"{ "v\u0065rsion": "1.0.0", "ve\u0072sion": "99.0.0" }"#, "appears twice"),
        ("comment", "{ // vendor\n \"version\": \"1.0.0\" }", "a comment"),
        ("trailing comma", #"{ "version": "1.0.0", }"#, "a trailing comma"),
        ("trailing comma in an array", #"{ "compatible": ["a",] }"#, "a trailing comma"),
        ("unquoted key", #"{ version: "1.0.0" }"#, "expected a key in double quotes"),
        ("single quotes", #"{ "version": '1.0.0' }"#, "single-quoted"),
        ("hexadecimal size", #"{ "size": 0x10 }"#, "in a number"),
        ("plus sign", #"{ "size": +16 }"#, "unexpected '+'"),
        ("leading zero", #"{ "size": 016 }"#, "leading zero"),
        ("NaN", #"{ "size": NaN }"#, "unexpected 'N'"),
        ("Infinity", #"{ "size": -Infinity }"#, "a digit after '-'"),
        ("lone surrogate", #"{ "notes": "\ud800" }"#, "lone high surrogate"),
        ("lone low surrogate", #"{ "notes": "\udc00x" }"#, "lone low surrogate"),
        ("raw control character", "{ \"notes\": \"a\tb\" }", "control character"),
        ("unknown escape", #"{ "notes": "\x41" }"#, "unknown escape"),
        ("byte order mark", "\u{FEFF}{ \"version\": \"1.0.0\" }", "byte order mark"),
        ("text after", #"{ "version": "1.0.0" } {}"#, "text after the document"),
        ("huge integer", #"{ "size": 99999999999999999999 }"#, "outside -2^63"),
        ("deep", String(repeating: "[", count: 40) + String(repeating: "]", count: 40), "nested more than 32"),
    ]

    @Test(
        "strict RFC 8259: JSON5, duplicates after unescaping, lone surrogates, a BOM and non-integer sizes are refused; Python's json reads every accepted manifest the same"
    )
    func strictJSON() throws {
        // Whole manifests, valid but for one thing, so that nothing else refuses them.
        let whole = [
            ("a whole manifest with an escaped duplicate", "{" + good + #", "versio\u006e": "99.0.0" }"#, "appears twice"),
            ("a whole manifest with a comment", "{ /* signed */ " + good + " }", "a comment"),
            ("a whole manifest with a trailing comma", "{" + good + ", }", "a trailing comma"),
        ]
        for (name, text, expected) in Self.looseManifests + whole {
            do {
                _ = try FirmwareManifest.parse(Array(text.utf8), from: base)
                Issue.record("\(name) accepted: \(text)")
            } catch {
                #expect(error.kind == .badManifest && error.message.contains(expected), "\(name): \(error)")
            }
        }
        // Not UTF-8: a raw surrogate's encoding, a truncated sequence.
        for bytes in [[0xED, 0xA0, 0x80], [0xC3]] as [[UInt8]] {
            let document = Array(#"{ "notes": ""#.utf8) + bytes + Array(#"" }"#.utf8)
            #expect(throws: FirmwareRefusal.self) { try FirmwareManifest.parse(document, from: base) }
        }
        for size in ["1e3", "1.0", "73400320.0", "7.34e7"] {
            do {
                _ = try FirmwareManifest.parse(manifest(good.replacingOccurrences(of: "73400320", with: size)), from: base)
                Issue.record("size \(size) accepted")
            } catch {
                #expect(error.message.contains("without fraction or exponent"), "\(size): \(error)")
            }
        }
        // What is accepted is read as Python's json reads it: escapes, surrogate pairs, nesting.
        let accepted = [
            manifest(good),
            manifest(
                good.replacingOccurrences(of: #""notes": "fixes""#, with: #""notes": "caf\u00e9 \ud83d\ude00 \"q\" \\ \/ \b\f\n\r\t""#)),
            manifest(good.replacingOccurrences(of: #""version": "2.1.0""#, with: #""vers\u0069on": "2.1.0""#)),
            Array(("\r\n\t " + "{" + good + "}" + " \n").utf8),
        ]
        let directory = try makeTemporaryDirectory("strict-json")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let script = """
            import json, sys
            for path in sys.argv[1:]:
                m = json.loads(open(path, "rb").read())
                print(json.dumps([m["version"], m["size"], m["notes"], m["compatible"]]))
            """
        try script.write(toFile: directory + "/read.py", atomically: true, encoding: .utf8)
        var paths: [String] = []
        var ours: [String] = []
        for (index, document) in accepted.enumerated() {
            let parsed = try FirmwareManifest.parse(document, from: base)
            paths.append(directory + "/m\(index).json")
            try Data(document).write(to: URL(filePath: paths[index]))
            ours.append("\(parsed.version)|\(parsed.size)|\(parsed.notes ?? "")|\(parsed.compatible)")
        }
        let python = try #require(which("python3"))
        let result = try runCapturingOutput(python, [directory + "/read.py"] + paths)
        #expect(result.status == 0, "\(result.stderr)")
        let theirs = String(decoding: result.stdout, as: UTF8.self).split(separator: "\n").map { line -> String in
            guard let data = line.data(using: .utf8),
                let fields = try? JSONDecoder().decode(PythonReading.self, from: data)
            else { return "unreadable: \(line)" }
            return
                "\(SemanticVersion(fields.version).map { "\($0)" } ?? fields.version)|\(fields.size)|\(fields.notes)|\(fields.compatible)"
        }
        #expect(theirs == ours)
        // Nesting up to the limit is read.
        let nested = #"{ "nested": "# + String(repeating: "[", count: 30) + String(repeating: "]", count: 30) + ", " + good + " }"
        #expect(throws: Never.self) { try FirmwareManifest.parse(Array(nested.utf8), from: base) }
    }

    /// One line of read.py's output: `[version, size, notes, compatible]`.
    struct PythonReading: Decodable {
        let version: String
        let size: Int64
        let notes: String
        let compatible: [String]

        init(from decoder: any Decoder) throws {
            var container = try decoder.unkeyedContainer()
            version = try container.decode(String.self)
            size = try container.decode(Int64.self)
            notes = try container.decode(String.self)
            compatible = try container.decode([String].self)
        }
    }

    @Test("RFC 3339 times: Z, offsets, fractions; impossible dates refused")
    func times() {
        #expect(WallTime(rfc3339: "2027-01-31T00:00:00Z") == WallTime(secondsSince1970: 1_801_353_600))
        #expect(WallTime(rfc3339: "2027-01-31T01:00:00+01:00") == WallTime(secondsSince1970: 1_801_353_600))
        #expect(WallTime(rfc3339: "2027-01-30T23:00:00.5-01:00") == WallTime(millisecondsSince1970: 1_801_353_600_500))
        for bad in [
            "2027-01-31", "2027-13-01T00:00:00Z", "2027-01-31T24:00:00Z", "2027-01-31T00:00:00", "2027-01-31T00:00:00+0100",
            "2027-02-29T00:00:00Z",
        ] {
            #expect(WallTime(rfc3339: bad) == nil, "\(bad)")
        }
    }

    @Test("the decision: expired, incompatible, same or older refused unless downgrades are allowed")
    func decision() throws {
        let parsed = try FirmwareManifest.parse(manifest(good), from: base)
        let before = WallTime(secondsSince1970: 1_801_353_599)
        try UpdateDecision.check(
            parsed, deviceType: "acme-gw-2", highestAccepted: SemanticVersion("2.0.9"), allowDowngrade: false, now: before)
        func refusal(_ body: () throws -> Void) -> FirmwareRefusal.Kind? {
            do {
                try body()
                return nil
            } catch {
                return (error as? FirmwareRefusal)?.kind
            }
        }
        #expect(
            refusal {
                try UpdateDecision.check(
                    parsed, deviceType: "acme-gw-1", highestAccepted: nil, allowDowngrade: false,
                    now: WallTime(secondsSince1970: 1_801_353_600))
            }
                == .expired)
        #expect(
            refusal { try UpdateDecision.check(parsed, deviceType: "other", highestAccepted: nil, allowDowngrade: false, now: before) }
                == .incompatible)
        // The replayed older manifest: refused against the highest version ever accepted.
        #expect(
            refusal {
                try UpdateDecision.check(
                    parsed, deviceType: "acme-gw-1", highestAccepted: SemanticVersion("2.1.0"), allowDowngrade: false, now: before)
            }
                == .notNewer)
        #expect(
            refusal {
                try UpdateDecision.check(
                    parsed, deviceType: "acme-gw-1", highestAccepted: SemanticVersion("3.0.0-rc.1"), allowDowngrade: false, now: before)
            }
                == .notNewer)
        #expect(
            refusal {
                try UpdateDecision.check(
                    parsed, deviceType: "acme-gw-1", highestAccepted: SemanticVersion("3.0.0"), allowDowngrade: true, now: before)
            }
                == nil)
    }
}
