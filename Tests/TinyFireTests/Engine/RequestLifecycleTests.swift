import Foundation
import Testing

@testable import TinyFire

@Suite("one request's lifecycle, from events: exchange, redirects with and without a handler, drains, the stale-connection retry")
struct RequestLifecycleTests {
    func lifecycle(
        _ url: String = "http://a.test/start", method: HTTPMethod = .get, maxRedirects: Int = 5, handler: Bool = false
    ) -> RequestLifecycle {
        RequestLifecycle(
            spec: RequestSpec(url: AbsoluteURL(url)!, method: method, headers: [:], body: nil),
            policy: RedirectPolicy(maxRedirects: maxRedirects, allowsInsecureRedirects: false), asksRedirectHandler: handler)
    }

    /// The action's name, and its target's URL where it has one.
    func describe(_ action: RequestLifecycle.Action) -> String {
        switch action {
        case .startHop: return "startHop"
        case .deliverResponse: return "deliverResponse"
        case .deliverKeptResponse(let complete): return "deliverKeptResponse(complete: \(complete))"
        case .askRedirectHandler(let target): return "ask \(target.url.absoluteString)"
        case .redirect(let target, let now): return "redirect \(target.url.absoluteString)\(now ? " now" : "")"
        case .follow: return "follow"
        case .complete: return "complete"
        case .retryOnFreshConnection: return "retry"
        case .none: return "none"
        case .fail(let reason): return "fail \(reason)"
        }
    }

    func describe(_ disposition: RequestLifecycle.BodyDisposition) -> String {
        switch disposition {
        case .deliver: return "deliver"
        case .keep: return "keep"
        case .drop: return "drop"
        case .abortAndFollow: return "abortAndFollow"
        case .fail(let reason): return "fail \(reason)"
        }
    }

    /// Runs the request up to a sent request on a connection.
    func sent(_ lifecycle: inout RequestLifecycle) {
        #expect(describe(lifecycle.start()) == "startHop")
        #expect(lifecycle.phase == .waitingForConnection)
        lifecycle.exchangeStarted()
        #expect(lifecycle.phase == .sendingRequest)
        lifecycle.requestSent()
        #expect(lifecycle.phase == .awaitingResponse)
    }

    @Test("a plain exchange: start, connect, send, head, body, complete; the phase follows each step")
    func plain() {
        var life = lifecycle()
        #expect(describe(life.start()) == "startHop")
        life.resolving()
        #expect(life.phase == .resolving)
        life.connecting()
        #expect(life.phase == .connecting)
        life.handshaking()
        #expect(life.phase == .tlsHandshake)
        life.exchangeStarted()
        life.requestSent()
        #expect(describe(life.headReceived(status: 200, location: nil)) == "deliverResponse")
        #expect(life.phase == .receivingBody && life.deliversBody)
        #expect(describe(life.bodyReceived(1 << 20)) == "deliver")
        #expect(describe(life.exchangeCompleted()) == "complete")
        life.finished()
        #expect(life.isFinished && life.redirects.isEmpty)
    }

    @Test("without a handler a redirect's body is dropped and the redirect followed when it ends; the chain stops at the limit")
    func redirectChain() {
        var life = lifecycle(maxRedirects: 2)
        sent(&life)
        #expect(describe(life.headReceived(status: 302, location: "/b")) == "redirect http://a.test/b")
        #expect(!life.deliversBody)
        #expect(describe(life.bodyReceived(100)) == "drop")
        #expect(describe(life.exchangeCompleted()) == "follow")
        #expect(life.spec.url.absoluteString == "http://a.test/b" && life.phase == .waitingForConnection)
        life.exchangeStarted()
        life.requestSent()
        #expect(describe(life.headReceived(status: 307, location: "/c")) == "redirect http://a.test/c")
        #expect(describe(life.exchangeCompleted()) == "follow")
        life.exchangeStarted()
        life.requestSent()
        #expect(describe(life.headReceived(status: 301, location: "/d")) == "fail tooManyRedirects(limit: 2)")
        #expect(life.redirects == ["http://a.test/b", "http://a.test/c"])
    }

    @Test("a redirect body longer than 64 KiB is not drained: the connection closes and the redirect is followed")
    func drainLimit() {
        var life = lifecycle()
        sent(&life)
        _ = life.headReceived(status: 303, location: "http://b.test/")
        #expect(describe(life.bodyReceived(RequestLifecycle.redirectBodyLimit)) == "drop")
        #expect(describe(life.bodyReceived(1)) == "abortAndFollow")
        #expect(describe(life.drainAborted()) == "follow")
        #expect(life.spec.url.absoluteString == "http://b.test/")
        #expect(describe(life.drainAborted()) == "none")
    }

    @Test("a handler that declines before the body ends: the kept bytes and the rest are delivered, then complete")
    func handlerDeclinesEarly() {
        var life = lifecycle(handler: true)
        sent(&life)
        #expect(describe(life.headReceived(status: 302, location: "/b")) == "ask http://a.test/b")
        #expect(describe(life.bodyReceived(10)) == "keep")
        #expect(describe(life.redirectDecided(nil, connectionOpen: true)) == "deliverKeptResponse(complete: false)")
        #expect(describe(life.bodyReceived(10)) == "deliver")
        #expect(describe(life.exchangeCompleted()) == "complete")
        #expect(life.redirects.isEmpty)
    }

    @Test("a handler that answers after the body ended: decline completes at once, follow starts the next hop at once")
    func handlerAnswersLate() {
        var declined = lifecycle(handler: true)
        sent(&declined)
        _ = declined.headReceived(status: 302, location: "/b")
        #expect(describe(declined.bodyReceived(5)) == "keep")
        #expect(describe(declined.exchangeCompleted()) == "none")
        #expect(describe(declined.redirectDecided(nil, connectionOpen: false)) == "deliverKeptResponse(complete: true)")

        var followed = lifecycle(handler: true)
        sent(&followed)
        _ = followed.headReceived(status: 302, location: "/b")
        #expect(describe(followed.exchangeCompleted()) == "none")
        let rewritten = RedirectRewrite(url: AbsoluteURL("http://a.test/rewritten"), method: nil, headers: [:], body: nil)
        #expect(describe(followed.redirectDecided(rewritten, connectionOpen: false)) == "redirect http://a.test/rewritten now")
        #expect(followed.spec.url.absoluteString == "http://a.test/rewritten" && followed.redirects == ["http://a.test/rewritten"])
        // A second answer (a handler calling its completion twice) changes nothing.
        #expect(describe(followed.redirectDecided(nil, connectionOpen: false)) == "none")
    }

    @Test("a handler that follows while the body still arrives: the rest is dropped, the hop follows when it ends")
    func handlerFollowsEarly() {
        var life = lifecycle(handler: true)
        sent(&life)
        _ = life.headReceived(status: 308, location: "/b")
        #expect(describe(life.bodyReceived(1000)) == "keep")
        let next = RedirectRewrite(url: AbsoluteURL("http://a.test/b"), method: nil, headers: [:], body: nil)
        #expect(describe(life.redirectDecided(next, connectionOpen: true)) == "redirect http://a.test/b")
        // The bytes kept count towards the drain limit.
        #expect(describe(life.bodyReceived(RequestLifecycle.redirectBodyLimit - 1000)) == "drop")
        #expect(describe(life.bodyReceived(1)) == "abortAndFollow")
        #expect(describe(life.drainAborted()) == "follow")
    }

    @Test("while a handler decides, more than 64 KiB of redirect body is a failure, not unbounded memory")
    func handlerBodyLimit() {
        var life = lifecycle(handler: true)
        sent(&life)
        _ = life.headReceived(status: 302, location: "/b")
        #expect(describe(life.bodyReceived(RequestLifecycle.redirectBodyLimit)) == "keep")
        #expect(describe(life.bodyReceived(1)) == "fail redirectBodyTooLarge(limit: 65536)")
    }

    @Test("a refused redirect (https to http, a bad Location) fails; maxRedirects 0 delivers the redirect itself")
    func refusedRedirects() {
        var secure = lifecycle("https://a.test/")
        sent(&secure)
        #expect(describe(secure.headReceived(status: 302, location: "http://a.test/")).hasPrefix("fail insecureRedirect"))
        var bad = lifecycle()
        sent(&bad)
        #expect(describe(bad.headReceived(status: 302, location: "gopher://x/")).hasPrefix("fail invalidRedirect"))
        var none = lifecycle(maxRedirects: 0)
        sent(&none)
        #expect(describe(none.headReceived(status: 302, location: "/b")) == "deliverResponse")
    }

    @Test("a reused connection that fails before any response byte is retried once on a fresh one, for replayable idempotent requests only")
    func staleRetry() {
        let reason = TransferError.Reason.connectionError(code: 104, message: "reset")
        var life = lifecycle()
        sent(&life)
        #expect(
            describe(life.exchangeFailed(receivedResponseBytes: false, connectionWasReused: true, bodyReplayable: true, reason: reason))
                == "retry")
        #expect(life.needsFreshConnection && life.retriedOnStaleConnection && life.phase == .waitingForConnection)
        life.exchangeStarted()
        // Once only.
        #expect(
            describe(life.exchangeFailed(receivedResponseBytes: false, connectionWasReused: true, bodyReplayable: true, reason: reason))
                .hasPrefix("fail connectionError"))
        // Not when bytes arrived, the connection was new, the method is not idempotent or the body is gone.
        for (received, reused, replayable, method) in [
            (true, true, true, HTTPMethod.get), (false, false, true, .get), (false, true, true, .post), (false, true, false, .put),
        ] {
            var other = lifecycle(method: method)
            sent(&other)
            #expect(
                describe(
                    other.exchangeFailed(
                        receivedResponseBytes: received, connectionWasReused: reused, bodyReplayable: replayable, reason: reason)
                ).hasPrefix("fail"), "\(received) \(reused) \(replayable) \(method)")
        }
    }

    @Test("a redirect after the stale retry may use kept-alive connections again")
    func freshConnectionEndsWithTheHop() {
        let reason = TransferError.Reason.connectionError(code: 32, message: "broken pipe")
        var life = lifecycle()
        sent(&life)
        _ = life.exchangeFailed(receivedResponseBytes: false, connectionWasReused: true, bodyReplayable: true, reason: reason)
        life.exchangeStarted()
        life.requestSent()
        _ = life.headReceived(status: 302, location: "http://b.test/")
        #expect(describe(life.exchangeCompleted()) == "follow")
        #expect(!life.needsFreshConnection)
    }
}
