#define _GNU_SOURCE
#include "tinyfire_netlink.h"
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_arp.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <netinet/in.h>
#include <sched.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

const uint16_t tinyfire_rtm_newlink = RTM_NEWLINK, tinyfire_rtm_dellink = RTM_DELLINK, tinyfire_rtm_getlink = RTM_GETLINK;
const uint16_t tinyfire_rtm_newaddr = RTM_NEWADDR, tinyfire_rtm_deladdr = RTM_DELADDR, tinyfire_rtm_getaddr = RTM_GETADDR;
const uint16_t tinyfire_rtm_newroute = RTM_NEWROUTE, tinyfire_rtm_delroute = RTM_DELROUTE, tinyfire_rtm_getroute = RTM_GETROUTE;
const uint16_t tinyfire_nlmsg_done = NLMSG_DONE, tinyfire_nlmsg_error = NLMSG_ERROR, tinyfire_nlm_f_dump_intr = NLM_F_DUMP_INTR;
const uint32_t tinyfire_iff_up = IFF_UP, tinyfire_iff_running = IFF_RUNNING, tinyfire_iff_lower_up = IFF_LOWER_UP,
               tinyfire_iff_loopback = IFF_LOOPBACK;
const uint32_t tinyfire_ifa_f_tentative = IFA_F_TENTATIVE, tinyfire_ifa_f_dadfailed = IFA_F_DADFAILED;
const uint32_t tinyfire_rtnh_f_linkdown = RTNH_F_LINKDOWN, tinyfire_rtnh_f_dead = RTNH_F_DEAD;
const uint8_t tinyfire_rtn_unicast = RTN_UNICAST, tinyfire_rtn_local = RTN_LOCAL, tinyfire_rt_scope_universe = RT_SCOPE_UNIVERSE,
              tinyfire_rt_scope_link = RT_SCOPE_LINK, tinyfire_rt_scope_host = RT_SCOPE_HOST;
const uint32_t tinyfire_rt_table_main = RT_TABLE_MAIN;

uint32_t tinyfire_nl_groups_reachability(void) {
    return RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR | RTMGRP_IPV4_ROUTE | RTMGRP_IPV6_ROUTE;
}

static int open_here(uint32_t groups, int nonblocking, int timeout_ms, int receive_buffer) {
    int type = SOCK_RAW | SOCK_CLOEXEC | (nonblocking ? SOCK_NONBLOCK : 0);
    int fd = socket(AF_NETLINK, type, NETLINK_ROUTE);
    if (fd < 0) return -errno;
    if (receive_buffer > 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof receive_buffer);
    if (!nonblocking && timeout_ms > 0) {
        struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    }
    int one = 1;
    /* Errors carry only the header of the failed request, not the whole request. */
    setsockopt(fd, SOL_NETLINK, NETLINK_CAP_ACK, &one, sizeof one);
    struct sockaddr_nl local = {.nl_family = AF_NETLINK, .nl_groups = groups};
    if (bind(fd, (struct sockaddr *)&local, sizeof local) < 0) {
        int saved = errno;
        close(fd);
        return -saved;
    }
    return fd;
}

int tinyfire_nl_open(const char *netns_path, uint32_t groups, int nonblocking, int timeout_ms, int receive_buffer) {
    if (netns_path == NULL) return open_here(groups, nonblocking, timeout_ms, receive_buffer);
    int own = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    if (own < 0) return -errno;
    int target = open(netns_path, O_RDONLY | O_CLOEXEC);
    if (target < 0) {
        int saved = errno;
        close(own);
        return -saved;
    }
    int result;
    if (setns(target, CLONE_NEWNET) < 0) {
        result = -errno;
    } else {
        result = open_here(groups, nonblocking, timeout_ms, receive_buffer);
        if (setns(own, CLONE_NEWNET) < 0) {
            /* The thread could not return: leave no socket behind and say so. */
            if (result >= 0) close(result);
            result = -errno;
        }
    }
    close(target);
    close(own);
    return result;
}

static int send_request(int fd, struct nlmsghdr *header) {
    struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
    for (;;) {
        ssize_t n = sendto(fd, header, header->nlmsg_len, 0, (struct sockaddr *)&kernel, sizeof kernel);
        if (n >= 0) return 0;
        if (errno != EINTR) return -errno;
    }
}

int tinyfire_nl_request_dump(int fd, uint16_t type, uint8_t family, uint32_t seq) {
    struct {
        struct nlmsghdr header;
        union {
            struct ifinfomsg link;
            struct ifaddrmsg addr;
            struct rtmsg route;
        } body;
    } request;
    memset(&request, 0, sizeof request);
    size_t body_length;
    switch (type) {
    case RTM_GETLINK: body_length = sizeof(struct ifinfomsg); request.body.link.ifi_family = family; break;
    case RTM_GETADDR: body_length = sizeof(struct ifaddrmsg); request.body.addr.ifa_family = family; break;
    case RTM_GETROUTE: body_length = sizeof(struct rtmsg); request.body.route.rtm_family = family; break;
    default: return -EINVAL;
    }
    request.header.nlmsg_len = NLMSG_LENGTH(body_length);
    request.header.nlmsg_type = type;
    request.header.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
    request.header.nlmsg_seq = seq;
    return send_request(fd, &request.header);
}

int tinyfire_nl_request_route(int fd, const struct sockaddr *address, uint32_t seq) {
    struct {
        struct nlmsghdr header;
        struct rtmsg route;
        char attributes[64];
    } request;
    memset(&request, 0, sizeof request);
    const void *bytes;
    size_t length;
    if (address->sa_family == AF_INET) {
        bytes = &((const struct sockaddr_in *)address)->sin_addr;
        length = 4;
    } else if (address->sa_family == AF_INET6) {
        bytes = &((const struct sockaddr_in6 *)address)->sin6_addr;
        length = 16;
    } else {
        return -EAFNOSUPPORT;
    }
    request.header.nlmsg_len = NLMSG_LENGTH(sizeof(struct rtmsg));
    request.header.nlmsg_type = RTM_GETROUTE;
    request.header.nlmsg_flags = NLM_F_REQUEST;
    request.header.nlmsg_seq = seq;
    request.route.rtm_family = address->sa_family;
    request.route.rtm_dst_len = (unsigned char)(length * 8);
    struct rtattr *attribute = (struct rtattr *)((char *)&request + NLMSG_ALIGN(request.header.nlmsg_len));
    attribute->rta_type = RTA_DST;
    attribute->rta_len = RTA_LENGTH(length);
    memcpy(RTA_DATA(attribute), bytes, length);
    request.header.nlmsg_len = NLMSG_ALIGN(request.header.nlmsg_len) + RTA_ALIGN(attribute->rta_len);
    return send_request(fd, &request.header);
}

long tinyfire_nl_receive(int fd, uint8_t *buf, size_t capacity) {
    struct sockaddr_nl from;
    struct iovec vector = {.iov_base = buf, .iov_len = capacity};
    struct msghdr message = {.msg_name = &from, .msg_namelen = sizeof from, .msg_iov = &vector, .msg_iovlen = 1};
    for (;;) {
        ssize_t n = recvmsg(fd, &message, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        if (message.msg_flags & MSG_TRUNC) return -EMSGSIZE;
        /* Only the kernel speaks rtnetlink to us; anything else is dropped. */
        if (from.nl_pid != 0) continue;
        return (long)n;
    }
}

static void copy_name(char *out, const struct rtattr *attribute) {
    size_t length = RTA_PAYLOAD(attribute);
    if (length > 15) length = 15;
    memcpy(out, RTA_DATA(attribute), length);
    out[length] = 0;
}

static void decode_link(const struct nlmsghdr *header, tinyfire_nl_item *item) {
    const struct ifinfomsg *link = NLMSG_DATA(header);
    item->ifindex = link->ifi_index;
    item->ifflags = link->ifi_flags;
    item->arphrd = link->ifi_type;
    int remaining = (int)IFLA_PAYLOAD(header);
    for (const struct rtattr *a = IFLA_RTA(link); RTA_OK(a, remaining); a = RTA_NEXT(a, remaining)) {
        switch (a->rta_type) {
        case IFLA_IFNAME: copy_name(item->ifname, a); break;
        case IFLA_OPERSTATE:
            if (RTA_PAYLOAD(a) >= 1) item->operstate = *(const uint8_t *)RTA_DATA(a);
            break;
        case IFLA_LINKINFO: {
            int nested = (int)RTA_PAYLOAD(a);
            for (const struct rtattr *n = RTA_DATA(a); RTA_OK(n, nested); n = RTA_NEXT(n, nested)) {
                if (n->rta_type == IFLA_INFO_KIND) copy_name(item->kind, n);
            }
            break;
        }
        }
    }
}

static void decode_addr(const struct nlmsghdr *header, tinyfire_nl_item *item) {
    const struct ifaddrmsg *addr = NLMSG_DATA(header);
    item->family = addr->ifa_family;
    item->prefixlen = addr->ifa_prefixlen;
    item->scope = addr->ifa_scope;
    item->addr_flags = addr->ifa_flags;
    item->ifindex = (int32_t)addr->ifa_index;
    int remaining = (int)IFA_PAYLOAD(header);
    for (const struct rtattr *a = IFA_RTA(addr); RTA_OK(a, remaining); a = RTA_NEXT(a, remaining)) {
        if (a->rta_type == IFA_FLAGS && RTA_PAYLOAD(a) >= 4) item->addr_flags = *(const uint32_t *)RTA_DATA(a);
    }
}

static void decode_route(const struct nlmsghdr *header, tinyfire_nl_item *item) {
    const struct rtmsg *route = NLMSG_DATA(header);
    item->family = route->rtm_family;
    item->prefixlen = route->rtm_dst_len;
    item->scope = route->rtm_scope;
    item->table = route->rtm_table;
    item->route_type = route->rtm_type;
    item->route_flags = route->rtm_flags;
    int remaining = (int)RTM_PAYLOAD(header);
    for (const struct rtattr *a = RTM_RTA(route); RTA_OK(a, remaining); a = RTA_NEXT(a, remaining)) {
        switch (a->rta_type) {
        case RTA_TABLE:
            if (RTA_PAYLOAD(a) >= 4) item->table = *(const uint32_t *)RTA_DATA(a);
            break;
        case RTA_OIF:
            if (RTA_PAYLOAD(a) >= 4) item->oif = *(const int32_t *)RTA_DATA(a);
            break;
        case RTA_PRIORITY:
            if (RTA_PAYLOAD(a) >= 4) item->priority = *(const uint32_t *)RTA_DATA(a);
            break;
        case RTA_GATEWAY: item->has_gateway = 1; break;
        case RTA_MULTIPATH: {
            int left = (int)RTA_PAYLOAD(a);
            const struct rtnexthop *hop = RTA_DATA(a);
            while (left >= (int)sizeof(*hop) && hop->rtnh_len >= sizeof(*hop) && hop->rtnh_len <= left) {
                if (item->nexthop_count < 4) {
                    item->nexthop_oifs[item->nexthop_count] = hop->rtnh_ifindex;
                    if (hop->rtnh_flags & (RTNH_F_LINKDOWN | RTNH_F_DEAD)) item->nexthop_oifs[item->nexthop_count] = 0;
                }
                item->nexthop_count++;
                left -= RTNH_ALIGN(hop->rtnh_len);
                hop = RTNH_NEXT(hop);
            }
            break;
        }
        }
    }
    if (item->oif == 0 && item->nexthop_count > 0) item->oif = item->nexthop_oifs[0];
}

int tinyfire_nl_next(const uint8_t *buf, size_t len, size_t *offset, tinyfire_nl_item *item) {
    memset(item, 0, sizeof *item);
    if (*offset >= len) return 0;
    size_t left = len - *offset;
    const struct nlmsghdr *header = (const struct nlmsghdr *)(buf + *offset);
    if (left < sizeof(struct nlmsghdr) || header->nlmsg_len < sizeof(struct nlmsghdr) || header->nlmsg_len > left) return -1;
    *offset += NLMSG_ALIGN(header->nlmsg_len) < left ? NLMSG_ALIGN(header->nlmsg_len) : left;
    item->msg_type = header->nlmsg_type;
    item->msg_flags = header->nlmsg_flags;
    item->seq = header->nlmsg_seq;
    size_t payload = header->nlmsg_len - NLMSG_HDRLEN;
    switch (header->nlmsg_type) {
    case NLMSG_ERROR:
        if (payload < sizeof(int)) return -1;
        item->error = ((const struct nlmsgerr *)NLMSG_DATA(header))->error;
        break;
    case RTM_NEWLINK:
    case RTM_DELLINK:
        if (payload < sizeof(struct ifinfomsg)) return -1;
        decode_link(header, item);
        break;
    case RTM_NEWADDR:
    case RTM_DELADDR:
        if (payload < sizeof(struct ifaddrmsg)) return -1;
        decode_addr(header, item);
        break;
    case RTM_NEWROUTE:
    case RTM_DELROUTE:
        if (payload < sizeof(struct rtmsg)) return -1;
        decode_route(header, item);
        break;
    default: break;
    }
    return 1;
}
