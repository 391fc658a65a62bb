/// The kind of network an interface reaches (reachability's answer; the agent's
/// `firmware.avoidInterfaces` names them).
public enum NetworkInterfaceType: String, Sendable, CaseIterable {
    /// Wired Ethernet, and virtual Ethernet (veth, bridges, VLANs, bonds).
    case ethernet
    /// IEEE 802.11.
    case wifi
    /// Mobile data: WWAN modems (qmi_wwan, cdc_mbim, rmnet), PPP, USB tethering (rndis, ipheth).
    case cellular
    /// Anything else: tunnels, loopback, unknown link types.
    case other
}
