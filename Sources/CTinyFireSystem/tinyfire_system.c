#define _GNU_SOURCE
#include "tinyfire_system.h"
#include <fcntl.h>
#include <spawn.h>
#include <sys/socket.h>
#include <unistd.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <errno.h>
#include <string.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/timex.h>
#include <time.h>

int tinyfire_epoll_create(void) { return epoll_create1(EPOLL_CLOEXEC); }

int tinyfire_epoll_ctl(int epfd, int op, int fd, uint32_t events, uint64_t data) {
    struct epoll_event event;
    event.events = events;
    event.data.u64 = data;
    return epoll_ctl(epfd, op, fd, &event);
}

int tinyfire_epoll_wait(int epfd, uint32_t *events, uint64_t *data, int capacity, int timeout_ms) {
    struct epoll_event buffer[64];
    if (capacity > 64) capacity = 64;
    int n = epoll_wait(epfd, buffer, capacity, timeout_ms);
    for (int i = 0; i < n; i++) {
        events[i] = buffer[i].events;
        data[i] = buffer[i].data.u64;
    }
    return n;
}

int tinyfire_eventfd(void) { return eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK); }

void tinyfire_set_thread_name(const char *name) {
    char short_name[16];
    int i = 0;
    for (; name[i] && i < 15; i++) short_name[i] = name[i];
    short_name[i] = 0;
    pthread_setname_np(pthread_self(), short_name);
}

int tinyfire_mkstemp_cloexec(char *template_path) { return mkostemp(template_path, O_CLOEXEC); }

#include <sys/sendfile.h>

long tinyfire_sendfile(int out_fd, int in_fd, int64_t *offset, unsigned long count) {
    off_t position = (off_t)*offset;
    ssize_t n = sendfile(out_fd, in_fd, &position, count);
    *offset = (int64_t)position;
    return (long)n;
}

int tinyfire_pipe_cloexec(int fds[2]) { return pipe2(fds, O_CLOEXEC); }

extern char **environ;
char *const *tinyfire_environment(void) { return environ; }

int tinyfire_accept_cloexec(int fd) { return accept4(fd, NULL, NULL, SOCK_CLOEXEC); }

int tinyfire_spawn_addchdir(posix_spawn_file_actions_t *actions, const char *path) {
    return posix_spawn_file_actions_addchdir_np(actions, path);
}

int tinyfire_spawn_addclosefrom(posix_spawn_file_actions_t *actions, int from) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
    return posix_spawn_file_actions_addclosefrom_np(actions, from);
#else
    (void)actions;
    (void)from;
    return ENOSYS;
#endif
}

void tinyfire_block_sigpipe(void) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
}

void tinyfire_ignore_sigpipe(void) { signal(SIGPIPE, SIG_IGN); }

int tinyfire_spawn_detached(void *(*body)(void *), void *argument, size_t stack_bytes) {
    pthread_attr_t attributes;
    int status = pthread_attr_init(&attributes);
    if (status != 0) return status;
    pthread_attr_setdetachstate(&attributes, PTHREAD_CREATE_DETACHED);
    if (stack_bytes > 0) pthread_attr_setstacksize(&attributes, stack_bytes);
    // The new thread inherits the creator's mask: block everything but the faults around the
    // creation, then restore the caller's.
    sigset_t all, saved;
    sigfillset(&all);
    sigdelset(&all, SIGSEGV);
    sigdelset(&all, SIGBUS);
    sigdelset(&all, SIGILL);
    sigdelset(&all, SIGFPE);
    pthread_sigmask(SIG_BLOCK, &all, &saved);
    pthread_t thread;
    status = pthread_create(&thread, &attributes, body, argument);
    pthread_sigmask(SIG_SETMASK, &saved, NULL);
    pthread_attr_destroy(&attributes);
    return status;
}

static int signal_pipe_read = -1, signal_pipe_write = -1;

static void tinyfire_signal_to_pipe(int signal_number) {
    int saved = errno;
    unsigned char byte = (unsigned char)signal_number;
    ssize_t ignored = write(signal_pipe_write, &byte, 1);
    (void)ignored;
    errno = saved;
}

int tinyfire_signal_pipe(const int *signals, int count) {
    if (signal_pipe_read < 0) {
        int fds[2];
        if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return -errno;
        signal_pipe_read = fds[0];
        signal_pipe_write = fds[1];
    }
    for (int index = 0; index < count; index++) {
        struct sigaction action;
        memset(&action, 0, sizeof action);
        action.sa_handler = tinyfire_signal_to_pipe;
        action.sa_flags = SA_RESTART;
        sigfillset(&action.sa_mask);
        if (sigaction(signals[index], &action, NULL) != 0) return -errno;
    }
    return signal_pipe_read;
}

int tinyfire_renameat_noreplace(int old_dirfd, const char *old_name, int new_dirfd, const char *new_name) {
#ifdef RENAME_NOREPLACE
    return renameat2(old_dirfd, old_name, new_dirfd, new_name, RENAME_NOREPLACE);
#else
    return (int)syscall(SYS_renameat2, old_dirfd, old_name, new_dirfd, new_name, 1U /* RENAME_NOREPLACE */);
#endif
}

int tinyfire_open(const char *path, int flags, unsigned int mode) { return open(path, flags, (mode_t)mode); }

int tinyfire_openat(int dirfd, const char *path, int flags, unsigned int mode) {
    return openat(dirfd, path, flags, (mode_t)mode);
}

int tinyfire_fcntl(int fd, int command, long argument) { return fcntl(fd, command, argument); }

int tinyfire_ioctl(int fd, unsigned long request, void *argument) { return ioctl(fd, request, argument); }

long long tinyfire_build_time(void) {
    static const char months[] = "JanFebMarAprMayJunJulAugSepOctNovDec";
    const char *date = __DATE__; /* "Nov 26 2026" */
    const char *clock = __TIME__; /* "14:03:23" */
    if (strlen(date) != 11 || strlen(clock) != 8) return 0;
    /* A named array, not a compound literal: some C libraries define strstr as a macro. */
    const char month[4] = {date[0], date[1], date[2], 0};
    const char *found = strstr(months, month);
    if (found == NULL || (found - months) % 3 != 0) return 0;
    struct tm parts;
    memset(&parts, 0, sizeof parts);
    parts.tm_mon = (int)((found - months) / 3);
    parts.tm_mday = (date[4] == ' ' ? 0 : date[4] - '0') * 10 + (date[5] - '0');
    parts.tm_year = atoi(date + 7) - 1900;
    parts.tm_hour = (clock[0] - '0') * 10 + (clock[1] - '0');
    parts.tm_min = (clock[3] - '0') * 10 + (clock[4] - '0');
    parts.tm_sec = (clock[6] - '0') * 10 + (clock[7] - '0');
    time_t seconds = timegm(&parts);
    return seconds < 0 ? 0 : (long long)seconds;
}

int tinyfire_clock_unsynchronized(void) {
    struct timex state;
    memset(&state, 0, sizeof state); /* modes 0: read only */
    if (adjtimex(&state) < 0) return -errno;
    return (state.status & STA_UNSYNC) ? 1 : 0;
}
