import Foundation
import Testing

@testable import FireAgent

/// Keys and signatures made by `openssl`, as a vendor makes them.
struct VendorKeys {
    let directory: String
    let openssl: String

    init(_ name: String) throws {
        directory = try agentScratch("keys-\(name)")
        openssl = try #require(which("openssl"), "openssl is not installed")
    }

    @discardableResult
    func run(_ arguments: [String]) throws -> CLIResult {
        let result = try runCapturingOutput(openssl, arguments, directory: directory)
        try #require(result.status == 0, "openssl \(arguments.joined(separator: " ")): \(result.stderr)")
        return result
    }

    /// Makes `name.key` (private) and `name.pub` (public, PEM).
    func make(_ name: String, _ algorithm: [String]) throws {
        try run(["genpkey"] + algorithm + ["-out", "\(name).key"])
        try run(["pkey", "-in", "\(name).key", "-pubout", "-out", "\(name).pub"])
    }

    func makeEC(_ name: String) throws { try make(name, ["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"]) }
    func makeRSA(_ name: String, bits: Int = 2048) throws { try make(name, ["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:\(bits)"]) }

    /// `openssl dgst -sha256 -sign name.key [options] -out FILE.sig FILE`: the signature's bytes.
    func sign(_ file: String, with name: String, options: [String] = []) throws -> [UInt8] {
        try run(["dgst", "-sha256", "-sign", "\(name).key"] + options + ["-out", "\(file).sig", file])
        return [UInt8](try Data(contentsOf: URL(filePath: directory + "/\(file).sig")))
    }

    func write(_ bytes: [UInt8], _ file: String) throws {
        try Data(bytes).write(to: URL(filePath: directory + "/" + file))
    }

    func key(_ file: String) throws -> ManifestKey { try ManifestKey(contentsOf: directory + "/" + file) }

    func remove() { try? FileManager.default.removeItem(atPath: directory) }
}

@Suite("Firmware: manifest signatures (openssl dgst -sha256 -sign, verified with mbedTLS)")
struct ManifestSignatureTests {
    let manifest = Array(#"{ "version": "2.0.0", "compatible": ["gw"], "image": "gw.img", "size": 3, "sha256": "00" }"#.utf8)

    @Test("ECDSA P-256, RSA PKCS#1 v1.5 and RSA-PSS (any salt length) verify; a changed byte or another key does not")
    func algorithms() throws {
        let vendor = try VendorKeys("algorithms")
        defer { vendor.remove() }
        try vendor.write(manifest, "manifest.json")
        try vendor.makeEC("ec")
        try vendor.makeRSA("rsa")
        try vendor.makeEC("other")
        let ec = try vendor.key("ec.pub")
        let rsa = try vendor.key("rsa.pub")
        let other = try vendor.key("other.pub")
        #expect(ec.algorithm == "ECDSA" && ec.bits == 256 && rsa.algorithm == "RSA" && rsa.bits == 2048)
        #expect(ec.fingerprint.hasPrefix("sha256//") && ec.fingerprint != other.fingerprint)

        let signatures: [(String, [UInt8], ManifestKey)] = [
            ("ECDSA", try vendor.sign("manifest.json", with: "ec"), ec),
            ("RSA PKCS#1 v1.5", try vendor.sign("manifest.json", with: "rsa"), rsa),
            (
                "RSA-PSS salt=digest",
                try vendor.sign(
                    "manifest.json", with: "rsa", options: ["-sigopt", "rsa_padding_mode:pss", "-sigopt", "rsa_pss_saltlen:digest"]), rsa
            ),
            (
                "RSA-PSS salt=max",
                try vendor.sign(
                    "manifest.json", with: "rsa", options: ["-sigopt", "rsa_padding_mode:pss", "-sigopt", "rsa_pss_saltlen:max"]), rsa
            ),
            (
                "RSA-PSS salt=0",
                try vendor.sign(
                    "manifest.json", with: "rsa", options: ["-sigopt", "rsa_padding_mode:pss", "-sigopt", "rsa_pss_saltlen:0"]), rsa
            ),
        ]
        for (name, signature, key) in signatures {
            #expect(try ManifestSignature.verify(signature, of: manifest, keys: [key]) === key, "\(name)")
            // Rotation: any configured key may have signed.
            #expect(try ManifestSignature.verify(signature, of: manifest, keys: [other, key]) === key, "\(name)")
            var tampered = manifest
            tampered[tampered.count - 3] ^= 0x01
            #expect(throws: FirmwareRefusal.self, "\(name) over a changed byte") {
                try ManifestSignature.verify(signature, of: tampered, keys: [key])
            }
            var flipped = signature
            flipped[flipped.count / 2] ^= 0x80
            #expect(throws: FirmwareRefusal.self, "\(name), one bit of the signature flipped") {
                try ManifestSignature.verify(flipped, of: manifest, keys: [key])
            }
            let refusal = #expect(throws: FirmwareRefusal.self, "\(name) by a key not configured") {
                try ManifestSignature.verify(signature, of: manifest, keys: [other])
            }
            #expect(refusal?.kind == .badSignature)
            // The same signature carried as base64 text.
            let text = Array((Data(signature).base64EncodedString(options: .lineLength64Characters) + "\n").utf8)
            #expect(try ManifestSignature.verify(text, of: manifest, keys: [key]) === key, "\(name) in base64")
        }
        // An ECDSA signature checked against an RSA key and the other way round.
        #expect(throws: FirmwareRefusal.self) { try ManifestSignature.verify(signatures[0].1, of: manifest, keys: [rsa]) }
        #expect(throws: FirmwareRefusal.self) { try ManifestSignature.verify(signatures[1].1, of: manifest, keys: [ec]) }
    }

    @Test("no signature, no key, an oversized signature and trailing bytes are refused with a reason")
    func refusals() throws {
        let vendor = try VendorKeys("refusals")
        defer { vendor.remove() }
        try vendor.write(manifest, "manifest.json")
        try vendor.makeEC("ec")
        let key = try vendor.key("ec.pub")
        let signature = try vendor.sign("manifest.json", with: "ec")
        let cases: [(String, [UInt8], [ManifestKey], String)] = [
            ("empty", [], [key], "empty"),
            ("no keys", signature, [], "no firmware key"),
            ("oversized", [UInt8](repeating: 0x30, count: 5000), [key], "more than any key"),
            ("trailing garbage", signature + [0], [key], "not valid"),
            ("truncated", Array(signature.dropLast()), [key], "not valid"),
        ]
        for (name, bytes, keys, words) in cases {
            let refusal = #expect(throws: FirmwareRefusal.self, "\(name)") { try ManifestSignature.verify(bytes, of: manifest, keys: keys) }
            #expect(refusal?.kind == .badSignature && refusal?.message.contains(words) == true, "\(name): \(String(describing: refusal))")
        }
    }

    @Test("keys from PEM, DER and certificates; unusable key files are typed errors that name the file")
    func keyFiles() throws {
        let vendor = try VendorKeys("files")
        defer { vendor.remove() }
        try vendor.write(manifest, "manifest.json")
        try vendor.makeEC("ec")
        try vendor.run(["pkey", "-in", "ec.key", "-pubout", "-outform", "DER", "-out", "ec.der"])
        try vendor.run(["req", "-new", "-x509", "-key", "ec.key", "-subj", "/CN=vendor", "-days", "30", "-out", "ec.crt"])
        let signature = try vendor.sign("manifest.json", with: "ec")
        let pem = try vendor.key("ec.pub")
        for file in ["ec.der", "ec.crt"] {
            let key = try vendor.key(file)
            #expect(key.fingerprint == pem.fingerprint, "\(file)")
            #expect(try ManifestSignature.verify(signature, of: manifest, keys: [key]) === key, "\(file)")
        }
        try vendor.makeRSA("small", bits: 1024)
        // ECDSA on curves other than P-256/384/521: P-192 and secp256k1 (as many bits as P-256).
        for curve in ["prime192v1", "secp256k1"] {
            try vendor.run(["ecparam", "-name", curve, "-genkey", "-noout", "-out", "\(curve).key"])
            try vendor.run(["ec", "-in", "\(curve).key", "-pubout", "-out", "\(curve).pub"])
        }
        for curve in ["secp384r1", "secp521r1"] {
            try vendor.run(["ecparam", "-name", curve, "-genkey", "-noout", "-out", "\(curve).key"])
            try vendor.run(["ec", "-in", "\(curve).key", "-pubout", "-out", "\(curve).pub"])
            #expect(try vendor.key("\(curve).pub").algorithm == "ECDSA")
        }
        try vendor.write(Array("not a key\n".utf8), "garbage.pub")
        try vendor.write([UInt8](repeating: 0x41, count: ManifestKey.maximumFileBytes + 1), "huge.pub")
        for (file, words) in [
            ("small.pub", "1024 bits"), ("garbage.pub", "not a public key"), ("missing.pub", "No such file"), ("huge.pub", "larger than"),
            ("prime192v1.pub", "P-256, P-384 or P-521"), ("secp256k1.pub", "P-256, P-384 or P-521"),
        ] {
            let error = #expect(throws: ManifestKeyError.self, "\(file)") { try vendor.key(file) }
            #expect(error?.description.contains(file) == true && error?.description.contains(words) == true, "\(String(describing: error))")
        }
        // A private key file given by mistake is not taken as the public key.
        #expect(throws: ManifestKeyError.self) { try vendor.key("ec.key") }
    }

    @Test("the incremental SHA-256 matches sha256sum over any split of the bytes")
    func incrementalDigest() throws {
        let vendor = try VendorKeys("digest")
        defer { vendor.remove() }
        var bytes = [UInt8](repeating: 0, count: 1_000_003)
        for index in bytes.indices { bytes[index] = UInt8(truncatingIfNeeded: index &* 2_654_435_761 >> 13) }
        try vendor.write(bytes, "image.bin")
        let sha256sum = try #require(which("sha256sum"))
        let expected = String(
            decoding: try runCapturingOutput(sha256sum, [vendor.directory + "/image.bin"]).stdout.prefix(64), as: UTF8.self)
        let hasher = SHA256Hasher()
        var offset = 0
        var step = 1
        while offset < bytes.count {
            let end = min(bytes.count, offset + step)
            bytes[offset..<end].withUnsafeBytes { hasher.update($0) }
            offset = end
            step = step * 3 + 1
        }
        #expect(hasher.count == UInt64(bytes.count))
        let hex = hasher.finish().map { String(format: "%02x", $0) }.joined()
        #expect(hex == expected)
        #expect(SHA256Hasher.digest(of: bytes).map { String(format: "%02x", $0) }.joined() == expected)
    }
}

extension ManifestSignatureTests {
    @Test("fire-agent firmware verify: a vendor's check before publishing (0 when valid, 65 with the reason when refused)")
    func verifyCommand() throws {
        let vendor = try VendorKeys("cli")
        defer { vendor.remove() }
        try vendor.makeEC("ec")
        try vendor.makeEC("other")
        let image = [UInt8]((0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        try vendor.write(image, "gw.img")
        let digest = SHA256Hasher.digest(of: image).map { String(format: "%02x", $0) }.joined()
        try vendor.write(
            Array(#"{"version": "3.1.0", "compatible": ["gw"], "image": "gw.img", "size": 300000, "sha256": "\#(digest)"}"#.utf8),
            "manifest.json")
        _ = try vendor.sign("manifest.json", with: "ec")
        let d = vendor.directory
        let good = try fireAgent([
            "firmware", "verify", "--key", d + "/other.pub", "--key", d + "/ec.pub", d + "/manifest.json", "--image", d + "/gw.img",
            "--device-type", "gw",
        ])
        let text = String(decoding: good.stdout, as: UTF8.self)
        #expect(good.status == 0, "\(good.stderr)")
        #expect(
            text.contains("signature: valid, by ECDSA 256 bits")
                && text.contains("version 3.1.0 for gw; image gw.img (beside the manifest)"))
        #expect(text.contains("image:     \(d)/gw.img: size and SHA-256 match"), "\(text)")
        try vendor.write(image.map { $0 ^ 1 }, "bad.img")
        let corrupt = try fireAgent(["firmware", "verify", "--key", d + "/ec.pub", d + "/manifest.json", "--image", d + "/bad.img"])
        #expect(
            corrupt.status == 65 && corrupt.stderr.contains("refused: hashMismatch: the SHA-256 of \(d)/bad.img differs"),
            "\(corrupt.stderr)")
        // An image that cannot be read says nothing about the image: not a hash mismatch.
        let unreadable = try fireAgent(["firmware", "verify", "--key", d + "/ec.pub", d + "/manifest.json", "--image", d + "/none.img"])
        #expect(
            unreadable.status == 65
                && unreadable.stderr.contains("refused: stagingFailed: \(d)/none.img cannot be read: No such file or directory"),
            "\(unreadable.stderr)")
        let stranger = try fireAgent(["firmware", "verify", "--key", d + "/other.pub", d + "/manifest.json"])
        #expect(stranger.status == 65 && stranger.stderr.contains("refused: badSignature"), "\(stranger.stderr)")
        let wrongBoard = try fireAgent(["firmware", "verify", "--key", d + "/ec.pub", d + "/manifest.json", "--device-type", "kiosk"])
        #expect(wrongBoard.status == 65 && wrongBoard.stderr.contains("refused: incompatible"), "\(wrongBoard.stderr)")
        let noKey = try fireAgent(["firmware", "verify", "--key", d + "/missing.pub", d + "/manifest.json"])
        #expect(noKey.status == 26 && noKey.stderr.contains("missing.pub"), "\(noKey.stderr)")
    }
}
