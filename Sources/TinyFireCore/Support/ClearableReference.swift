/// A reference that its owner clears when it goes away: what `weak` does in a full build, for
/// code that also builds in Embedded Swift (which has no `weak`). A callback that may outlive
/// its target (a timer, another thread's answer) captures the box, not the target, and finds
/// nil once the owner has let go. Read and cleared on one thread (the loop's); the box itself
/// may travel through `@Sendable` closures to get there.
package final class ClearableReference<Value: AnyObject>: @unchecked Sendable {
    /// The target, or nil once its owner cleared it.
    package var value: Value?

    package init(_ value: Value) {
        self.value = value
    }
}
