import TinyFireCore

/// Where the agent's own points go (the firmware updater's `fire_agent_update` reports):
/// straight into the telemetry queue of the agent running now, each as a record of its own,
/// durable once `record` returns. Never a file in the spool: nothing the agent creates lives in
/// a directory another user can write (docs/SECURITY.md).
///
/// The daemon attaches each `TelemetryAgent` it opens (a reload replaces it, and between the
/// two there is none); `fire-agent firmware update --once` attaches the one it opens for the
/// cycle. While none is attached, or the queue refuses, points wait here, at most
/// `maxWaiting` of them (the oldest dropped, counted and logged), and go to the next agent
/// attached.
///
/// Memory: at most `maxWaiting` points.
package final class AgentPoints: Sendable {
    /// Points held while no agent takes them.
    package static let maxWaiting = 64

    private struct State {
        var agent: TelemetryAgent?
        var waiting: [Point] = []
        var dropped = 0
    }
    private let state = Locked(State())
    private let logger: Logger

    /// - Parameter logger: where dropped points are reported.
    package init(logger: Logger) { self.logger = logger }

    /// Points hand over to `agent` from now on (nil: none takes them); the waiting ones go first.
    package func attach(_ agent: TelemetryAgent?) {
        state.withLock { state in
            state.agent = agent
            deliverWaiting(&state)
        }
    }

    /// Records `point`: queued durably when an agent is attached and its queue takes it,
    /// otherwise held (bounded) for the next one.
    package func record(_ point: Point) {
        state.withLock { state in
            deliverWaiting(&state)
            if state.waiting.isEmpty, let agent = state.agent, agent.record(point) { return }
            state.waiting.append(point)
            if state.waiting.count > Self.maxWaiting {
                state.waiting.removeFirst()
                state.dropped += 1
                logger.warning(
                    "agent point dropped: no telemetry queue takes it",
                    metadata: ["measurement": "\(point.measurement)", "dropped": "\(state.dropped)"])
            }
        }
    }

    /// Points waiting for an agent.
    package var waiting: Int { state.withLock { $0.waiting.count } }

    private func deliverWaiting(_ state: inout State) {
        guard let agent = state.agent else { return }
        while let first = state.waiting.first, agent.record(first) { state.waiting.removeFirst() }
    }
}
