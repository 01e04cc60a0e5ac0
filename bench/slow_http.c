/* bench/slow_http.c — an HTTP/1.1 server on 127.0.0.1 that answers every request DELAY_MS milliseconds after it
 * arrived, as a store or geocoding API waiting on its own back end: what bench/http-bound.sh drives HTTP-bound jobs
 * against (issue 38, goal 2). One thread, epoll, non-blocking sockets; keep-alive and pipelined requests; any
 * number of connections (up to the file-descriptor limit).
 *
 *   cc -O2 -o slow_http bench/slow_http.c
 *   slow_http PORT DELAY_MS STATS_FILE
 *
 * Counts requests in flight (read, not yet answered). On SIGTERM or SIGINT it writes to STATS_FILE and exits:
 *   answered=N max_in_flight=N cpu_s=S     (cpu_s: its own user + system CPU, getrusage)
 * Requests are GET/HEAD without a body (a Content-Length body is skipped). Every answer is
 * `200 OK`, `Content-Type: application/json`, body `{"ok":true}`. All delays are equal, so answers fall due in
 * arrival order: one FIFO queue, and epoll_wait sleeps until the oldest is due. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_FDS 65536
#define BUFFER 8192

static const char answer[] = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"ok\":true}";

struct connection {
    unsigned generation; /* bumped when the fd is closed: queued answers for an older generation are dropped */
    int open;
    size_t length;       /* bytes of the next request(s) buffered */
    size_t skip;         /* body bytes still to discard */
    char buffer[BUFFER];
};

struct due { int fd; unsigned generation; long long at_ns; };

static struct connection *connections;
static struct due *queue;      /* ring buffer of answers to send */
static size_t queue_capacity = 1 << 20, queue_head, queue_count;
static long long delay_ns;
static long long answered, in_flight, max_in_flight, accepted;
static volatile sig_atomic_t stopping;

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void on_signal(int signal) { (void)signal; stopping = 1; }

static void close_connection(int epoll, int fd) {
    epoll_ctl(epoll, EPOLL_CTL_DEL, fd, NULL);
    close(fd);
    connections[fd].open = 0;
    connections[fd].generation++;
    connections[fd].length = 0;
    connections[fd].skip = 0;
}

static void enqueue_answer(int fd) {
    if (queue_count == queue_capacity) { fprintf(stderr, "slow_http: answer queue full\n"); exit(1); }
    struct due *slot = &queue[(queue_head + queue_count) % queue_capacity];
    slot->fd = fd;
    slot->generation = connections[fd].generation;
    slot->at_ns = now_ns() + delay_ns;
    queue_count++;
    if (++in_flight > max_in_flight) max_in_flight = in_flight;
}

/* Finds complete requests in the connection's buffer and queues one answer each. */
static void parse_requests(int fd) {
    struct connection *c = &connections[fd];
    for (;;) {
        if (c->skip) {
            size_t drop = c->skip < c->length ? c->skip : c->length;
            memmove(c->buffer, c->buffer + drop, c->length - drop);
            c->length -= drop;
            c->skip -= drop;
            if (c->skip) return;
        }
        char *end = memmem(c->buffer, c->length, "\r\n\r\n", 4);
        if (!end) return;
        size_t head = (size_t)(end - c->buffer) + 4;
        char *length = memmem(c->buffer, head, "Content-Length:", 15);
        if (!length) length = memmem(c->buffer, head, "content-length:", 15);
        size_t body = length ? (size_t)strtoul(length + 15, NULL, 10) : 0;
        memmove(c->buffer, c->buffer + head, c->length - head);
        c->length -= head;
        c->skip = body;
        enqueue_answer(fd);
    }
}

int main(int argc, char **argv) {
    if (argc != 4) { fprintf(stderr, "usage: slow_http PORT DELAY_MS STATS_FILE\n"); return 2; }
    int port = atoi(argv[1]);
    delay_ns = atoll(argv[2]) * 1000000LL;
    const char *stats = argv[3];
    signal(SIGPIPE, SIG_IGN);
    struct sigaction action = {0};
    action.sa_handler = on_signal;
    sigaction(SIGTERM, &action, NULL);
    sigaction(SIGINT, &action, NULL);
    struct rlimit files = {MAX_FDS, MAX_FDS};
    setrlimit(RLIMIT_NOFILE, &files);
    connections = calloc(MAX_FDS, sizeof *connections);
    queue = calloc(queue_capacity, sizeof *queue);

    int listener = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(listener, (struct sockaddr *)&address, sizeof address) || listen(listener, 4096)) {
        perror("slow_http: bind/listen");
        return 1;
    }
    int epoll = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event event = {.events = EPOLLIN, .data.fd = listener};
    epoll_ctl(epoll, EPOLL_CTL_ADD, listener, &event);
    struct epoll_event events[1024];

    while (!stopping) {
        int timeout = -1;
        if (queue_count) {
            long long wait = queue[queue_head].at_ns - now_ns();
            timeout = wait <= 0 ? 0 : (int)((wait + 999999) / 1000000);
        }
        int ready = epoll_wait(epoll, events, 1024, timeout);
        if (ready < 0 && errno != EINTR) { perror("slow_http: epoll_wait"); break; }
        for (int i = 0; i < ready; i++) {
            int fd = events[i].data.fd;
            if (fd == listener) {
                int client;
                while ((client = accept4(listener, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
                    if (client >= MAX_FDS) { close(client); continue; }
                    accepted++;
                    setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    connections[client].open = 1;
                    struct epoll_event add = {.events = EPOLLIN | EPOLLRDHUP, .data.fd = client};
                    epoll_ctl(epoll, EPOLL_CTL_ADD, client, &add);
                }
                continue;
            }
            struct connection *c = &connections[fd];
            for (;;) {
                if (c->length == BUFFER) { close_connection(epoll, fd); break; } /* a request head over 8 KB */
                ssize_t got = read(fd, c->buffer + c->length, BUFFER - c->length);
                if (got > 0) { c->length += (size_t)got; parse_requests(fd); continue; }
                if (got == 0 || (errno != EAGAIN && errno != EINTR)) close_connection(epoll, fd);
                break;
            }
        }
        long long now = now_ns();
        while (queue_count && queue[queue_head].at_ns <= now) {
            struct due item = queue[queue_head];
            queue_head = (queue_head + 1) % queue_capacity;
            queue_count--;
            in_flight--;
            if (!connections[item.fd].open || connections[item.fd].generation != item.generation) continue;
            /* The answer is tiny: a socket buffer always takes it whole unless the client stopped reading. */
            if (write(item.fd, answer, sizeof answer - 1) != (ssize_t)(sizeof answer - 1)) {
                close_connection(epoll, item.fd);
                continue;
            }
            answered++;
        }
    }
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    double cpu = usage.ru_utime.tv_sec + usage.ru_stime.tv_sec + (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
    FILE *out = fopen(stats, "w");
    if (out) {
        fprintf(out, "answered=%lld max_in_flight=%lld cpu_s=%.3f connections=%lld\n", answered, max_in_flight, cpu,
                accepted);
        fclose(out);
    }
    return 0;
}
