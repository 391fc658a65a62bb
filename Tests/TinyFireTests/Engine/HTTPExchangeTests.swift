import Testing

@testable import TinyFire

/// The HTTP/1.1 exchange state machine, driven from events alone.
@Suite("HTTP/1.1 exchange state machine")
struct HTTPExchangeTests {
    @Test("a GET: head out, request sent, head in, end: the connection is reusable")
    func plainGet() {
        var exchange = HTTPExchange()
        #expect(exchange.start(hasBody: false, expectsContinue: false) == .write)
        #expect(exchange.isSending && exchange.wantsToWrite)
        #expect(exchange.headWritten() == .requestSent)
        #expect(exchange.state == .running(request: .sent, response: .waitingForHead))
        #expect(!exchange.isSending)
        #expect(exchange.finalHeadReceived(keepAlive: true) == .none)
        #expect(exchange.responseEnded(bytesFollowed: false, peerClosed: false) == .complete(reusable: true))
        #expect(exchange.state == .finished(reusable: true))
    }

    @Test("a POST: the body follows the head; Expect is ignored without a body")
    func post() {
        var exchange = HTTPExchange()
        _ = exchange.start(hasBody: true, expectsContinue: false)
        #expect(exchange.headWritten() == .none)
        #expect(exchange.isSendingBody)
        #expect(exchange.bodyWritten() == .requestSent)
        #expect(exchange.bodyWritten() == .none)
        var empty = HTTPExchange()
        _ = empty.start(hasBody: false, expectsContinue: true)
        #expect(empty.headWritten() == .requestSent)
    }

    @Test("Expect: 100-continue: the body waits; a 100 or the end of the wait sends it, other 1xx do not")
    func expectContinue() {
        for ending in ["100", "timer"] {
            var exchange = HTTPExchange()
            _ = exchange.start(hasBody: true, expectsContinue: true)
            #expect(exchange.headWritten() == .holdBodyForContinue)
            #expect(exchange.isWaitingForContinue && exchange.isSending && !exchange.wantsToWrite)
            #expect(exchange.informationalReceived(status: 102) == .none)
            #expect(exchange.isWaitingForContinue)
            let action = ending == "100" ? exchange.informationalReceived(status: 100) : exchange.continueWaitEnded()
            #expect(action == .writeBody)
            #expect(exchange.wantsToWrite && exchange.isSendingBody)
            // The other one, late, changes nothing.
            #expect(exchange.continueWaitEnded() == .none && exchange.informationalReceived(status: 100) == .none)
            #expect(exchange.bodyWritten() == .requestSent)
        }
    }

    @Test("a final answer before the body is out stops sending, and the connection is not reused", arguments: ["head", "continue", "body"])
    func earlyResponse(stage: String) {
        var exchange = HTTPExchange()
        _ = exchange.start(hasBody: true, expectsContinue: stage == "continue")
        if stage != "head" { _ = exchange.headWritten() }
        #expect(exchange.finalHeadReceived(keepAlive: true) == .stopSending)
        #expect(exchange.state == .running(request: .cutShort, response: .receivingBody(keepAlive: true)))
        #expect(!exchange.isSending && !exchange.wantsToWrite)
        // Late events of the request side are ignored.
        #expect(exchange.headWritten() == .none && exchange.bodyWritten() == .none && exchange.continueWaitEnded() == .none)
        #expect(exchange.responseEnded(bytesFollowed: false, peerClosed: false) == .complete(reusable: false))
    }

    @Test(
        "reuse needs a keep-alive head, nothing after the response and a peer that stayed",
        arguments: [(true, false, false, true), (false, false, false, false), (true, true, false, false), (true, false, true, false)])
    func reuse(keepAlive: Bool, bytesFollowed: Bool, peerClosed: Bool, reusable: Bool) {
        var exchange = HTTPExchange()
        _ = exchange.start(hasBody: false, expectsContinue: false)
        _ = exchange.headWritten()
        _ = exchange.finalHeadReceived(keepAlive: keepAlive)
        #expect(exchange.responseEnded(bytesFollowed: bytesFollowed, peerClosed: peerClosed) == .complete(reusable: reusable))
    }

    @Test("a failed write reads what the server said first; only while sending")
    func writeFailure() {
        var exchange = HTTPExchange()
        _ = exchange.start(hasBody: true, expectsContinue: false)
        _ = exchange.headWritten()
        #expect(exchange.writeFailed(32) == .readThenFail(32))
        #expect(exchange.state == .running(request: .cutShort, response: .waitingForHead))
        #expect(exchange.writeFailed(32) == .none)
        // The server's answer still ends the exchange, never reusable.
        #expect(exchange.finalHeadReceived(keepAlive: true) == .none)
        #expect(exchange.responseEnded(bytesFollowed: false, peerClosed: false) == .complete(reusable: false))
    }

    @Test("events out of order are ignored, not crashes: an idle, a failed and a finished exchange")
    func outOfOrder() {
        var idle = HTTPExchange()
        #expect(idle.headWritten() == .none && idle.bodyWritten() == .none && idle.finalHeadReceived(keepAlive: true) == .none)
        #expect(idle.responseEnded(bytesFollowed: false, peerClosed: false) == .none && idle.writeFailed(1) == .none)
        #expect(idle.state == .idle)
        var waiting = HTTPExchange()
        _ = waiting.start(hasBody: false, expectsContinue: false)
        // An end without a head (cannot come from the parser) does not finish anything.
        #expect(waiting.responseEnded(bytesFollowed: false, peerClosed: false) == .none)
        waiting.fail()
        #expect(waiting.state == .failed && !waiting.isSending && waiting.headWritten() == .none)
        // A second head after the first is not a new response.
        var twice = HTTPExchange()
        _ = twice.start(hasBody: false, expectsContinue: false)
        _ = twice.headWritten()
        _ = twice.finalHeadReceived(keepAlive: false)
        #expect(twice.finalHeadReceived(keepAlive: true) == .none)
        #expect(twice.responseEnded(bytesFollowed: false, peerClosed: false) == .complete(reusable: false))
        // A finished exchange starts again for the next request on the same connection.
        #expect(twice.start(hasBody: false, expectsContinue: false) == .write)
        #expect(twice.state == .running(request: .sendingHead, response: .waitingForHead))
    }
}
