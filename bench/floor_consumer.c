/* bench/floor_consumer.c — the simplest consumer there is, as a floor for pickup latency (issue 38 goal 3).
 *
 *   cc -O2 -o floor_consumer bench/floor_consumer.c -lhiredis
 *   floor_consumer HOST PORT DB     (until SIGTERM)
 *
 * One connection, no threads, no runtime, no JSON parser, no in-flight list and no acknowledgement: `LMPOP 1
 * queue:default RIGHT COUNT 500` while jobs are waiting, `BLMPOP 1 1 queue:default RIGHT COUNT 500` (blocked, woken
 * by the next push) when none is. For each job the pickup (now − the payload's `enqueued_at`) is appended in seconds
 * to `<folder>/pickup.floor.<pid>`, where the folder is the job's first argument — as a `PickupProbe` job does
 * (Sources/BenchJobs/PickupProbeJob.swift), so the same producers serve both. A pop is a write: under AOF `always`
 * its reply waits for the same sync as the push's. So whatever gap between a push and its pickup this program shows
 * is the machine's and Redis's (scheduling, the blocked client's wake-up, the sync), below any reliable consumer's —
 * the floor bench/throughput.sh sets the worker's own pickup against. A benchmark tool: it asserts nothing.
 */
#include <hiredis/hiredis.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t stopping = 0;
static void on_term(int sig) { (void)sig; stopping = 1; }

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s HOST PORT DB\n", argv[0]);
        return 2;
    }
    signal(SIGTERM, on_term);
    signal(SIGINT, on_term);
    redisContext *redis = redisConnect(argv[1], atoi(argv[2]));
    if (redis == NULL || redis->err) {
        fprintf(stderr, "floor_consumer: cannot connect: %s\n", redis ? redis->errstr : "no memory");
        return 1;
    }
    redisReply *reply = redisCommand(redis, "SELECT %s", argv[3]);
    if (reply == NULL || reply->type == REDIS_REPLY_ERROR) { fprintf(stderr, "floor_consumer: SELECT failed\n"); return 1; }
    freeReplyObject(reply);
    char folder[2048] = "";
    FILE *samples = NULL;
    long taken = 0;
    int blocking = 0;
    while (!stopping) {
        reply = blocking ? redisCommand(redis, "BLMPOP 1 1 queue:default RIGHT COUNT 500")
                         : redisCommand(redis, "LMPOP 1 queue:default RIGHT COUNT 500");
        if (reply == NULL) { fprintf(stderr, "floor_consumer: %s\n", redis->errstr); return 1; }
        if (reply->type == REDIS_REPLY_ERROR) { fprintf(stderr, "floor_consumer: %s\n", reply->str); return 1; }
        blocking = reply->type != REDIS_REPLY_ARRAY;  /* nil: none waiting, block for the next push */
        if (!blocking && reply->elements == 2) {
            struct timespec now;
            clock_gettime(CLOCK_REALTIME, &now);
            double seconds = (double)now.tv_sec + now.tv_nsec / 1e9;
            redisReply *jobs = reply->element[1];
            for (size_t i = 0; i < jobs->elements; i++) {
                const char *job = jobs->element[i]->str;
                const char *at = strstr(job, "\"enqueued_at\":");
                const char *args = strstr(job, "\"args\":[\"");
                if (args != NULL) {  /* the sample file of this job's folder, opened when the folder changes */
                    args += strlen("\"args\":[\"");
                    size_t length = strcspn(args, "\"");
                    if (length < sizeof folder && (strncmp(folder, args, length) != 0 || folder[length] != 0)) {
                        char path[4096];
                        memcpy(folder, args, length);
                        folder[length] = 0;
                        if (samples) fclose(samples);
                        snprintf(path, sizeof path, "%s/pickup.floor.%d", folder, (int)getpid());
                        samples = fopen(path, "a");
                        if (samples) setvbuf(samples, NULL, _IOLBF, 0);
                    }
                }
                if (at != NULL && samples != NULL) {
                    fprintf(samples, "%.6f\n", seconds - strtod(at + strlen("\"enqueued_at\":"), NULL));
                }
                taken++;
            }
        }
        freeReplyObject(reply);
    }
    fprintf(stderr, "floor_consumer: %ld jobs\n", taken);
    if (samples) fclose(samples);
    redisFree(redis);
    return 0;
}
