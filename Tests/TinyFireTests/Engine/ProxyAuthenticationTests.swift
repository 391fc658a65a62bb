import Testing

@testable import TinyFireCore

/// The proxy-credentials decision, fed what the proxy answered: one rule for CONNECT and for
/// requests in absolute form (`Transfer` asks it in both places).
@Suite("Proxy credentials: sent first when configured so, else once in answer to a Basic challenge")
struct ProxyAuthenticationTests {
    let credentials = ProxyCredentials(user: "u", password: "p")

    @Test(
        "a 407 is answered (the request goes again with the credentials) only when it can be",
        arguments: [
            // challenge, credentials configured, body replayable, answered
            ("Basic realm=\"squid\"", true, true, true),
            ("basic realm=x", true, true, true),
            ("Digest realm=\"x\", nonce=\"1\"", true, true, false),
            ("", true, true, false),
            ("Basic realm=x", false, true, false),
            ("Basic realm=x", true, false, false),
        ])
    func firstChallenge(challenge: String, configured: Bool, replayable: Bool, answered: Bool) {
        var decision = ProxyAuthentication()
        decision.hop(
            through: Proxy(host: "proxy.test", credentials: configured ? credentials : nil, sendsCredentialsPreemptively: false))
        #expect(!decision.sendsCredentials)
        let goesAgain = decision.challenged(challenge, credentialsConfigured: configured, bodyReplayable: replayable)
        #expect(goesAgain == answered)
        #expect(decision.sendsCredentials == answered)
    }

    @Test("answered once: a second challenge (wrong credentials) ends the request, also on a later hop")
    func onlyOnce() {
        var decision = ProxyAuthentication()
        let proxy = Proxy(host: "proxy.test", credentials: credentials, sendsCredentialsPreemptively: false)
        decision.hop(through: proxy)
        let first = decision.challenged("Basic realm=x", credentialsConfigured: true, bodyReplayable: true)
        let second = decision.challenged("Basic realm=x", credentialsConfigured: true, bodyReplayable: true)
        #expect(first && !second)
        decision.hop(through: proxy)  // a redirect's hop: still sent, not answered again
        let third = decision.challenged("Basic realm=x", credentialsConfigured: true, bodyReplayable: true)
        #expect(decision.sendsCredentials && !third)
    }

    @Test("preemptive credentials go from the first hop; a challenge to them is not answered again")
    func preemptive() {
        var decision = ProxyAuthentication()
        decision.hop(through: Proxy(host: "proxy.test", credentials: credentials))  // curl's -U: the default
        let answered = decision.challenged("Basic realm=x", credentialsConfigured: true, bodyReplayable: true)
        #expect(decision.sendsCredentials && !answered)
    }
}
