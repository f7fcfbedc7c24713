// SPDX-License-Identifier: BSD-3-Clause
/*
 * allpairs: every ordered pair of ranks exchanges messages of every size class (0 B .. 4 MiB), then a
 * nonblocking storm (many Isend/Irecv in flight to all peers with distinct tags, plus ANY_SOURCE receives).
 * Every payload is filled with a pattern derived from (src, dst, size, iteration) and verified at the receiver
 * with a checksum (and the exact first bad byte on mismatch). Optionally checks the per-node layout:
 * MPI_COMM_TYPE_SHARED sizes, hostnames and local ranks against `--expect nodeA:2,nodeB:2`.
 *
 * usage: allpairs [--expect HOST:N,HOST:N...] [--max-size BYTES] [--iters N] [--storm N] [--quiet] [--pvars]
 * --max-size caps every message, the storm's (at most 256 KiB) included: payloads are verified in buffers of that
 * size.
 * Prints "allpairs: OK pairs=... bytes=... errors=0" (rank 0) and exits non-zero on any error. --pvars: at the
 * end every rank prints btl xrc's MPI_T variables ("pvar RANK NAME VALUE": counters since before MPI_Init, read
 * at a cut of the job no message crosses, so that they add up; levels as they are then).
 */
#include "mix64.h"
#include "xrc_pvars.h"

#include <mpi.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define HOSTLEN 64
#define TAG_PAIR 1
#define TAG_ANY 7777
#define TAG_STORM_BASE 100

static int g_rank, g_size;
static long long g_errors;
static int g_quiet;
static int g_printed;
static int g_corrupt; /* --selftest-corrupt: flip one received byte per message to prove detection */

static void report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void report(const char *fmt, ...)
{
    g_errors++;
    if (g_printed++ >= 20) return; /* count all, print the first few */
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "allpairs: rank %d: ERROR %s\n", g_rank, buf);
}

/* ------------------------------------------------------------------------------------ pattern/checksum */
static uint64_t seed_of(int src, int dst, size_t size, int iter)
{
    return mix64(((uint64_t)src << 48) ^ ((uint64_t)dst << 32) ^ ((uint64_t)size * 0x9e3779b97f4a7c15ULL) ^
                 ((uint64_t)iter << 8) ^ 0x5eedULL);
}

static void fill(unsigned char *buf, size_t size, int src, int dst, int iter)
{
    uint64_t s = seed_of(src, dst, size, iter);
    size_t i = 0;
    for (; i + 8 <= size; i += 8) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17; /* xorshift64 */
        memcpy(buf + i, &s, 8);
    }
    if (i < size) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        memcpy(buf + i, &s, size - i);
    }
}

static uint64_t checksum(const unsigned char *buf, size_t size)
{
    uint64_t a = 1, b = 0; /* Fletcher-like over 64-bit words, then the tail */
    size_t i = 0;
    for (; i + 8 <= size; i += 8) {
        uint64_t w;
        memcpy(&w, buf + i, 8);
        a += w ^ (i * 0x9e3779b97f4a7c15ULL);
        b += a;
    }
    for (; i < size; i++) {
        a += buf[i] + 1;
        b += a;
    }
    return mix64(a ^ (b << 1) ^ size);
}

static unsigned char *g_expect; /* scratch for expected payloads */

/* verify a received payload; returns 0 if fine */
static int verify(const unsigned char *buf, size_t got, size_t size, int src, int dst, int iter, const char *what)
{
    if (got != size) {
        report("%s: %d->%d iter %d: received %zu bytes, expected %zu", what, src, dst, iter, got, size);
        return 1;
    }
    if (g_corrupt && size > 0) ((unsigned char *)buf)[size / 2] ^= 0x40;
    fill(g_expect, size, src, dst, iter);
    if (checksum(buf, size) == checksum(g_expect, size)) return 0;
    size_t bad = 0, first = (size_t)-1;
    for (size_t i = 0; i < size; i++)
        if (buf[i] != g_expect[i]) {
            if (first == (size_t)-1) first = i;
            bad++;
        }
    report("%s: %d->%d size %zu iter %d: checksum mismatch, %zu bad bytes, first at offset %zu "
           "(got 0x%02x want 0x%02x)",
           what, src, dst, size, iter, bad, first, first < size ? buf[first] : 0,
           first < size ? g_expect[first] : 0);
    return 1;
}

/* ------------------------------------------------------------------------------------------- layout */
static void check_layout(const char *expect)
{
    char host[HOSTLEN] = {0};
    gethostname(host, sizeof host - 1);
    char *all = calloc((size_t)g_size, HOSTLEN);
    MPI_Allgather(host, HOSTLEN, MPI_CHAR, all, HOSTLEN, MPI_CHAR, MPI_COMM_WORLD);

    int same = 0;
    for (int r = 0; r < g_size; r++)
        if (strcmp(all + (size_t)r * HOSTLEN, host) == 0) same++;

    MPI_Comm shm;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_rank, MPI_INFO_NULL, &shm);
    int lsize, lrank;
    MPI_Comm_size(shm, &lsize);
    MPI_Comm_rank(shm, &lrank);
    if (lsize != same)
        report("layout: MPI_COMM_TYPE_SHARED size %d but %d ranks run on host %s", lsize, same, host);
    /* every member of my shared communicator is on my host */
    char *loc = calloc((size_t)lsize, HOSTLEN);
    MPI_Allgather(host, HOSTLEN, MPI_CHAR, loc, HOSTLEN, MPI_CHAR, shm);
    for (int r = 0; r < lsize; r++)
        if (strcmp(loc + (size_t)r * HOSTLEN, host) != 0)
            report("layout: shared-memory peer %d is on %s, I am on %s", r, loc + (size_t)r * HOSTLEN, host);
    free(loc);
    /* Open MPI's local rank/size agree with the shared communicator */
    const char *elr = getenv("OMPI_COMM_WORLD_LOCAL_RANK"), *els = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (els && atoi(els) != lsize) report("layout: OMPI_COMM_WORLD_LOCAL_SIZE=%s, shared size %d", els, lsize);
    if (elr && (atoi(elr) < 0 || atoi(elr) >= lsize))
        report("layout: OMPI_COMM_WORLD_LOCAL_RANK=%s out of range (shared size %d)", elr, lsize);
    int lr = elr ? atoi(elr) : lrank, *lranks = calloc((size_t)lsize, sizeof(int));
    MPI_Allgather(&lr, 1, MPI_INT, lranks, 1, MPI_INT, shm);
    for (int i = 0; i < lsize; i++)
        for (int j = i + 1; j < lsize; j++)
            if (lranks[i] == lranks[j]) report("layout: two ranks on %s have local rank %d", host, lranks[i]);
    free(lranks);
    MPI_Comm_free(&shm);

    if (expect && *expect) {
        /* expect = "hostA:n,hostB:m": exactly these hosts with these counts */
        char *dup = strdup(expect), *save = NULL;
        int total = 0;
        for (char *tok = strtok_r(dup, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            char *colon = strrchr(tok, ':');
            int n = colon ? atoi(colon + 1) : 1;
            if (colon) *colon = 0;
            int cnt = 0;
            for (int r = 0; r < g_size; r++)
                if (strcmp(all + (size_t)r * HOSTLEN, tok) == 0) cnt++;
            if (cnt != n) report("layout: expected %d ranks on %s, found %d", n, tok, cnt);
            total += n;
        }
        if (total != g_size) report("layout: expected %d ranks in total, job has %d", total, g_size);
        free(dup);
    }
    if (g_rank == 0 && !g_quiet) {
        printf("allpairs: layout");
        for (int r = 0; r < g_size; r++) {
            int first = 1, cnt = 0;
            for (int q = 0; q < g_size; q++)
                if (strcmp(all + (size_t)q * HOSTLEN, all + (size_t)r * HOSTLEN) == 0) {
                    if (q < r) first = 0;
                    cnt++;
                }
            if (first) printf(" %s=%d", all + (size_t)r * HOSTLEN, cnt);
        }
        printf("\n");
        fflush(stdout);
    }
    free(all);
}

/* --------------------------------------------------------------------------------------------- pairs */
static size_t g_sizes[64];
static int g_nsizes;

static void build_sizes(size_t max)
{
    static const size_t odd[] = {3, 7, 13, 100, 1000, 4095, 4097, 12345, 65535, 65537, 1000003};
    g_nsizes = 0;
    g_sizes[g_nsizes++] = 0;
    for (size_t s = 1; s <= max; s <<= 1) g_sizes[g_nsizes++] = s;
    for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++)
        if (odd[i] <= max) g_sizes[g_nsizes++] = odd[i];
    if (max > 8 && max - 1 != 4095 && max - 1 != 65535) g_sizes[g_nsizes++] = max - 1;
}

static long long run_pairs(int iters, size_t max, unsigned char *sbuf, unsigned char *rbuf)
{
    long long bytes = 0;
    for (int k = 1; k < g_size; k++) {
        int to = (g_rank + k) % g_size, from = (g_rank - k + g_size) % g_size;
        for (int si = 0; si < g_nsizes; si++) {
            size_t size = g_sizes[si];
            /* small messages several times, big ones once or twice */
            int n = size <= 65536 ? iters * 2 : iters;
            for (int it = 0; it < n; it++) {
                fill(sbuf, size, g_rank, to, it);
                memset(rbuf, 0xA5, size < max ? size + 1 : max);
                MPI_Status st;
                MPI_Sendrecv(sbuf, (int)size, MPI_BYTE, to, TAG_PAIR, rbuf, (int)max, MPI_BYTE, from, TAG_PAIR,
                             MPI_COMM_WORLD, &st);
                int got;
                MPI_Get_count(&st, MPI_BYTE, &got);
                if (st.MPI_SOURCE != from || st.MPI_TAG != TAG_PAIR)
                    report("pairs: message from %d tag %d, expected %d tag %d", st.MPI_SOURCE, st.MPI_TAG, from,
                           TAG_PAIR);
                verify(rbuf, (size_t)got, size, from, g_rank, it, "pairs");
                if (size < max && rbuf[size] != 0xA5)
                    report("pairs: %d->%d size %zu: wrote past the message end", from, g_rank, size);
                bytes += (long long)size;
            }
        }
    }
    return bytes;
}

/* -------------------------------------------------------------------------------------------- storm */
#define STORM_MAX_SIZE 262144
static size_t g_max_size; /* --max-size: no message of the storm is larger either */

static size_t storm_size(int src, int dst, int j)
{
    static const size_t s[] = {0, 1, 8, 63, 512, 1500, 4096, 9000, 16384, 65536, 70001, STORM_MAX_SIZE};
    const size_t size = s[(size_t)(src * 7 + dst * 3 + j) % (sizeof s / sizeof s[0])];
    return size < g_max_size ? size : g_max_size;
}

static long long run_storm(int nmsg, int nany, int round)
{
    /* ANY_SOURCE receives of one round must not match another round's messages: tag per round */
    const int tag_any = TAG_ANY + round;
    int peers = g_size - 1;
    if (peers == 0) return 0;
    size_t maxs = STORM_MAX_SIZE < g_max_size ? STORM_MAX_SIZE : g_max_size;
    int nsend = peers * (nmsg + nany), nrecv = peers * nmsg + peers * nany;
    MPI_Request *req = malloc(sizeof(MPI_Request) * (size_t)(nsend + nrecv));
    MPI_Status *st = malloc(sizeof(MPI_Status) * (size_t)(nsend + nrecv));
    unsigned char **sb = calloc((size_t)nsend, sizeof *sb), **rb = calloc((size_t)nrecv, sizeof *rb);
    size_t *rsize = calloc((size_t)nrecv, sizeof *rsize);
    int *rsrc = calloc((size_t)nrecv, sizeof *rsrc), *rj = calloc((size_t)nrecv, sizeof *rj);
    long long bytes = 0;
    int nr = 0, ns = 0;

    /* receives first: specific source + distinct tags (posted in a scrambled order), then ANY_SOURCE */
    for (int j = nmsg - 1; j >= 0; j--)
        for (int k = 1; k < g_size; k++) {
            int src = (g_rank + k) % g_size;
            size_t size = storm_size(src, g_rank, j);
            rb[nr] = malloc(size + 1);
            rsize[nr] = size;
            rsrc[nr] = src;
            rj[nr] = j;
            MPI_Irecv(rb[nr], (int)size, MPI_BYTE, src, TAG_STORM_BASE + j, MPI_COMM_WORLD, &req[nr]);
            nr++;
        }
    int any_first = nr;
    for (int i = 0; i < peers * nany; i++) {
        rb[nr] = malloc(maxs + 1);
        rsrc[nr] = -1;
        MPI_Irecv(rb[nr], (int)maxs, MPI_BYTE, MPI_ANY_SOURCE, tag_any, MPI_COMM_WORLD, &req[nr]);
        nr++;
    }
    /* sends to every peer, interleaved */
    for (int j = 0; j < nmsg + nany; j++)
        for (int k = 1; k < g_size; k++) {
            int dst = (g_rank - k + g_size) % g_size;
            int is_any = j >= nmsg;
            int jj = is_any ? j - nmsg : j;
            size_t size = is_any ? storm_size(g_rank, dst, jj + 5) : storm_size(g_rank, dst, jj);
            sb[ns] = malloc(size + 1);
            fill(sb[ns], size, g_rank, dst, is_any ? 1000 + jj : jj);
            MPI_Isend(sb[ns], (int)size, MPI_BYTE, dst, is_any ? tag_any : TAG_STORM_BASE + jj, MPI_COMM_WORLD,
                      &req[nr + ns]);
            bytes += (long long)size;
            ns++;
        }
    MPI_Waitall(nr + ns, req, st);

    for (int i = 0; i < any_first; i++) {
        int got;
        MPI_Get_count(&st[i], MPI_BYTE, &got);
        if (st[i].MPI_SOURCE != rsrc[i]) report("storm: expected source %d, got %d", rsrc[i], st[i].MPI_SOURCE);
        verify(rb[i], (size_t)got, rsize[i], rsrc[i], g_rank, rj[i], "storm");
    }
    /* ANY_SOURCE: messages of one source match in send order, so the j-th match from src is its j-th send */
    int *next = calloc((size_t)g_size, sizeof(int));
    for (int i = any_first; i < nr; i++) {
        int src = st[i].MPI_SOURCE, got;
        MPI_Get_count(&st[i], MPI_BYTE, &got);
        if (src < 0 || src >= g_size || src == g_rank) {
            report("storm: ANY_SOURCE receive got source %d", src);
            continue;
        }
        int jj = next[src]++;
        verify(rb[i], (size_t)got, storm_size(src, g_rank, jj + 5), src, g_rank, 1000 + jj, "storm-any");
    }
    for (int s = 0; s < g_size; s++)
        if (s != g_rank && next[s] != nany)
            report("storm: %d ANY_SOURCE messages from %d, expected %d", next[s], s, nany);
    free(next);
    for (int i = 0; i < nr; i++) free(rb[i]);
    for (int i = 0; i < ns; i++) free(sb[i]);
    free(rb); free(sb); free(rsize); free(rsrc); free(rj); free(req); free(st);
    return bytes;
}

/* --------------------------------------------------------------------------------------------- main */
int main(int argc, char **argv)
{
    const char *expect = NULL;
    size_t max = 4u << 20;
    int iters = 1, storm = 16, rounds = 2, pvars = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--expect") && i + 1 < argc) expect = argv[++i];
        else if (!strcmp(argv[i], "--max-size") && i + 1 < argc) max = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--storm") && i + 1 < argc) storm = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--quiet")) g_quiet = 1;
        else if (!strcmp(argv[i], "--pvars")) pvars = 1;
        else if (!strcmp(argv[i], "--selftest-corrupt")) g_corrupt = 1;
        else {
            fprintf(stderr, "usage: allpairs [--expect HOST:N,...] [--max-size BYTES] [--iters N] "
                            "[--storm N] [--rounds N] [--quiet] [--pvars]\n");
            return 2;
        }
    }
    /* MPI_T makes the components' variables visible before MPI_Init: handles allocated now count everything
     * (continuous counters read what happened since their handle was allocated). */
    xrc_pvars_t pv;
    unsigned long long *values = NULL;
    int provided;
    if (pvars && (MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS || xrc_pvars_open(&pv) != 0 ||
                  (values = calloc((size_t)pv.count + 1, sizeof(*values))) == NULL)) {
        fprintf(stderr, "allpairs: cannot read btl xrc's MPI_T variables\n");
        return 1;
    }
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    double t0 = MPI_Wtime();

    check_layout(expect);

    g_max_size = max;
    build_sizes(max);
    unsigned char *sbuf = malloc(max + 1), *rbuf = malloc(max + 1);
    g_expect = malloc(max + 1);
    long long bytes = run_pairs(iters, max, sbuf, rbuf);
    for (int r = 0; r < rounds; r++) bytes += run_storm(storm, storm / 2, r);
    MPI_Barrier(MPI_COMM_WORLD);
    double t = MPI_Wtime() - t0;
    if (pvars) { /* at a cut of the job no message crosses, so that the ranks' counts add up */
        if (xrc_pvars_snapshot(&pv, values) != 0) MPI_Abort(MPI_COMM_WORLD, 1);
        xrc_pvars_print(stdout, &pv, values, g_rank);
        free(values);
        xrc_pvars_close(&pv);
        MPI_T_finalize(); /* before MPI_Finalize: the other order crashes Open MPI 4.1 (open-mpi/ompi#11485) */
    }

    long long tot_err = 0, tot_bytes = 0;
    MPI_Reduce(&g_errors, &tot_err, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Reduce(&bytes, &tot_bytes, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Bcast(&tot_err, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
    if (g_rank == 0) {
        printf("allpairs: %s pairs=%d bytes=%lld errors=%lld ranks=%d sizes=%d time=%.2fs\n",
               tot_err ? "FAILED" : "OK", g_size * (g_size - 1), tot_bytes, tot_err, g_size, g_nsizes, t);
        fflush(stdout);
    }
    free(sbuf); free(rbuf); free(g_expect);
    MPI_Finalize();
    return tot_err ? 1 : 0;
}
