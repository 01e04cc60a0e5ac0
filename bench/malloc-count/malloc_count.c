// bench/malloc-count/malloc_count.c — an LD_PRELOAD library counting heap allocations of a process: every call to
// malloc, calloc, realloc, posix_memalign, aligned_alloc, memalign, valloc and pvalloc adds one to a counter (free is
// not counted). Built and used by bench/middleware-allocs.sh:
//
//   cc -O2 -shared -fPIC -o libmalloccount.so bench/malloc-count/malloc_count.c
//   MALLOC_COUNT_FILE=/tmp/count LD_PRELOAD=./libmalloccount.so workerctl worker …
//
// With MALLOC_COUNT_FILE the counter lives in that file (8 bytes, a native-endian unsigned 64-bit integer, mapped
// shared), so another process reads it at any moment while the process runs (`od -An -t u8 -N8 FILE`) and it keeps
// the total after exit; child processes do not inherit the variable. Without it the total is printed to stderr at
// exit (unless the program closed stderr first, as coreutils do). The allocations themselves are glibc's
// (`__libc_malloc` …): only counted, never changed. Linux/glibc only.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t count, size_t size);
extern void *__libc_realloc(void *pointer, size_t size);
extern void *__libc_memalign(size_t alignment, size_t size);

static _Atomic uint64_t local_count;
static _Atomic uint64_t *counter = &local_count;
static int to_file;

static inline void count(void) { atomic_fetch_add_explicit(counter, 1, memory_order_relaxed); }

__attribute__((constructor)) static void malloc_count_init(void) {
    const char *path = getenv("MALLOC_COUNT_FILE");
    if (path == NULL || *path == 0) return;
    // Not truncated (a process still mapping it would fault): set to 8 bytes and overwritten. Removed from the
    // environment so that a child process does not count into the same file.
    int fd = open(path, O_RDWR | O_CREAT, 0644);
    unsetenv("MALLOC_COUNT_FILE");
    if (fd < 0) return;
    if (ftruncate(fd, sizeof(uint64_t)) == 0) {
        void *mapped = mmap(NULL, sizeof(uint64_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (mapped != MAP_FAILED) {
            atomic_store((_Atomic uint64_t *)mapped, atomic_load(&local_count));  // those before this constructor
            counter = (_Atomic uint64_t *)mapped;
            to_file = 1;
        }
    }
    close(fd);
}

__attribute__((destructor)) static void malloc_count_report(void) {
    if (!to_file) fprintf(stderr, "malloc-count: %llu allocations\n", (unsigned long long)atomic_load(counter));
}

void *malloc(size_t size) { count(); return __libc_malloc(size); }
void *calloc(size_t n, size_t size) { count(); return __libc_calloc(n, size); }
void *realloc(void *pointer, size_t size) { count(); return __libc_realloc(pointer, size); }
void *memalign(size_t alignment, size_t size) { count(); return __libc_memalign(alignment, size); }
void *aligned_alloc(size_t alignment, size_t size) { count(); return __libc_memalign(alignment, size); }
void *valloc(size_t size) { count(); return __libc_memalign((size_t)sysconf(_SC_PAGESIZE), size); }
void *pvalloc(size_t size) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    count();
    return __libc_memalign(page, (size + page - 1) & ~(page - 1));
}
int posix_memalign(void **out, size_t alignment, size_t size) {
    count();
    if (alignment % sizeof(void *) != 0 || (alignment & (alignment - 1)) != 0) return EINVAL;
    void *pointer = __libc_memalign(alignment, size);
    if (pointer == NULL) return ENOMEM;
    *out = pointer;
    return 0;
}
