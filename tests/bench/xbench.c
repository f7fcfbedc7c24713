// SPDX-License-Identifier: BSD-3-Clause
/*
 * xbench: MPI point-to-point and collective micro-benchmarks for comparing BTLs (xrc, openib, tcp).
 * Our own code, following the OSU micro-benchmark conventions so that the numbers are comparable:
 *
 *   latency   ping-pong between two ranks, half the round-trip time (us)          ~ osu_latency
 *   bw        windowed unidirectional bandwidth, window 64, 4-byte ack (MB/s)     ~ osu_bw
 *   bibw      windowed bidirectional bandwidth (MB/s, both directions summed)     ~ osu_bibw
 *   mpairs    every rank of the first node paired with one rank of another node;
 *             aggregate message rate (msg/s) and bandwidth (MB/s)                 ~ osu_mbw_mr
 *   mtrate    MPI_THREAD_MULTIPLE: -T threads in each of two ranks, thread k of one paired with thread k of
 *             the other on its own communicator, windowed sends as mpairs; aggregate message rate (msg/s),
 *             reported as benchmark "mtT" (mt1, mt2, mt4, ...)
 *   mtshared  MPI_THREAD_MULTIPLE: -T threads in each of two ranks, all on MPI_COMM_WORLD with one tag, so any
 *             thread's message may match any thread's receive (ob1's matching, the BTL's lock and its progress
 *             all meet); windows of -W nonblocking sends and receives and an acknowledgement, or with -B blocking
 *             MPI_Send/MPI_Recv; -m takes a comma list of sizes too (8,1024); aggregate message rate (msg/s),
 *             reported as benchmark "mtsT" (nonblocking) or "mtbT" (blocking)
 *   alltoall  MPI_Alltoall latency, averaged over ranks (us)                      ~ osu_alltoall
 *   startup   MPI_Init time and the time of the first message to every peer (us)
 *   hold      connect every pair of ranks (-p alltoall) or each rank to rank+1 and rank-1 only (-p ring), write
 *             DIR/ready, wait for DIR/release (resource accounting)
 *
 * The two ranks of latency/bw/bibw are rank 0 and the first rank on a node other than rank 0's (rank 1 when
 * every rank shares one node). MB/s = 10^6 bytes/s, as OSU. Sizes are powers of two from -m MIN:MAX.
 * Each size: warm-up iterations, then -r repetitions of -i iterations; one sample per repetition; reported
 * as median, min, max, first and third quartile over the repetitions. -c checks the received data (fills
 * the buffers with a pattern, clears the receive buffer before each repetition, verifies it after; outside
 * the timed loop).
 *
 * Output (rank 0, stdout): comment lines start with '#'; results are CSV lines
 *   xbench,LABEL,BENCH,SIZE,METRIC,UNIT,MEDIAN,MIN,MAX,Q1,Q3,REPS,ITERS,CHECK
 * CHECK is ok, FAIL or - (no check). Exit status 1 on usage errors, 2 when a data check failed.
 * Never asserts timings.
 */
#define _GNU_SOURCE
#include <mpi.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_SIZE_LIMIT (64L * 1024 * 1024)
#define LARGE_THRESHOLD 8192 /* OSU: above this, fewer iterations */
#define TAG_DATA 11
#define TAG_ACK 12

static int g_rank, g_nranks;
static const char *g_label = "-";
static long g_min = 1, g_max = 4L * 1024 * 1024;
static int g_iters = -1, g_iters_large = -1, g_warmup = -1, g_warmup_large = -1, g_reps = 5, g_window = 64;
static int g_check;
static int g_check_failed;
static int g_threads = 1; /* mtrate, mtshared: threads per rank (-T) */
static int g_blocking;     /* mtshared: MPI_Send/MPI_Recv instead of windows of MPI_Isend/MPI_Irecv (-B) */
static long g_size_list[16]; /* -m A,B,...: these sizes instead of the powers of two from MIN to MAX (mtshared) */
static int g_nsizes;
static const char *g_dir = ".";
static double g_hold_limit = 120.0;
static const char *g_pattern = "alltoall";
static double g_init_seconds; /* this rank's MPI_Init duration */
static long g_pace_us;        /* latency: rank 0 sleeps before each receive (for instruction counting) */
static const char *g_reply_fifo; /* latency: the partner says through this FIFO that its reply is sent */
static int g_reply_fd = -1;

static void usage(FILE *f) {
    fprintf(f,
            "usage: xbench BENCH [options]\n"
            "  BENCH: latency | bw | bibw | mpairs | mtrate | mtshared | alltoall | startup | hold | all\n"
            "  -m MIN:MAX  message sizes, powers of two (default 1:4194304); mtshared also A,B,... (these sizes)\n"
            "  -i N        iterations per repetition, sizes <= 8 KiB (default per bench, OSU-like)\n"
            "  -I N        iterations per repetition, sizes > 8 KiB\n"
            "  -w N / -x N warm-up iterations, small / large sizes\n"
            "  -r N        repetitions (samples) per size (default 5)\n"
            "  -W N        window for bw, bibw, mpairs, mtrate (default 64)\n"
            "  -T N        mtrate, mtshared: threads per rank (1-64, default 1; MPI_THREAD_MULTIPLE)\n"
            "  -B          mtshared: blocking MPI_Send/MPI_Recv in the windows\n"
            "  -M          any benchmark: MPI_Init_thread(MPI_THREAD_MULTIPLE), one thread still\n"
            "  -c          check received data\n"
            "  -t LABEL    label written in the second CSV column (e.g. the transport)\n"
            "  -d DIR      hold: directory for the ready/release files (default .)\n"
            "  -H SECONDS  hold: longest wait for DIR/release (default 120)\n"
            "  -p PATTERN  hold: who talks to whom: alltoall (default) or ring (rank+1 and rank-1 only; the\n"
            "              synchronisation goes along the ring too, so no other pair ever connects)\n"
            "  -q          quick: 2 repetitions, a tenth of the iterations\n"
            "  -S USEC     latency: rank 0 sleeps USEC after each send, so that the reply is there when its\n"
            "              receive starts and it spends no time polling (instruction counts per message under\n"
            "              callgrind, taken on rank 0; the reported times then include the sleeps)\n"
            "  -P FIFO     latency: and before that sleep, rank 0 waits until its partner wrote a byte into the\n"
            "              named pipe FIFO (mkfifo; seen by both ranks) after sending its reply\n");
}

/* ---------- helpers ---------- */

static void *xmalloc(size_t n) {
    void *p = NULL;
    if (posix_memalign(&p, 4096, n ? n : 1)) {
        fprintf(stderr, "xbench: out of memory (%zu bytes)\n", n);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    memset(p, 0, n ? n : 1);
    return p;
}

static inline unsigned char pat(long k, unsigned seed) {
    return (unsigned char)((unsigned long)k * 131u + seed * 17u + ((unsigned long)k >> 8) + 1u);
}
static void fill(unsigned char *b, long n, unsigned seed) {
    for (long k = 0; k < n; k++) b[k] = pat(k, seed);
}
static int g_corrupt; /* XBENCH_SELFTEST_CORRUPT=1: flip a received byte before verifying (proves -c detects it) */
static int verify(const unsigned char *b, long n, unsigned seed, const char *what, long size) {
    if (g_corrupt && n > 0) ((unsigned char *)b)[n / 2] ^= 0x5a;
    for (long k = 0; k < n; k++)
        if (b[k] != pat(k, seed)) {
            fprintf(stderr, "xbench: rank %d: %s size %ld: data check FAILED at byte %ld (got 0x%02x want 0x%02x)\n",
                    g_rank, what, size, k, b[k], pat(k, seed));
            return 1;
        }
    return 0;
}
/* all ranks agree whether any check failed; returns the CHECK column */
static const char *check_result(int local_fail) {
    int any = 0;
    MPI_Allreduce(&local_fail, &any, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
    if (!g_check) return "-";
    if (any) g_check_failed = 1;
    return any ? "FAIL" : "ok";
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static double quantile(const double *s, int n, double q) { /* s sorted, linear interpolation */
    if (n <= 0) return 0;
    double pos = q * (n - 1);
    int lo = (int)pos;
    if (lo >= n - 1) return s[n - 1];
    return s[lo] + (pos - lo) * (s[lo + 1] - s[lo]);
}
static void emit(const char *bench, long size, const char *metric, const char *unit, double *samples, int n,
                 int iters, const char *check) {
    if (g_rank != 0) return;
    qsort(samples, n, sizeof *samples, cmp_double);
    printf("xbench,%s,%s,%ld,%s,%s,%.4f,%.4f,%.4f,%.4f,%.4f,%d,%d,%s\n", g_label, bench, size, metric, unit,
           quantile(samples, n, 0.5), samples[0], samples[n - 1], quantile(samples, n, 0.25),
           quantile(samples, n, 0.75), n, iters, check);
    fflush(stdout);
}

static int iters_for(long size, int small_def, int large_def) {
    if (size > LARGE_THRESHOLD) return g_iters_large > 0 ? g_iters_large : large_def;
    return g_iters > 0 ? g_iters : small_def;
}
static int warmup_for(long size, int small_def, int large_def) {
    if (size > LARGE_THRESHOLD) return g_warmup_large >= 0 ? g_warmup_large : large_def;
    return g_warmup >= 0 ? g_warmup : small_def;
}

static char (*g_hosts)[MPI_MAX_PROCESSOR_NAME];
static void gather_hosts(void) {
    if (g_hosts) return;
    char me[MPI_MAX_PROCESSOR_NAME] = {0};
    int len = 0;
    MPI_Get_processor_name(me, &len);
    g_hosts = calloc(g_nranks, sizeof *g_hosts);
    MPI_Allgather(me, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, g_hosts, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, MPI_COMM_WORLD);
}
/* rank 0's partner: the first rank on another node, else rank 1 */
static int partner_of_zero(void) {
    gather_hosts();
    for (int r = 1; r < g_nranks; r++)
        if (strcmp(g_hosts[r], g_hosts[0]) != 0) return r;
    return 1;
}

/* ---------- latency ---------- */
/* n round trips between rank 0 and `other`. When asked (-S, -P), rank 0 waits after each send until the partner
 * says through the FIFO that it has sent its reply, then sleeps g_pace_us more, so that its receive finds the
 * reply there whatever the partner's speed. */
static void pingpong(int n, int other, unsigned char *sb, unsigned char *rb, long size) {
    char token = 0;
    for (int i = 0; i < n; i++) {
        if (g_rank == 0) {
            MPI_Send(sb, size, MPI_BYTE, other, TAG_DATA, MPI_COMM_WORLD);
            if (g_reply_fd >= 0 && read(g_reply_fd, &token, 1) != 1) {
                fprintf(stderr, "xbench: reading %s: %s\n", g_reply_fifo, strerror(errno));
                MPI_Abort(MPI_COMM_WORLD, 3);
            }
            if (g_pace_us > 0) usleep((useconds_t)g_pace_us);
            MPI_Recv(rb, size, MPI_BYTE, other, TAG_DATA, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(rb, size, MPI_BYTE, other, TAG_DATA, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(sb, size, MPI_BYTE, other, TAG_DATA, MPI_COMM_WORLD);
            if (g_reply_fd >= 0 && write(g_reply_fd, &token, 1) != 1) {
                fprintf(stderr, "xbench: writing %s: %s\n", g_reply_fifo, strerror(errno));
                MPI_Abort(MPI_COMM_WORLD, 3);
            }
        }
    }
}
/* The timed repetitions (not the warm-up, which sets the connection up): instruction counting collects only
 * inside this function (valgrind --tool=callgrind --collect-atstart=no --toggle-collect=timed_pingpong). */
__attribute__((noipa)) static void timed_pingpong(int n, int other, unsigned char *sb, unsigned char *rb,
                                                 long size) {
    pingpong(n, other, sb, rb, size);
}

static void bench_latency(void) {
    int peer = partner_of_zero();
    int active = g_rank == 0 || g_rank == peer;
    int other = g_rank == 0 ? peer : 0;
    if (g_rank == 0) printf("# latency: ranks 0 (%s) <-> %d (%s), half round trip\n", g_hosts[0], peer, g_hosts[peer]);
    if (g_reply_fifo && active) { /* the two opens meet (a FIFO's open blocks until the other end is open) */
        g_reply_fd = open(g_reply_fifo, g_rank == 0 ? O_RDONLY : O_WRONLY);
        if (g_reply_fd < 0) {
            fprintf(stderr, "xbench: cannot open %s: %s\n", g_reply_fifo, strerror(errno));
            MPI_Abort(MPI_COMM_WORLD, 3);
        }
    }
    unsigned char *sb = xmalloc(g_max), *rb = xmalloc(g_max);
    double *samples = calloc(g_reps, sizeof(double));
    for (long size = g_min; size <= g_max; size *= 2) {
        int iters = iters_for(size, 1000, 100), warm = warmup_for(size, 100, 10), fail = 0;
        if (g_check) fill(sb, size, (unsigned)size ^ (unsigned)g_rank);
        for (int rep = -1; rep < g_reps; rep++) { /* rep -1: warm-up */
            int n = rep < 0 ? warm : iters;
            if (g_check) memset(rb, 0, size);
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            if (active) (rep < 0 ? pingpong : timed_pingpong)(n, other, sb, rb, size);
            double t = MPI_Wtime() - t0;
            if (rep >= 0) samples[rep] = t * 1e6 / (2.0 * n);
            if (g_check && active && n > 0) fail |= verify(rb, size, (unsigned)size ^ (unsigned)other, "latency", size);
        }
        emit("latency", size, "latency", "us", samples, g_reps, iters, check_result(fail));
    }
    if (g_reply_fd >= 0) close(g_reply_fd), g_reply_fd = -1;
    free(sb), free(rb), free(samples);
}

/* ---------- bw / bibw ---------- */
static void bench_bw(int bidir) {
    const char *name = bidir ? "bibw" : "bw";
    int peer = partner_of_zero();
    int active = g_rank == 0 || g_rank == peer;
    int other = g_rank == 0 ? peer : 0;
    if (g_rank == 0)
        printf("# %s: ranks 0 (%s) -> %d (%s), window %d\n", name, g_hosts[0], peer, g_hosts[peer], g_window);
    unsigned char *sb = xmalloc(g_max), *rb = xmalloc(g_max);
    MPI_Request *req = calloc(2 * (size_t)g_window, sizeof(MPI_Request));
    double *samples = calloc(g_reps, sizeof(double));
    char ack[4] = {0};
    for (long size = g_min; size <= g_max; size *= 2) {
        int iters = iters_for(size, 100, 5), warm = warmup_for(size, 10, 2), fail = 0;
        if (g_check) fill(sb, size, (unsigned)size ^ (unsigned)g_rank);
        for (int rep = -1; rep < g_reps; rep++) {
            int n = rep < 0 ? warm : iters;
            if (g_check) memset(rb, 0, size);
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            if (active)
                for (int i = 0; i < n; i++) {
                    int k = 0;
                    if (bidir) {
                        for (int w = 0; w < g_window; w++)
                            MPI_Irecv(rb, size, MPI_BYTE, other, TAG_DATA, MPI_COMM_WORLD, &req[k++]);
                        for (int w = 0; w < g_window; w++)
                            MPI_Isend(sb, size, MPI_BYTE, other, TAG_DATA, MPI_COMM_WORLD, &req[k++]);
                        MPI_Waitall(k, req, MPI_STATUSES_IGNORE);
                    } else if (g_rank == 0) {
                        for (int w = 0; w < g_window; w++)
                            MPI_Isend(sb, size, MPI_BYTE, other, TAG_DATA, MPI_COMM_WORLD, &req[k++]);
                        MPI_Waitall(k, req, MPI_STATUSES_IGNORE);
                        MPI_Recv(ack, 4, MPI_BYTE, other, TAG_ACK, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    } else {
                        for (int w = 0; w < g_window; w++)
                            MPI_Irecv(rb, size, MPI_BYTE, other, TAG_DATA, MPI_COMM_WORLD, &req[k++]);
                        MPI_Waitall(k, req, MPI_STATUSES_IGNORE);
                        MPI_Send(ack, 4, MPI_BYTE, other, TAG_ACK, MPI_COMM_WORLD);
                    }
                }
            double t = MPI_Wtime() - t0;
            MPI_Bcast(&t, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD); /* rank 0's clock decides, as OSU */
            if (rep >= 0) samples[rep] = (bidir ? 2.0 : 1.0) * size * (double)g_window * n / t / 1e6;
            if (g_check && active && n > 0 && (bidir || g_rank == peer))
                fail |= verify(rb, size, (unsigned)size ^ (unsigned)other, name, size);
        }
        emit(name, size, "bandwidth", "MB/s", samples, g_reps, iters, check_result(fail));
    }
    free(sb), free(rb), free(req), free(samples);
}

/* ---------- multi-pair message rate and bandwidth ---------- */
static void bench_mpairs(void) {
    gather_hosts();
    /* senders: ranks on rank 0's node; receivers: ranks on the first other node, paired in rank order */
    const char *nodeB = NULL;
    for (int r = 0; r < g_nranks && !nodeB; r++)
        if (strcmp(g_hosts[r], g_hosts[0]) != 0) nodeB = g_hosts[r];
    int *A = calloc(g_nranks, sizeof(int)), *B = calloc(g_nranks, sizeof(int)), na = 0, nb = 0;
    for (int r = 0; r < g_nranks; r++) {
        if (strcmp(g_hosts[r], g_hosts[0]) == 0)
            A[na++] = r;
        else if (nodeB && strcmp(g_hosts[r], nodeB) == 0)
            B[nb++] = r;
    }
    if (!nodeB) { /* single node: split the ranks in halves */
        na = nb = 0;
        for (int r = 0; r < g_nranks; r++) {
            if (r < g_nranks / 2)
                A[na++] = r;
            else
                B[nb++] = r;
        }
    }
    int pairs = na < nb ? na : nb, role = 0, other = -1; /* role 1 sender, 2 receiver */
    for (int k = 0; k < pairs; k++) {
        if (A[k] == g_rank) role = 1, other = B[k];
        if (B[k] == g_rank) role = 2, other = A[k];
    }
    if (g_rank == 0) printf("# mpairs: %d pairs (%s -> %s), window %d\n", pairs, g_hosts[0], nodeB ? nodeB : "same node", g_window);
    if (pairs < 1) {
        if (g_rank == 0) printf("# mpairs: needs at least 2 ranks, skipped\n");
        free(A), free(B);
        return;
    }
    unsigned char *sb = xmalloc(g_max), *rb = xmalloc(g_max);
    MPI_Request *req = calloc((size_t)g_window, sizeof(MPI_Request));
    double *rate = calloc(g_reps, sizeof(double)), *bw = calloc(g_reps, sizeof(double));
    char ack[4] = {0};
    for (long size = g_min; size <= g_max; size *= 2) {
        int iters = iters_for(size, 100, 5), warm = warmup_for(size, 10, 2), fail = 0;
        if (g_check) fill(sb, size, (unsigned)size ^ (unsigned)g_rank);
        for (int rep = -1; rep < g_reps; rep++) {
            int n = rep < 0 ? warm : iters;
            if (g_check) memset(rb, 0, size);
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            for (int i = 0; role && i < n; i++) {
                if (role == 1) {
                    for (int w = 0; w < g_window; w++)
                        MPI_Isend(sb, size, MPI_BYTE, other, TAG_DATA, MPI_COMM_WORLD, &req[w]);
                    MPI_Waitall(g_window, req, MPI_STATUSES_IGNORE);
                    MPI_Recv(ack, 4, MPI_BYTE, other, TAG_ACK, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                } else {
                    for (int w = 0; w < g_window; w++)
                        MPI_Irecv(rb, size, MPI_BYTE, other, TAG_DATA, MPI_COMM_WORLD, &req[w]);
                    MPI_Waitall(g_window, req, MPI_STATUSES_IGNORE);
                    MPI_Send(ack, 4, MPI_BYTE, other, TAG_ACK, MPI_COMM_WORLD);
                }
            }
            double t = role == 1 ? MPI_Wtime() - t0 : 0, tmax = 0;
            MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD); /* slowest sender */
            if (rep >= 0) {
                double msgs = (double)pairs * g_window * n;
                rate[rep] = msgs / tmax;
                bw[rep] = msgs * size / tmax / 1e6;
            }
            if (g_check && role == 2 && n > 0) fail |= verify(rb, size, (unsigned)size ^ (unsigned)other, "mpairs", size);
        }
        const char *chk = check_result(fail);
        emit("mpairs", size, "msgrate", "msg/s", rate, g_reps, iters, chk);
        emit("mpairs", size, "bandwidth", "MB/s", bw, g_reps, iters, chk);
    }
    free(A), free(B), free(sb), free(rb), free(req), free(rate), free(bw);
}

/* ---------- mtrate ---------- */
struct mt_worker {
    MPI_Comm comm; /* this thread's own duplicate of MPI_COMM_WORLD */
    int sender, other, n;
    long size;
    unsigned char *sb, *rb;
    MPI_Request *req;
    double seconds; /* of the timed loop */
    int fail;
};

static void *mt_run(void *arg) {
    struct mt_worker *w = arg;
    char ack[4] = {0};
    MPI_Barrier(w->comm); /* the paired thread is ready too */
    double t0 = MPI_Wtime();
    for (int i = 0; i < w->n; i++) {
        if (w->sender) {
            for (int k = 0; k < g_window; k++) MPI_Isend(w->sb, w->size, MPI_BYTE, w->other, TAG_DATA, w->comm, &w->req[k]);
            MPI_Waitall(g_window, w->req, MPI_STATUSES_IGNORE);
            MPI_Recv(ack, 4, MPI_BYTE, w->other, TAG_ACK, w->comm, MPI_STATUS_IGNORE);
        } else {
            for (int k = 0; k < g_window; k++) MPI_Irecv(w->rb, w->size, MPI_BYTE, w->other, TAG_DATA, w->comm, &w->req[k]);
            MPI_Waitall(g_window, w->req, MPI_STATUSES_IGNORE);
            MPI_Send(ack, 4, MPI_BYTE, w->other, TAG_ACK, w->comm);
        }
    }
    w->seconds = MPI_Wtime() - t0;
    return NULL;
}

static void bench_mtrate(void) {
    int provided = 0;
    MPI_Query_thread(&provided);
    const int other = partner_of_zero();
    const int role = g_rank == 0 ? 1 : g_rank == other ? 2 : 0;
    char name[16];
    snprintf(name, sizeof(name), "mt%d", g_threads);
    if (g_rank == 0) printf("# mtrate: %d thread(s) per rank, ranks 0 and %d, window %d, thread level %s\n", g_threads,
                            other, g_window, provided == MPI_THREAD_MULTIPLE ? "multiple" : "NOT multiple");
    struct mt_worker *w = calloc((size_t)g_threads, sizeof(*w));
    for (int t = 0; t < g_threads; t++) { /* collective, in the same order everywhere, before any thread runs */
        MPI_Comm_dup(MPI_COMM_WORLD, &w[t].comm);
        w[t].sb = xmalloc(g_max), w[t].rb = xmalloc(g_max);
        w[t].req = calloc((size_t)g_window, sizeof(MPI_Request));
        w[t].sender = role == 1, w[t].other = g_rank == 0 ? other : 0;
    }
    pthread_t *tid = calloc((size_t)g_threads, sizeof(pthread_t));
    double *rate = calloc(g_reps, sizeof(double));
    for (long size = g_min; size <= g_max; size *= 2) {
        int iters = iters_for(size, 100, 5), warm = warmup_for(size, 10, 2), fail = 0;
        for (int t = 0; t < g_threads && g_check; t++) fill(w[t].sb, size, (unsigned)size ^ (unsigned)t);
        for (int rep = -1; rep < g_reps; rep++) {
            double slowest = 0, tmax = 0;
            if (role) {
                for (int t = 0; t < g_threads; t++) {
                    w[t].size = size, w[t].n = rep < 0 ? warm : iters;
                    if (g_check) memset(w[t].rb, 0, size);
                    pthread_create(&tid[t], NULL, mt_run, &w[t]);
                }
                for (int t = 0; t < g_threads; t++) {
                    pthread_join(tid[t], NULL);
                    if (w[t].seconds > slowest) slowest = w[t].seconds;
                    if (g_check && role == 2 && w[t].n > 0)
                        fail |= verify(w[t].rb, size, (unsigned)size ^ (unsigned)t, "mtrate", size);
                }
            }
            MPI_Allreduce(&slowest, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            if (rep >= 0) rate[rep] = (double)g_threads * g_window * iters / tmax;
        }
        emit(name, size, "msgrate", "msg/s", rate, g_reps, iters, check_result(fail));
    }
    for (int t = 0; t < g_threads; t++) {
        MPI_Comm_free(&w[t].comm);
        free(w[t].sb), free(w[t].rb), free(w[t].req);
    }
    free(w), free(tid), free(rate);
}

/* ---------- mtshared ---------- */
/* Every thread of both ranks on MPI_COMM_WORLD with the same tag: a receive may match any thread's send, so the
 * threads meet in ob1's matching and in the BTL's lock and progress, as threaded applications' do. Each rank
 * starts its threads together (a pthread barrier; one MPI_Barrier before, by the main thread: collectives on one
 * communicator cannot run in several threads at once). */
struct mts_worker {
    int sender, other, n;
    long size;
    unsigned char *sb, *rb;
    MPI_Request *req;
    pthread_barrier_t *start;
    double seconds; /* of the timed loop */
};

static void *mts_run(void *arg) {
    struct mts_worker *w = arg;
    char ack[4] = {0};
    pthread_barrier_wait(w->start);
    double t0 = MPI_Wtime();
    for (int i = 0; i < w->n; i++) {
        if (w->sender) {
            if (g_blocking)
                for (int k = 0; k < g_window; k++) MPI_Send(w->sb, w->size, MPI_BYTE, w->other, TAG_DATA, MPI_COMM_WORLD);
            else {
                for (int k = 0; k < g_window; k++)
                    MPI_Isend(w->sb, w->size, MPI_BYTE, w->other, TAG_DATA, MPI_COMM_WORLD, &w->req[k]);
                MPI_Waitall(g_window, w->req, MPI_STATUSES_IGNORE);
            }
            MPI_Recv(ack, 4, MPI_BYTE, w->other, TAG_ACK, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            if (g_blocking)
                for (int k = 0; k < g_window; k++)
                    MPI_Recv(w->rb, w->size, MPI_BYTE, w->other, TAG_DATA, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            else {
                for (int k = 0; k < g_window; k++)
                    MPI_Irecv(w->rb, w->size, MPI_BYTE, w->other, TAG_DATA, MPI_COMM_WORLD, &w->req[k]);
                MPI_Waitall(g_window, w->req, MPI_STATUSES_IGNORE);
            }
            MPI_Send(ack, 4, MPI_BYTE, w->other, TAG_ACK, MPI_COMM_WORLD);
        }
    }
    w->seconds = MPI_Wtime() - t0;
    return NULL;
}

static void bench_mtshared(void) {
    int provided = 0;
    MPI_Query_thread(&provided);
    const int other = partner_of_zero();
    const int role = g_rank == 0 ? 1 : g_rank == other ? 2 : 0;
    char name[16];
    snprintf(name, sizeof(name), "mt%c%d", g_blocking ? 'b' : 's', g_threads);
    if (g_nsizes == 0) /* the powers of two from MIN to MAX */
        for (long size = g_min; size <= g_max && g_nsizes < 16; size *= 2) g_size_list[g_nsizes++] = size;
    long maxsize = 0;
    for (int k = 0; k < g_nsizes; k++) maxsize = g_size_list[k] > maxsize ? g_size_list[k] : maxsize;
    if (g_rank == 0)
        printf("# mtshared: %d thread(s) per rank, ranks 0 and %d, MPI_COMM_WORLD, one tag, window %d, %s, thread "
               "level %s\n", g_threads, other, g_window, g_blocking ? "blocking" : "nonblocking",
               provided == MPI_THREAD_MULTIPLE ? "multiple" : "NOT multiple");
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)g_threads);
    struct mts_worker *w = calloc((size_t)g_threads, sizeof(*w));
    for (int t = 0; t < g_threads; t++) {
        w[t].sb = xmalloc(maxsize), w[t].rb = xmalloc(maxsize);
        w[t].req = calloc((size_t)g_window, sizeof(MPI_Request));
        w[t].sender = role == 1, w[t].other = g_rank == 0 ? other : 0, w[t].start = &start;
    }
    pthread_t *tid = calloc((size_t)g_threads, sizeof(pthread_t));
    double *rate = calloc(g_reps, sizeof(double));
    for (int z = 0; z < g_nsizes; z++) {
        const long size = g_size_list[z];
        int iters = iters_for(size, 100, 5), warm = warmup_for(size, 10, 2), fail = 0;
        /* any thread's receive may take any thread's message: every sender sends the same bytes */
        for (int t = 0; t < g_threads && g_check; t++) fill(w[t].sb, size, (unsigned)size);
        for (int rep = -1; rep < g_reps; rep++) {
            double slowest = 0, tmax = 0;
            MPI_Barrier(MPI_COMM_WORLD);
            if (role) {
                for (int t = 0; t < g_threads; t++) {
                    w[t].size = size, w[t].n = rep < 0 ? warm : iters;
                    if (g_check) memset(w[t].rb, 0, size);
                    pthread_create(&tid[t], NULL, mts_run, &w[t]);
                }
                for (int t = 0; t < g_threads; t++) {
                    pthread_join(tid[t], NULL);
                    if (w[t].seconds > slowest) slowest = w[t].seconds;
                    if (g_check && role == 2 && w[t].n > 0)
                        fail |= verify(w[t].rb, size, (unsigned)size, "mtshared", size);
                }
            }
            MPI_Allreduce(&slowest, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            if (rep >= 0) rate[rep] = (double)g_threads * g_window * iters / tmax;
        }
        emit(name, size, "msgrate", "msg/s", rate, g_reps, iters, check_result(fail));
    }
    for (int t = 0; t < g_threads; t++) free(w[t].sb), free(w[t].rb), free(w[t].req);
    pthread_barrier_destroy(&start);
    free(w), free(tid), free(rate);
}

/* ---------- alltoall ---------- */
static void bench_alltoall(void) {
    long max = g_max;
    unsigned char *sb = xmalloc((size_t)max * g_nranks), *rb = xmalloc((size_t)max * g_nranks);
    double *samples = calloc(g_reps, sizeof(double));
    if (g_rank == 0) printf("# alltoall: %d ranks, latency averaged over ranks\n", g_nranks);
    for (long size = g_min; size <= max; size *= 2) {
        int iters = iters_for(size, 200, 10), warm = warmup_for(size, 20, 2), fail = 0;
        if (g_check)
            for (int j = 0; j < g_nranks; j++) fill(sb + (size_t)j * size, size, (unsigned)size * 31u + g_rank * 1000u + j);
        for (int rep = -1; rep < g_reps; rep++) {
            int n = rep < 0 ? warm : iters;
            if (g_check) memset(rb, 0, (size_t)size * g_nranks);
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            for (int i = 0; i < n; i++) MPI_Alltoall(sb, size, MPI_BYTE, rb, size, MPI_BYTE, MPI_COMM_WORLD);
            double t = n ? (MPI_Wtime() - t0) / n : 0, sum = 0;
            MPI_Allreduce(&t, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
            if (rep >= 0) samples[rep] = sum / g_nranks * 1e6;
            if (g_check && n > 0)
                for (int j = 0; j < g_nranks && !fail; j++)
                    fail |= verify(rb + (size_t)j * size, size, (unsigned)size * 31u + j * 1000u + g_rank, "alltoall", size);
        }
        emit("alltoall", size, "latency", "us", samples, g_reps, iters, check_result(fail));
    }
    free(sb), free(rb), free(samples);
}

/* ---------- start-up ---------- */
/* First contact with every peer: step k sends to rank+k and receives from rank-k (a shift, so every step pairs
 * all ranks); the per-step times of the first round include connection set-up, the second round is warm.
 * Nothing touches another rank before this (no collective), so the first round is the true first contact. */
static void bench_startup(void) {
    int n = g_nranks, steps = n - 1;
    double *first = calloc(n, sizeof(double)), *warm = calloc(n, sizeof(double));
    char sbyte = 1, rbyte = 0;
    double round_t[2] = {0, 0};
    for (int round = 0; round < 2; round++) {
        double *st = round == 0 ? first : warm, r0 = MPI_Wtime();
        for (int k = 1; k <= steps; k++) {
            int dst = (g_rank + k) % n, src = (g_rank - k + n) % n;
            double t0 = MPI_Wtime();
            MPI_Sendrecv(&sbyte, 1, MPI_BYTE, dst, TAG_DATA, &rbyte, 1, MPI_BYTE, src, TAG_DATA, MPI_COMM_WORLD,
                         MPI_STATUS_IGNORE);
            st[dst] = (MPI_Wtime() - t0) * 1e6;
        }
        round_t[round] = (MPI_Wtime() - r0) * 1e6;
    }
    gather_hosts(); /* only now: collectives connect peers */
    double init_us = g_init_seconds * 1e6;
    double *all_init = calloc(n, sizeof(double)), *all_first = calloc(n, sizeof(double)),
           *all_warm = calloc(n, sizeof(double));
    MPI_Gather(&init_us, 1, MPI_DOUBLE, all_init, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    MPI_Gather(&round_t[0], 1, MPI_DOUBLE, all_first, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    MPI_Gather(&round_t[1], 1, MPI_DOUBLE, all_warm, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    /* per-peer first-message times, split into remote (other node) and local peers */
    double *rem = calloc((size_t)n * n + 1, sizeof(double)), *loc = calloc((size_t)n * n + 1, sizeof(double));
    double *mine = calloc((size_t)n, sizeof(double)), *allp = g_rank == 0 ? calloc((size_t)n * n, sizeof(double)) : NULL;
    for (int p = 0; p < n; p++) mine[p] = first[p];
    MPI_Gather(mine, n, MPI_DOUBLE, allp, n, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (g_rank == 0) {
        int nr = 0, nl = 0;
        for (int a = 0; a < n; a++)
            for (int b = 0; b < n; b++) {
                if (a == b) continue;
                if (strcmp(g_hosts[a], g_hosts[b]) != 0) rem[nr++] = allp[(size_t)a * n + b];
                else loc[nl++] = allp[(size_t)a * n + b];
            }
        printf("# startup: %d ranks; samples are ranks (init, rounds) or rank pairs (first_msg_*)\n", n);
        emit("startup", 0, "init", "us", all_init, n, 1, "-");
        if (steps > 0) {
            emit("startup", 1, "first_round", "us", all_first, n, 1, "-");
            emit("startup", 1, "warm_round", "us", all_warm, n, 1, "-");
        }
        if (nr) emit("startup", 1, "first_msg_remote", "us", rem, nr, 1, "-");
        if (nl) emit("startup", 1, "first_msg_local", "us", loc, nl, 1, "-");
    }
    free(first), free(warm), free(all_init), free(all_first), free(all_warm), free(rem), free(loc), free(mine), free(allp);
}

/* ---------- hold (resource accounting) ---------- */
/* Along the ring only (rank 0 -> 1 -> ... -> n-1 -> 0): rank 0 ends up with every rank's value, and when
 * rank 0 passes `word` around, every rank has it. No collective, so no pair but neighbours ever connects. */
static void ring_gather(double mine, double *all /* rank 0: n entries */) {
    int n = g_nranks, next = (g_rank + 1) % n, prev = (g_rank - 1 + n) % n;
    double *acc = xmalloc((size_t)n * sizeof *acc);
    if (g_rank == 0) {
        acc[0] = mine;
        if (n > 1) {
            MPI_Send(acc, n, MPI_DOUBLE, next, TAG_DATA, MPI_COMM_WORLD);
            MPI_Recv(acc, n, MPI_DOUBLE, prev, TAG_DATA, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        }
        memcpy(all, acc, (size_t)n * sizeof *acc);
    } else {
        MPI_Recv(acc, n, MPI_DOUBLE, prev, TAG_DATA, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        acc[g_rank] = mine;
        MPI_Send(acc, n, MPI_DOUBLE, next, TAG_DATA, MPI_COMM_WORLD);
    }
    free(acc);
}

static void ring_bcast(int *word) {
    int n = g_nranks, next = (g_rank + 1) % n, prev = (g_rank - 1 + n) % n;
    if (n < 2) return;
    if (g_rank != 0) MPI_Recv(word, 1, MPI_INT, prev, TAG_DATA, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Send(word, 1, MPI_INT, next, TAG_DATA, MPI_COMM_WORLD);
    if (g_rank == 0) MPI_Recv(word, 1, MPI_INT, prev, TAG_DATA, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
}

static void bench_hold(void) {
    /* connect with sizes that reach every protocol (eager, send, RDMA), up to -m's largest; the data is checked */
    static const long sizes[] = {1, 4096, 65536, 1048576};
    int ring = !strcmp(g_pattern, "ring"), n = g_nranks;
    unsigned char *sb = xmalloc(1048576), *rb = xmalloc(1048576);
    long bad = 0;
    for (unsigned s = 0; s < sizeof sizes / sizeof *sizes; s++)
        for (int k = 1; k < n && sizes[s] <= g_max; k++) {
            if (ring && k != 1 && k != n - 1) continue;
            int dst = (g_rank + k) % n, src = (g_rank - k + n) % n;
            for (long i = 0; i < sizes[s]; i++) sb[i] = (unsigned char)(g_rank * 31 + i * 7 + s);
            MPI_Sendrecv(sb, sizes[s], MPI_BYTE, dst, TAG_DATA, rb, sizes[s], MPI_BYTE, src, TAG_DATA, MPI_COMM_WORLD,
                         MPI_STATUS_IGNORE);
            for (long i = 0; i < sizes[s]; i++) bad += rb[i] != (unsigned char)(src * 31 + i * 7 + s);
        }
    if (bad) fprintf(stderr, "xbench: hold: rank %d received %ld wrong bytes\n", g_rank, bad);
    double init_us = g_init_seconds * 1e6, *all = g_rank == 0 ? calloc(n, sizeof(double)) : NULL;
    double fails = bad != 0, *allfail = g_rank == 0 ? calloc(n, sizeof(double)) : NULL;
    if (ring) {
        ring_gather(init_us, all);
        ring_gather(fails, allfail);
    } else {
        MPI_Gather(&init_us, 1, MPI_DOUBLE, all, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        MPI_Gather(&fails, 1, MPI_DOUBLE, allfail, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    }
    int released = 0, wrong = 0;
    if (g_rank == 0) {
        for (int r = 0; r < n; r++) wrong += allfail[r] != 0;
        printf("# hold: pattern %s, data %s (%d of %d ranks received wrong bytes)\n", g_pattern,
               wrong ? "WRONG" : "verified", wrong, n);
        emit("hold", 0, "init", "us", all, n, 1, "-");
        char path[4096];
        snprintf(path, sizeof path, "%s/ready", g_dir);
        FILE *f = fopen(path, "w");
        if (f) fprintf(f, "%d\n", n), fclose(f);
        else fprintf(stderr, "xbench: hold: cannot write %s: %s\n", path, strerror(errno));
        printf("# hold: connected %d ranks; waiting for %s/release (at most %.0f s)\n", n, g_dir, g_hold_limit);
        fflush(stdout);
        snprintf(path, sizeof path, "%s/release", g_dir);
        double t0 = MPI_Wtime();
        struct stat st;
        while (MPI_Wtime() - t0 < g_hold_limit)
            if (stat(path, &st) == 0) { released = 1; break; }
            else usleep(20000);
        if (!released) printf("# hold: no release after %.0f s, finishing\n", g_hold_limit);
    }
    if (ring) ring_bcast(&released);
    else MPI_Bcast(&released, 1, MPI_INT, 0, MPI_COMM_WORLD);
    free(sb), free(rb), free(all), free(allfail);
    if (bad || wrong) g_check_failed = 1;
}

int main(int argc, char **argv) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    /* Only mtrate and mtshared ask for threads, and any benchmark given -M (a single-threaded run under MPI_THREAD_MULTIPLE, for
     * instruction counts of the locked paths): the others stay as they were. */
    int thread_multiple = argc > 1 && (!strcmp(argv[1], "mtrate") || !strcmp(argv[1], "mtshared"));
    for (int k = 2; k < argc; k++) thread_multiple |= !strcmp(argv[k], "-M");
    if (thread_multiple) {
        int provided = 0;
        MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    } else {
        MPI_Init(&argc, &argv);
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    g_init_seconds = (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) * 1e-9;
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_nranks);

    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        if (g_rank == 0) usage(argc < 2 ? stderr : stdout);
        MPI_Finalize();
        return argc < 2;
    }
    const char *bench = argv[1];
    g_corrupt = getenv("XBENCH_SELFTEST_CORRUPT") && atoi(getenv("XBENCH_SELFTEST_CORRUPT")) == 1;
    int quick = 0, opt;
    optind = 2;
    while ((opt = getopt(argc, argv, "m:i:I:w:x:r:W:ct:d:H:p:qS:P:T:MB")) != -1) {
        switch (opt) {
        case 'm':
            if (strchr(optarg, ',')) { /* a list: these sizes */
                g_nsizes = 0, g_min = MAX_SIZE_LIMIT, g_max = 0;
                for (char *p = optarg; *p && g_nsizes < 16; p += *p == ',') {
                    long v = strtol(p, &p, 10);
                    g_size_list[g_nsizes++] = v;
                    g_min = v < g_min ? v : g_min, g_max = v > g_max ? v : g_max;
                    if (*p && *p != ',') g_min = 0; /* not a number: refused below */
                }
            } else if (sscanf(optarg, "%ld:%ld", &g_min, &g_max) != 2)
                g_min = g_max = atol(optarg);
            break;
        case 'i': g_iters = atoi(optarg); break;
        case 'I': g_iters_large = atoi(optarg); break;
        case 'w': g_warmup = atoi(optarg); break;
        case 'x': g_warmup_large = atoi(optarg); break;
        case 'r': g_reps = atoi(optarg); break;
        case 'W': g_window = atoi(optarg); break;
        case 'c': g_check = 1; break;
        case 't': g_label = optarg; break;
        case 'd': g_dir = optarg; break;
        case 'H': g_hold_limit = atof(optarg); break;
        case 'p': g_pattern = optarg; break;
        case 'q': quick = 1; break;
        case 'S': g_pace_us = atol(optarg); break;
        case 'P': g_reply_fifo = optarg; break;
        case 'T': g_threads = atoi(optarg); break;
        case 'M': break; /* seen before MPI_Init */
        case 'B': g_blocking = 1; break;
        default:
            if (g_rank == 0) usage(stderr);
            MPI_Finalize();
            return 1;
        }
    }
    if (quick) {
        g_reps = 2;
        if (g_iters < 0) g_iters = 50;
        if (g_iters_large < 0) g_iters_large = 2;
        if (g_warmup < 0) g_warmup = 5;
        if (g_warmup_large < 0) g_warmup_large = 1;
    }
    if (g_min < 1 || g_max < g_min || g_max > MAX_SIZE_LIMIT || g_reps < 1 || g_window < 1 || g_window > 4096 ||
        g_threads < 1 || g_threads > 64) {
        if (g_rank == 0) fprintf(stderr, "xbench: bad sizes/repetitions/window (sizes 1..%ld)\n", MAX_SIZE_LIMIT);
        MPI_Finalize();
        return 1;
    }
    if (g_nsizes > 0 && strcmp(bench, "mtshared")) {
        if (g_rank == 0) fprintf(stderr, "xbench: -m with a list of sizes is for mtshared only (else MIN:MAX)\n");
        MPI_Finalize();
        return 1;
    }
    if (g_nranks < 2 && strcmp(bench, "startup") && strcmp(bench, "hold") && strcmp(bench, "alltoall")) {
        if (g_rank == 0) fprintf(stderr, "xbench: %s needs at least 2 ranks\n", bench);
        MPI_Finalize();
        return 1;
    }
    if (g_rank == 0) {
        printf("# xbench 1 bench=%s label=%s ranks=%d sizes=%ld:%ld reps=%d window=%d check=%d\n", bench, g_label,
               g_nranks, g_min, g_max, g_reps, g_window, g_check);
        printf("# columns: xbench,label,bench,size,metric,unit,median,min,max,q1,q3,reps,iters,check\n");
    }
    int all = !strcmp(bench, "all"), known = 0;
    /* startup first: it must be the first communication of the job */
    if (all || !strcmp(bench, "startup")) bench_startup(), known = 1;
    if (all || !strcmp(bench, "latency")) bench_latency(), known = 1;
    if (all || !strcmp(bench, "bw")) bench_bw(0), known = 1;
    if (all || !strcmp(bench, "bibw")) bench_bw(1), known = 1;
    if (all || !strcmp(bench, "mpairs")) bench_mpairs(), known = 1;
    if (all || !strcmp(bench, "alltoall")) bench_alltoall(), known = 1;
    if (!strcmp(bench, "mtrate")) bench_mtrate(), known = 1;
    if (!strcmp(bench, "mtshared")) bench_mtshared(), known = 1;
    if (!strcmp(bench, "hold")) {
        if (strcmp(g_pattern, "alltoall") && strcmp(g_pattern, "ring")) {
            if (g_rank == 0) fprintf(stderr, "xbench: -p %s: not a pattern (alltoall, ring)\n", g_pattern);
            MPI_Finalize();
            return 1;
        }
        bench_hold(), known = 1;
    }
    if (!known) {
        if (g_rank == 0) fprintf(stderr, "xbench: unknown benchmark '%s'\n", bench), usage(stderr);
        MPI_Finalize();
        return 1;
    }
    MPI_Finalize();
    return g_check_failed ? 2 : 0;
}
