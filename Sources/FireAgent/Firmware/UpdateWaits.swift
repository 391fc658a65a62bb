import TinyFireCore

/// A timer the firmware flow waits on. The flow arms it (`UpdateEffect.arm`) and decides what
/// its firing means (`UpdateEvent.timerFired`); the host only keeps the instant and fires it.
package enum UpdateTimer: String, Sendable, Hashable, CaseIterable {
    /// A failed download attempt's backoff: the download goes on from its partial file then.
    case downloadRetry
    /// The pause before the next health-check attempt.
    case healthCheck
    /// A step held by a gate (the link, the staging space, the install window, the inhibit
    /// lock): the step is asked for again then.
    case gate
    /// The confirmation deadline: the confirmation time is accounted again then.
    case confirmDeadline

    /// The timers that fire at once when the route to the server comes back: a download's
    /// retry and a held step (a download that waited for the link).
    package static let firedByServerBack: Set<UpdateTimer> = [.downloadRetry, .gate]
    /// The timers that fire at once when the route changes (another link may be allowed).
    package static let firedByRouteChange: Set<UpdateTimer> = [.gate]
}

/// What holds a step: each kind is asked again on its own period.
package enum GateKind: Sendable, Equatable {
    /// The route to the image's host goes over a link the config avoids
    /// (`network.avoidInterfaces`): asked again every `WaitPolicy.linkRecheck`.
    case link
    /// Too little space for the image: asked again on the retry backoff (`firmware.retry`),
    /// growing while it lasts, without counting toward `firmware.downloadAttempts`.
    case space
    /// The install window is closed or the application holds its inhibit lock: asked again
    /// every `WaitPolicy.gateRecheck`.
    case install
}

/// How long each wait lasts (`firmware.retry`, `firmware.healthCheck.interval`).
package struct WaitPolicy: Sendable, Equatable {
    /// The first download retry's delay, before jitter.
    package var retryInitial: Duration
    /// The longest download retry's delay.
    package var retryMaximum: Duration
    /// The pause between two health-check attempts.
    package var healthInterval: Duration
    /// How often a step held by the link is asked again.
    package var linkRecheck: Duration
    /// How often a step held by the install window or the inhibit lock is asked again.
    package var gateRecheck: Duration

    /// A policy; the defaults are the config's.
    package init(
        retryInitial: Duration = .seconds(30), retryMaximum: Duration = .seconds(3600), healthInterval: Duration = .seconds(30),
        linkRecheck: Duration = .seconds(5), gateRecheck: Duration = .seconds(15)
    ) {
        self.retryInitial = retryInitial
        self.retryMaximum = retryMaximum
        self.healthInterval = healthInterval
        self.linkRecheck = linkRecheck
        self.gateRecheck = gateRecheck
    }

    /// The backoff before retry `failure` (1 for the first), with `random` in 0...1 for jitter.
    package func retryDelay(afterFailure failure: Int, random: Double) -> Duration {
        QueueBackoff(initial: retryInitial, maximum: retryMaximum).delay(afterFailure: max(1, failure), random: random)
    }
}

/// A step held by a gate, and why.
package struct HeldStep: Sendable, Equatable {
    /// The step asked for again when the gate's timer fires.
    package var step: UpdateEffect
    /// What it waits for (the update's note says `waiting: <reason>`).
    package var reason: String
}

/// The waits the firmware flow is in: which timers are armed, the step a gate holds. In memory
/// only: after a restart the flow resumes its phase and asks its gates again. Memory: four
/// timers and one held step.
package struct UpdateWaits: Sendable, Equatable {
    /// The timers armed and not yet fired.
    package internal(set) var armed: Set<UpdateTimer> = []
    /// The step a gate holds, nil when none.
    package internal(set) var held: HeldStep?
    /// Checks in a row that found too little space: the space wait's backoff.
    package internal(set) var spaceWaits = 0

    /// No waits.
    package init() {}
}

extension UpdateFlow {
    /// Arms `timer`: the effect that asks the host to fire it after `delay`.
    mutating func arm(_ timer: UpdateTimer, after delay: Duration) -> UpdateEffect {
        waits.armed.insert(timer)
        return .arm(timer, after: delay)
    }

    /// Forgets every wait: a new update starts, nothing the one before waited for stands.
    mutating func forgetWaits() { waits = UpdateWaits() }

    /// Forgets `timers` (the host drops what is no longer armed).
    mutating func disarm(_ timers: Set<UpdateTimer>) {
        waits.armed.subtract(timers)
        if timers.contains(.gate) { waits.held = nil }
    }

    /// The waits that outlive a move into `phase`: a download's retry only while it downloads,
    /// the health check's and the deadline's only while confirming, and a held step only in
    /// the phase that asked for it.
    mutating func settleWaits(entering phase: UpdatePhase, from previous: UpdatePhase) {
        if phase != .downloading { disarm([.downloadRetry]) }
        if phase != .confirming { disarm([.healthCheck, .confirmDeadline]) }
        if phase != previous { disarm([.gate]) }
        if phase.isTerminal { waits.spaceWaits = 0 }
    }

    /// A gate holds `step`: armed to be asked again on `kind`'s period; the update's note
    /// changes (reported) only when the reason does.
    mutating func hold(_ step: UpdateEffect, reason: String, kind: GateKind) -> [UpdateEffect] {
        guard let update = state.update, !update.phase.isTerminal else { return [] }
        let delay: Duration
        switch kind {
        case .link: delay = waitPolicy.linkRecheck
        case .install: delay = waitPolicy.gateRecheck
        case .space:
            waits.spaceWaits += 1
            delay = waitPolicy.retryDelay(afterFailure: waits.spaceWaits, random: random())
        }
        waits.held = HeldStep(step: step, reason: reason)
        return [arm(.gate, after: delay)] + note("waiting: \(reason)")
    }

    /// The gate a step asked is open: a hold ends (its note cleared, reported); the space
    /// wait's backoff starts over.
    mutating func release() -> [UpdateEffect] {
        waits.spaceWaits = 0
        guard waits.held != nil else { return [] }
        disarm([.gate])
        return note(nil)
    }

    /// `timer` fired: what it was armed for, if that still stands.
    mutating func fired(_ timer: UpdateTimer) -> [UpdateEffect] {
        guard waits.armed.remove(timer) != nil else { return [] }
        switch timer {
        case .downloadRetry: return phase == .downloading ? [.download(fromZero: false)] : []
        case .healthCheck: return awaitsHealthCheck ? [.healthCheck] : []
        case .confirmDeadline: return phase == .confirming ? [.accountConfirmation] : []
        case .gate: return waits.held.map { [$0.step] } ?? []
        }
    }

    /// The update's note while it waits (`waiting: …`), or its end (nil): reported once per
    /// change. A wait's end clears only a wait's note.
    private mutating func note(_ note: String?) -> [UpdateEffect] {
        guard var update = state.update, !update.phase.isTerminal, update.reason != note else { return [] }
        if note == nil, update.reason?.hasPrefix("waiting") != true { return [] }
        update.reason = note
        state.update = update
        return reporting() + [.persist]
    }
}
