import Synchronization

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// Lets a redirect handler answer synchronously (the usual case) or later: `deliver` from the
/// completion and `close` after the handler returned race under one lock, so exactly one of
/// them sees the answer.
final class RedirectDecisionWindow: Sendable {
    private let state = Mutex<(open: Bool, decision: URLRequest??)>((true, nil))

    /// Stores the decision while the window is open; false once it closed.
    func deliver(_ decision: URLRequest?) -> Bool {
        state.withLock { state in
            guard state.open else { return false }
            state.decision = .some(decision)
            return true
        }
    }

    /// Closes the window; the decision if it came in time.
    func close() -> URLRequest?? {
        state.withLock { state in
            state.open = false
            return state.decision
        }
    }
}
