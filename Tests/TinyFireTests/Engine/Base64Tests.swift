import Foundation
import Testing

@testable import TinyFireCore

@Suite("the core's base64 (pins, key fingerprints, signatures): the same bytes as Foundation")
struct Base64Tests {
    @Test("decoding: what Foundation's Data(base64Encoded:) takes and refuses, three quirks of its own left out")
    func decodingAgainstFoundation() {
        let texts = [
            "", "QQ==", "QR==", "QUI=", "QUJ=", "QUJD", "QUJDRA==", "+/8=", "AAAA", "////", "QQ", "QQ=", "Q===", "QQ==QQ==",
            " QQ==", "QUJD\n", "QUJDRA=", "-_8=", "QU JD", "Q=Q=", "é===",
        ]
        for text in texts {
            #expect(Base64.decode(text) == Data(base64Encoded: text).map { [UInt8]($0) }, "\(text.debugDescription)")
        }
        // Foundation reads "====" as one zero byte, "QU=D" as two bytes and "QUJD====" as
        // "QUJD"; a `=` is padding only in the last two places of the last group here.
        for quirk in ["====", "QU=D", "QUJD===="] {
            #expect(Data(base64Encoded: quirk) != nil && Base64.decode(quirk) == nil, "\(quirk)")
        }
    }

    @Test("every length from 0 to 64 bytes, every byte value, round trip")
    func roundTrip() {
        var generator = SystemRandomNumberGenerator()
        for length in 0...64 {
            let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) }
            let text = Base64.encode(bytes)
            #expect(text == Data(bytes).base64EncodedString())
            #expect(Base64.decode(text) == bytes)
        }
        let all = (0...255).map { UInt8($0) }
        #expect(Base64.decode(Base64.encode(all)) == all)
    }
}
