#ifndef TINYFIRE_SYSTEM_H
#define TINYFIRE_SYSTEM_H
/* Linux system calls that Swift's Glibc module does not export: epoll, eventfd, and a few
 * GNU extensions. Thin pass-throughs; no state, no allocation. */
#include <stddef.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <pthread.h>
#include <spawn.h>
#include "tinyfire_netlink.h"

/* Epoll flag values as plain integers (the C enum does not import cleanly). */
static const uint32_t tinyfire_epollin = EPOLLIN;
static const uint32_t tinyfire_epollout = EPOLLOUT;
static const uint32_t tinyfire_epollerr = EPOLLERR;
static const uint32_t tinyfire_epollhup = EPOLLHUP;
static const uint32_t tinyfire_epollrdhup = EPOLLRDHUP;

int tinyfire_epoll_create(void);
int tinyfire_epoll_ctl(int epfd, int op, int fd, uint32_t events, uint64_t data);
/* Waits; fills parallel arrays of event bits and data words. Returns count, or -1 with errno. */
int tinyfire_epoll_wait(int epfd, uint32_t *events, uint64_t *data, int capacity, int timeout_ms);
int tinyfire_eventfd(void);

static const int tinyfire_epoll_ctl_add = EPOLL_CTL_ADD;
static const int tinyfire_epoll_ctl_mod = EPOLL_CTL_MOD;
static const int tinyfire_epoll_ctl_del = EPOLL_CTL_DEL;

/* The calling thread as a number, for comparing threads (never 0). */
static inline uintptr_t tinyfire_thread_id(void) { return (uintptr_t)pthread_self(); }

/* Names the calling thread (at most 15 bytes are kept). */
void tinyfire_set_thread_name(const char *name);
/* mkostemp(template, O_CLOEXEC). */
int tinyfire_mkstemp_cloexec(char *template_path);
/* sendfile(out, in, offset, count): from *offset, which advances by the bytes sent; bytes,
 * or -1 with errno. The file's own position is not used. */
long tinyfire_sendfile(int out_fd, int in_fd, int64_t *offset, unsigned long count);
/* Blocks SIGPIPE in the calling thread: a write or sendfile to a socket or pipe whose peer is
 * gone then fails with EPIPE instead of killing the process (sendfile has no MSG_NOSIGNAL).
 * The signal stays pending on that thread only, harmlessly. */
void tinyfire_block_sigpipe(void);
/* Ignores SIGPIPE in the whole process (signal(SIGPIPE, SIG_IGN), which Embedded Swift cannot
 * spell): a CLI writing to a pipe whose reader left gets EPIPE instead of dying silently. */
void tinyfire_ignore_sigpipe(void);

/// Starts `body(argument)` on a new detached thread with a `stack_bytes` stack and every
/// asynchronous signal blocked (as libdispatch's worker threads: signals go to the program's
/// own threads). Returns 0, or pthread_create's error number (the body does not run then).
int tinyfire_spawn_detached(void *(*body)(void *), void *argument, size_t stack_bytes);
/* pipe2(fds, O_CLOEXEC): both ends close on exec, with no window in which a concurrent
 * spawn on another thread inherits them. */
int tinyfire_pipe_cloexec(int fds[2]);
/* The process's environment (`environ`): NAME=VALUE strings, then NULL. */
char *const *tinyfire_environment(void);
/* accept4(fd, NULL, NULL, SOCK_CLOEXEC). */
int tinyfire_accept_cloexec(int fd);
/* posix_spawn_file_actions_addchdir_np: the child starts in `path`. */
int tinyfire_spawn_addchdir(posix_spawn_file_actions_t *actions, const char *path);
/* posix_spawn_file_actions_addclosefrom_np: the child closes every descriptor from `from` up
 * (glibc 2.34 and later; elsewhere returns ENOSYS and adds nothing). */
int tinyfire_spawn_addclosefrom(posix_spawn_file_actions_t *actions, int from);
/* Turns signals into bytes on a pipe (the self-pipe pattern): installs, for each of
 * `signals`, a handler that writes the signal's number as one byte to a non-blocking pipe,
 * whichever thread the kernel picks to run it. Returns the pipe's read end (non-blocking,
 * close-on-exec), the same one on every call, or -errno. A byte that does not fit (64 KiB of
 * unread signals) is dropped; the signals still pending are then already on the pipe. */
int tinyfire_signal_pipe(const int *signals, int count);

/* renameat2(old_dirfd, old_name, new_dirfd, new_name, RENAME_NOREPLACE): moves a directory entry
 * (never following it) without replacing one already there. 0, or -1 with errno (EEXIST). */
int tinyfire_renameat_noreplace(int old_dirfd, const char *old_name, int new_dirfd, const char *new_name);

/* When this file was compiled (__DATE__ __TIME__, read as UTC; SOURCE_DATE_EPOCH replaces it in
 * reproducible builds), in seconds since 1970: the earliest time the running program can be
 * in. 0 when the compiler gave no date. */
long long tinyfire_build_time(void);

/* adjtimex(2) read-only: 1 when the kernel reports the clock unsynchronized (STA_UNSYNC, set at
 * boot and cleared by an NTP client such as systemd-timesyncd or chrony), 0 when synchronized,
 * -errno when it cannot be asked. */
int tinyfire_clock_unsynchronized(void);

/* Variadic libc calls with fixed arguments: Swift cannot call a C variadic function, and
 * Embedded Swift has no Glibc overlay that wraps them (TinyFireCore's LibC.swift uses these
 * there). Return what the call returns, with errno set by it. */
int tinyfire_open(const char *path, int flags, unsigned int mode);
int tinyfire_openat(int dirfd, const char *path, int flags, unsigned int mode);
int tinyfire_fcntl(int fd, int command, long argument);
int tinyfire_ioctl(int fd, unsigned long request, void *argument);
#endif
