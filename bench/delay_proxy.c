/* bench/delay_proxy.c — a TCP proxy that holds every byte DELAY_US microseconds in each direction, so a client
 * sees Redis behind a round trip of 2 × DELAY_US (plus loopback), like `tc qdisc … netem delay DELAY_US` on both
 * ends of a link. bench/latency.sh uses it where the kernel has no sch_netem (this machine's kernel is built
 * without CONFIG_NET_SCH_NETEM). Not a bandwidth limit: only a fixed delay, order kept.
 *
 *   cc -O2 -pthread -o delay_proxy bench/delay_proxy.c
 *   delay_proxy LISTEN_PORT TARGET_PORT DELAY_US      (both on 127.0.0.1)
 *
 * Per connection, two pumps (client→Redis, Redis→client), each a reader thread that stamps every chunk it reads
 * with CLOCK_MONOTONIC and a writer thread that sleeps until stamp + delay (clock_nanosleep TIMER_ABSTIME) and
 * writes it. The reader never waits for the writer, so pipelined traffic is delayed, not serialized. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static long delay_ns;

struct chunk {
    struct chunk *next;
    struct timespec due;
    ssize_t length; /* 0 = end of stream */
    char data[];
};

struct pump {
    int from, to;
    pthread_mutex_t lock;
    pthread_cond_t ready;
    struct chunk *head, *tail;
};

static void push(struct pump *p, struct chunk *c) {
    pthread_mutex_lock(&p->lock);
    c->next = NULL;
    if (p->tail) p->tail->next = c; else p->head = c;
    p->tail = c;
    pthread_cond_signal(&p->ready);
    pthread_mutex_unlock(&p->lock);
}

static struct chunk *pop(struct pump *p) {
    pthread_mutex_lock(&p->lock);
    while (!p->head) pthread_cond_wait(&p->ready, &p->lock);
    struct chunk *c = p->head;
    p->head = c->next;
    if (!p->head) p->tail = NULL;
    pthread_mutex_unlock(&p->lock);
    return c;
}

static void *reader(void *arg) {
    struct pump *p = arg;
    for (;;) {
        struct chunk *c = malloc(sizeof(struct chunk) + 65536);
        if (!c) abort();
        ssize_t n = read(p->from, c->data, 65536);
        clock_gettime(CLOCK_MONOTONIC, &c->due);
        c->due.tv_nsec += delay_ns;
        while (c->due.tv_nsec >= 1000000000L) { c->due.tv_nsec -= 1000000000L; c->due.tv_sec += 1; }
        if (n < 0 && errno == EINTR) { free(c); continue; }
        c->length = n > 0 ? n : 0;
        push(p, c);
        if (n <= 0) return NULL;
    }
}

static void *writer(void *arg) {
    struct pump *p = arg;
    for (;;) {
        struct chunk *c = pop(p);
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &c->due, NULL) == EINTR) {}
        if (c->length == 0) { free(c); break; }
        ssize_t off = 0;
        while (off < c->length) {
            ssize_t w = write(p->to, c->data + off, (size_t)(c->length - off));
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) break;
            off += w;
        }
        int failed = off < c->length;
        free(c);
        if (failed) break;
    }
    shutdown(p->to, SHUT_WR);
    shutdown(p->from, SHUT_RD);
    return NULL;
}

static void *connection(void *arg) {
    struct pump *pumps = arg;
    pthread_t threads[4];
    pthread_create(&threads[0], NULL, reader, &pumps[0]);
    pthread_create(&threads[1], NULL, writer, &pumps[0]);
    pthread_create(&threads[2], NULL, reader, &pumps[1]);
    pthread_create(&threads[3], NULL, writer, &pumps[1]);
    for (int i = 0; i < 4; i++) pthread_join(threads[i], NULL);
    close(pumps[0].from);
    close(pumps[1].from);
    free(pumps);
    return NULL;
}

static int nodelay(int fd) {
    int one = 1;
    return setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s LISTEN_PORT TARGET_PORT DELAY_US\n", argv[0]);
        return 2;
    }
    int listen_port = atoi(argv[1]), target_port = atoi(argv[2]);
    delay_ns = atol(argv[3]) * 1000L;
    signal(SIGPIPE, SIG_IGN);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int server = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(server, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    addr.sin_port = htons((uint16_t)listen_port);
    if (bind(server, (struct sockaddr *)&addr, sizeof addr) < 0 || listen(server, 512) < 0) {
        perror("delay_proxy: listen");
        return 1;
    }
    fprintf(stderr, "delay_proxy: 127.0.0.1:%d -> 127.0.0.1:%d, %ld us each way\n", listen_port, target_port,
            delay_ns / 1000);
    for (;;) {
        int client = accept(server, NULL, NULL);
        if (client < 0) { if (errno == EINTR) continue; perror("delay_proxy: accept"); continue; }
        int upstream = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in target = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                                     .sin_port = htons((uint16_t)target_port)};
        if (connect(upstream, (struct sockaddr *)&target, sizeof target) < 0) {
            perror("delay_proxy: connect");
            close(client); close(upstream);
            continue;
        }
        nodelay(client);
        nodelay(upstream);
        struct pump *pumps = calloc(2, sizeof(struct pump));
        pumps[0].from = client; pumps[0].to = upstream;
        pumps[1].from = upstream; pumps[1].to = client;
        for (int i = 0; i < 2; i++) {
            pthread_mutex_init(&pumps[i].lock, NULL);
            pthread_cond_init(&pumps[i].ready, NULL);
        }
        pthread_t thread;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_create(&thread, &attr, connection, pumps);
        pthread_attr_destroy(&attr);
    }
}
