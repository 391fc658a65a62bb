#ifndef TINYFIRE_NETLINK_H
#define TINYFIRE_NETLINK_H
/* rtnetlink (NETLINK_ROUTE) for reachability: open a socket (optionally in another network
 * namespace), ask the kernel for its links, addresses and routes, look up the route to one
 * address, and decode the answers into a flat struct. No state, no allocation. */
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* What tinyfire_nl_next decoded. Fields that do not apply to the message kind are zero. */
typedef struct tinyfire_nl_item {
    uint16_t msg_type;      /* RTM_NEWLINK, RTM_DELADDR, …, NLMSG_DONE, NLMSG_ERROR */
    uint16_t msg_flags;     /* NLM_F_* (NLM_F_DUMP_INTR says a dump was interrupted) */
    uint32_t seq;
    int32_t error;          /* NLMSG_ERROR: the negative errno (0 is an acknowledgement) */
    /* links (RTM_*LINK) */
    int32_t ifindex;        /* also the address's interface for RTM_*ADDR */
    uint32_t ifflags;       /* IFF_* */
    uint16_t arphrd;        /* ARPHRD_* */
    uint8_t operstate;      /* IF_OPER_* */
    char ifname[16];
    char kind[16];          /* IFLA_INFO_KIND: "veth", "bridge", "vlan", … or empty */
    /* addresses (RTM_*ADDR) and routes (RTM_*ROUTE) */
    uint8_t family;         /* AF_INET, AF_INET6 */
    uint8_t prefixlen;      /* address prefix, or the route's destination length */
    uint8_t scope;          /* RT_SCOPE_* */
    uint32_t addr_flags;    /* IFA_F_* (tentative, dadfailed, deprecated) */
    /* routes */
    uint32_t table;
    uint8_t route_type;     /* RTN_UNICAST, RTN_UNREACHABLE, … */
    uint32_t route_flags;   /* RTM_F_* and RTNH_F_* of the route */
    uint32_t priority;      /* metric */
    int32_t oif;            /* output interface, or the first next hop's */
    int32_t nexthop_oifs[4];/* multipath next hops (first four) */
    uint8_t nexthop_count;
    uint8_t has_gateway;
} tinyfire_nl_item;

/* Multicast groups for links, IPv4/IPv6 addresses and IPv4/IPv6 routes. */
uint32_t tinyfire_nl_groups_reachability(void);

/* Opens a NETLINK_ROUTE socket subscribed to `groups` (0: none), close-on-exec, non-blocking
 * when `nonblocking`, with a receive timeout of `timeout_ms` when blocking. When `netns_path`
 * is not NULL (e.g. /run/netns/NAME) the socket is created inside that network namespace; the
 * calling thread returns to its own namespace before this returns. Returns the descriptor, or
 * -errno. */
int tinyfire_nl_open(const char *netns_path, uint32_t groups, int nonblocking, int timeout_ms, int receive_buffer);

/* Sends a dump request (RTM_GETLINK, RTM_GETADDR or RTM_GETROUTE) for `family` (AF_UNSPEC for
 * all). Returns 0 or -errno. */
int tinyfire_nl_request_dump(int fd, uint16_t type, uint8_t family, uint32_t seq);

/* Asks the kernel which route it would use to reach `address` (an AF_INET or AF_INET6
 * sockaddr), as `ip route get` does. Returns 0 or -errno. */
int tinyfire_nl_request_route(int fd, const struct sockaddr *address, uint32_t seq);

/* Receives one datagram into buf. Returns its length, or -errno (-EAGAIN when nothing is
 * waiting on a non-blocking socket, -ENOBUFS after the kernel dropped messages). */
long tinyfire_nl_receive(int fd, uint8_t *buf, size_t capacity);

/* Decodes the message at *offset in buf[0..<len) into item and advances *offset.
 * Returns 1 for a message, 0 at the end of the buffer, -1 for a malformed message. */
int tinyfire_nl_next(const uint8_t *buf, size_t len, size_t *offset, tinyfire_nl_item *item);

/* Message types, flags and constants as plain integers. */
extern const uint16_t tinyfire_rtm_newlink, tinyfire_rtm_dellink, tinyfire_rtm_getlink;
extern const uint16_t tinyfire_rtm_newaddr, tinyfire_rtm_deladdr, tinyfire_rtm_getaddr;
extern const uint16_t tinyfire_rtm_newroute, tinyfire_rtm_delroute, tinyfire_rtm_getroute;
extern const uint16_t tinyfire_nlmsg_done, tinyfire_nlmsg_error, tinyfire_nlm_f_dump_intr;
extern const uint32_t tinyfire_iff_up, tinyfire_iff_running, tinyfire_iff_lower_up, tinyfire_iff_loopback;
extern const uint32_t tinyfire_ifa_f_tentative, tinyfire_ifa_f_dadfailed;
extern const uint32_t tinyfire_rtnh_f_linkdown, tinyfire_rtnh_f_dead;
extern const uint8_t tinyfire_rtn_unicast, tinyfire_rtn_local, tinyfire_rt_scope_universe, tinyfire_rt_scope_link, tinyfire_rt_scope_host;
extern const uint32_t tinyfire_rt_table_main;
#endif
