import Testing

@testable import TinyFireCore

@Suite("Offline queue delivery window: what is sent, when, and the server's throttle (sans-I/O)")
struct DeliveryWindowTests {
    /// `seconds` after an arbitrary start.
    func at(_ seconds: Double) -> Instant { Instant(nanoseconds: 1_000_000_000_000 + UInt64((seconds * 1e9).rounded())) }

    @Test("a window record's 429 holds the whole queue: nothing starts until it runs out, then the head goes alone, then the window")
    func throttleFromTheWindow() {
        var window = DeliveryWindow<String>(limit: 4)
        #expect(window.headDue(1, now: at(0)) == .send)
        #expect(window.fill([2, 3, 4], sending: true) == [2, 3, 4])
        #expect(window.attemptsInFlight == 4)
        // Record 3 is throttled for 2 s while 1, 2 and 4 are in flight: they finish, nothing starts.
        #expect(window.windowEnded(3, .throttled(.seconds(2)), now: at(0.1)) == .none)
        #expect(window.throttle == .closed(until: at(2.1)))
        #expect(window.windowEnded(2, .judged("204"), now: at(0.2)) == .none)
        #expect(window.fill([2, 3, 4, 5], sending: true) == [], "room, but the server said wait")
        window.headEnded(1, removed: true, now: at(0.3))
        #expect(window.throttle == .closed(until: at(2.1)), "a success before the end does not lift it")
        // 2 was taken already: removed without a send, even now.
        #expect(window.headDue(2, now: at(0.3)) == .act("204"))
        // 3, the throttled record, is the head: held until the throttle runs out.
        #expect(window.headDue(3, now: at(0.3)) == .hold(until: at(2.1)))
        #expect(window.holdingHead)
        #expect(window.windowEnded(4, .judged("204"), now: at(0.6)) == .none)
        #expect(window.attemptsInFlight == 0)
        #expect(window.headDue(3, now: at(2.0)) == .hold(until: at(2.1)), "a timer firing early holds it again")
        // It ran out: the head goes alone.
        #expect(window.headDue(3, now: at(2.1)) == .send)
        #expect(!window.holdingHead && window.throttle == .probing)
        #expect(window.fill([4, 5, 6], sending: true) == [], "the head goes first, alone")
        window.headEnded(3, removed: true, now: at(2.4))
        #expect(window.throttle == .open)
        #expect(window.headDue(4, now: at(2.4)) == .act("204"))
        #expect(window.headDue(5, now: at(2.4)) == .send)
        #expect(window.fill([6, 7, 8, 9], sending: true) == [6, 7, 8])
    }

    @Test("the head's own throttle holds the window and the head whatever makes it due; a later throttle extends an earlier one")
    func throttleFromTheHead() {
        var window = DeliveryWindow<String>(limit: 3)
        #expect(window.headDue(1, now: at(0)) == .send)
        #expect(window.fill([2, 3], sending: true) == [2, 3])
        window.headEnded(1, removed: false, now: at(0.1))
        window.serverThrottled(until: at(3.1))  // the retry timer's delay: Retry-After 3
        window.serverThrottled(until: at(1.0))  // a shorter one does not shorten it
        #expect(window.throttle == .closed(until: at(3.1)))
        #expect(window.windowEnded(2, .throttled(.seconds(5)), now: at(0.2)) == .none)
        #expect(window.throttle == .closed(until: at(5.2)))
        // The network came back, delivery restarted: still held.
        #expect(window.headDue(1, now: at(3.2)) == .hold(until: at(5.2)))
        window.stopped()
        #expect(!window.holdingHead)
        #expect(window.windowEnded(3, .judged("204"), now: at(0.3)) == .none)
        #expect(window.headDue(1, now: at(5.2)) == .send)
        // The probe failed again (no throttle): the window stays shut until a head is removed.
        window.headEnded(1, removed: false, now: at(5.3))
        #expect(window.throttle == .probing)
        #expect(window.fill([2, 3], sending: true) == [])
        #expect(window.headDue(1, now: at(6)) == .send)
        window.headEnded(1, removed: true, now: at(6.1))
        // 2 was throttled in the window: sent again as the head, not by the window.
        #expect(window.fill([2, 3, 4], sending: true) == [4])
        #expect(window.headDue(2, now: at(6.1)) == .send)
    }

    @Test("a record is never in flight twice: a head the window is sending rides that attempt, whose outcome is the head's")
    func headRidesTheWindow() {
        var window = DeliveryWindow<String>(limit: 3)
        #expect(window.headDue(1, now: at(0)) == .send)
        #expect(window.headDue(1, now: at(0)) == .inFlight, "its own attempt is in flight")
        #expect(window.fill([2, 3], sending: true) == [2, 3])
        #expect(window.fill([2, 3], sending: true) == [])
        window.headEnded(1, removed: true, now: at(0.1))
        #expect(window.headDue(2, now: at(0.1)) == .inFlight)
        #expect(window.fill([3, 4], sending: true) == [4])
        #expect(window.fill([3, 4, 5], sending: false) == [], "only while the head is being sent")
        // The ride got an answer: acted on as the head.
        #expect(window.windowEnded(2, .judged("split"), now: at(0.2)) == .headJudged)
        #expect(window.headDue(2, now: at(0.2)) == .act("split"))
        // The next head rides too; its 429 is the head's failure, and holds the queue.
        #expect(window.headDue(3, now: at(0.2)) == .inFlight)
        #expect(window.windowEnded(3, .throttled(.seconds(1)), now: at(0.3)) == .headFailed)
        #expect(window.throttle == .closed(until: at(1.3)))
        #expect(window.windowEnded(4, .failed, now: at(0.4)) == .none)
        #expect(window.headDue(3, now: at(1.3)) == .send, "sent again as the head once the throttle ran out")
        window.headEnded(3, removed: true, now: at(1.4))
        #expect(window.headDue(4, now: at(1.4)) == .send, "a failed window record is sent again only as the head")
        #expect(window.fill([5, 6], sending: true) == [5, 6])
        window.headEnded(4, removed: true, now: at(1.5))
        // An unreadable record riding: the head's path deals with it at once.
        #expect(window.headDue(5, now: at(1.5)) == .inFlight)
        #expect(window.windowEnded(5, .unsent, now: at(1.5)) == .headDue)
        #expect(window.headDue(5, now: at(1.5)) == .send)
    }

    @Test("a final answer (a split, a dead letter) is kept for the head, acted on there or by a flush; dropped records are forgotten")
    func judgedRecordsWaitForTheirTurn() {
        var window = DeliveryWindow<String>(limit: 4)
        #expect(window.headDue(10, now: at(0)) == .send)
        #expect(window.fill([11, 12, 13], sending: true) == [11, 12, 13])
        #expect(window.windowEnded(11, .judged("413: halves"), now: at(0.1)) == .none)
        #expect(window.windowEnded(12, .judged("400: dead letter"), now: at(0.1)) == .none)
        #expect(window.fill([11, 12, 13], sending: true) == [], "answered records are not sent again")
        // Throttled meanwhile: acting on an answer sends nothing, so it is not held.
        #expect(window.windowEnded(13, .throttled(.seconds(9)), now: at(0.2)) == .none)
        window.headEnded(10, removed: true, now: at(0.3))
        #expect(window.headDue(11, now: at(0.3)) == .act("413: halves"))
        // Stopped and flushed: the flush acts on the answer too.
        window.stopped()
        #expect(window.takeJudgement(for: 12) == "400: dead letter")
        #expect(window.takeJudgement(for: 12) == nil)
        // Records dropped from under the window (overflow) are forgotten; attempts in flight
        // count until they end.
        #expect(window.headDue(13, now: at(9.2)) == .send)
        #expect(window.fill([14, 15, 16], sending: true) == [], "probing")
        window.headEnded(13, removed: true, now: at(9.3))
        #expect(window.fill([14, 15, 16], sending: true) == [14, 15, 16])
        #expect(window.windowEnded(14, .judged("204"), now: at(9.4)) == .none)
        #expect(window.headDue(16, now: at(9.4)) == .inFlight)
        #expect(window.attemptsInFlight == 2)
        #expect(window.takeJudgement(for: 16) == nil && window.headDue(17, now: at(9.5)) == .send)
        #expect(window.attemptsInFlight == 3, "15 and 16 still in flight, and 17")
    }

    @Test("with one record in flight (the default) the window sends nothing after the head")
    func strictOrder() {
        var window = DeliveryWindow<String>(limit: 1)
        #expect(window.headDue(1, now: at(0)) == .send)
        #expect(window.fill([2, 3], sending: true) == [])
        window.headEnded(1, removed: true, now: at(0.1))
        #expect(window.headDue(2, now: at(0.1)) == .send)
    }
}
