import FireAgentBase
import TinyFire

extension AgentDaemon.Options {
    /// The host build's options: requests say what the library's requests say.
    public static var host: AgentDaemon.Options {
        var options = AgentDaemon.Options()
        options.userAgent = HTTPHeader.defaultUserAgent.value
        return options
    }
}
