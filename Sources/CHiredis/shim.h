#ifndef CHIREDIS_SHIM_H
#define CHIREDIS_SHIM_H
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>

/* SIGPIPE and Redis links. hiredis (and OpenSSL's socket BIO) write with write(): a write to a socket whose peer is
 * gone (a server killed, a CLIENT KILL, an idle timeout, a proxy's reset) raises SIGPIPE, whose default action ends
 * the whole process. A thread that talks to Redis blocks SIGPIPE for itself, once (a thread-local flag: one branch per
 * call after the first): the write then fails with EPIPE, which the link reports as an I/O error. The signal stays
 * pending on that thread until workers_consume_pending_sigpipe takes it (after a failed link), so a later unblock
 * cannot deliver it. Other threads of the process are untouched. */
static inline void workers_block_sigpipe_on_this_thread(void) {
    static __thread int blocked = 0;
    if (blocked) return;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    blocked = 1;
}

static inline void workers_consume_pending_sigpipe(void) {
    sigset_t pending;
    sigemptyset(&pending);
    if (sigpending(&pending) != 0 || !sigismember(&pending, SIGPIPE)) return;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    struct timespec zero = {0, 0};
    sigtimedwait(&set, NULL, &zero);
}
#endif
