// SPDX-License-Identifier: BSD-3-Clause
/* btl xrc's MPI_T performance variables: every expected variable is there (class, type, description), the
 * counters do not move without traffic and move as traffic moves, and what every rank counts adds up across the
 * job (each message sent through a ring or an SRQ was received through one, byte for byte; every eager ring
 * request was answered). Traffic: 64 eager messages of 1 KiB and one 1 MiB message (RDMA) between every pair,
 * and with --atomics a fetch-and-op to every peer (osc/rdma over xrc).
 *   usage: pvars [--onnode-xrc] [--atomics] [--print]
 *     --onnode-xrc  xrc carries on-node traffic too (no vader): on-node peers count, one loopback connection
 *     --atomics     expect atomics (run with osc rdma, osc_rdma_btls xrc: every rank then also has the loopback
 *                   connection, through which osc/rdma reaches its own window)
 *     --print       each rank prints what it counted during the traffic ("pvar RANK NAME VALUE")
 * Prints "pvars: OK ..." and exits 0 only when every check passed. */
#include "xrc_pvars.h"

#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_rank;
static long g_errors;

static void report(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "pvars: rank %d: ERROR: ", g_rank);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    ++g_errors;
}

static const struct {
    const char *name;
    int var_class;
} kExpected[] = {
    {"ring_sends", MPI_T_PVAR_CLASS_COUNTER},
    {"srq_sends", MPI_T_PVAR_CLASS_COUNTER},
    {"srq_sends_ring_active", MPI_T_PVAR_CLASS_COUNTER},
    {"ring_receives", MPI_T_PVAR_CLASS_COUNTER},
    {"srq_receives", MPI_T_PVAR_CLASS_COUNTER},
    {"bytes_sent", MPI_T_PVAR_CLASS_COUNTER},
    {"bytes_received", MPI_T_PVAR_CLASS_COUNTER},
    {"credit_writes", MPI_T_PVAR_CLASS_COUNTER},
    {"rdma_writes", MPI_T_PVAR_CLASS_COUNTER},
    {"rdma_bytes_written", MPI_T_PVAR_CLASS_COUNTER},
    {"rdma_reads", MPI_T_PVAR_CLASS_COUNTER},
    {"rdma_bytes_read", MPI_T_PVAR_CLASS_COUNTER},
    {"atomics", MPI_T_PVAR_CLASS_COUNTER},
    {"eager_ring_requests", MPI_T_PVAR_CLASS_COUNTER},
    {"eager_rings_granted", MPI_T_PVAR_CLASS_COUNTER},
    {"eager_rings_refused", MPI_T_PVAR_CLASS_COUNTER},
    {"eager_rings_used", MPI_T_PVAR_CLASS_COUNTER},
    {"eager_ring_refusals", MPI_T_PVAR_CLASS_COUNTER},
    {"eager_ring_resumes_asked", MPI_T_PVAR_CLASS_COUNTER},
    {"eager_rings_resumed", MPI_T_PVAR_CLASS_COUNTER},
    {"eager_ring_resumes_agreed", MPI_T_PVAR_CLASS_COUNTER},
    {"eager_ring_resumes_refused", MPI_T_PVAR_CLASS_COUNTER},
    {"eager_ring_skips", MPI_T_PVAR_CLASS_COUNTER},
    {"connections_opened", MPI_T_PVAR_CLASS_COUNTER},
    {"connections_closed", MPI_T_PVAR_CLASS_COUNTER},
    {"connections_open", MPI_T_PVAR_CLASS_LEVEL},
    {"connection_attempts", MPI_T_PVAR_CLASS_COUNTER},
    {"connection_failures", MPI_T_PVAR_CLASS_COUNTER},
    {"reconnections", MPI_T_PVAR_CLASS_COUNTER},
    {"evictions", MPI_T_PVAR_CLASS_COUNTER},
    {"ini_qps", MPI_T_PVAR_CLASS_LEVEL},
    {"ini_qps_peak", MPI_T_PVAR_CLASS_HIGHWATERMARK},
    {"tgt_qps", MPI_T_PVAR_CLASS_LEVEL},
    {"tgt_handles", MPI_T_PVAR_CLASS_LEVEL},
    {"cm_datagrams_sent", MPI_T_PVAR_CLASS_COUNTER},
    {"cm_datagrams_received", MPI_T_PVAR_CLASS_COUNTER},
    {"cm_retransmissions", MPI_T_PVAR_CLASS_COUNTER},
    {"cm_rejected", MPI_T_PVAR_CLASS_COUNTER},
    {"cm_duplicates", MPI_T_PVAR_CLASS_COUNTER},
    {"cm_stale", MPI_T_PVAR_CLASS_COUNTER},
    {"cm_rotations", MPI_T_PVAR_CLASS_COUNTER},
    {"srq_reposts", MPI_T_PVAR_CLASS_COUNTER},
    {"srq_limit_events", MPI_T_PVAR_CLASS_COUNTER},
    {"async_events", MPI_T_PVAR_CLASS_COUNTER},
    {"rnr_retry_exceeded", MPI_T_PVAR_CLASS_COUNTER},
    {"send_errors", MPI_T_PVAR_CLASS_COUNTER},
    {"port_downs", MPI_T_PVAR_CLASS_COUNTER},
    {"port_ups", MPI_T_PVAR_CLASS_COUNTER},
    {"port_down_ms", MPI_T_PVAR_CLASS_COUNTER},
    {"lid_changes", MPI_T_PVAR_CLASS_COUNTER},
    {"peer_lid_changes", MPI_T_PVAR_CLASS_COUNTER},
    {"paths_migrated", MPI_T_PVAR_CLASS_COUNTER},
    {"failovers", MPI_T_PVAR_CLASS_COUNTER},
    {"failbacks", MPI_T_PVAR_CLASS_COUNTER},
    {"failover_sends", MPI_T_PVAR_CLASS_COUNTER},
    {"replays_dropped", MPI_T_PVAR_CLASS_COUNTER},
    {"replays_delivered", MPI_T_PVAR_CLASS_COUNTER},
    {"registered_bytes", MPI_T_PVAR_CLASS_LEVEL},
    {"registered_bytes_peak", MPI_T_PVAR_CLASS_HIGHWATERMARK},
};
enum { kNumExpected = sizeof(kExpected) / sizeof(kExpected[0]) };

static xrc_pvars_t g_pv;
static int g_idx[kNumExpected];

/* A snapshot of every expected variable, by kExpected index. */
typedef struct {
    unsigned long long v[kNumExpected];
} snap_t;

static int find(const char *name) {
    for (int i = 0; i < kNumExpected; ++i)
        if (strcmp(kExpected[i].name, name) == 0) return i;
    fprintf(stderr, "pvars: no such variable %s in the test\n", name);
    exit(2);
}
#define V(s, name) ((s).v[find(name)])

static unsigned long long *g_all; /* every btl_xrc_ variable, by the library's index */

static void from_all(snap_t *s) {
    for (int i = 0; i < kNumExpected; ++i) s->v[i] = g_all[g_idx[i]];
}
static void take(snap_t *s) {
    if (xrc_pvars_read(&g_pv, g_all) != 0) MPI_Abort(MPI_COMM_WORLD, 1);
    from_all(s);
}
/* All ranks at once, at a cut no message crosses (see xrc_pvars_snapshot). */
static void snapshot(snap_t *s) {
    if (xrc_pvars_snapshot(&g_pv, g_all) != 0) MPI_Abort(MPI_COMM_WORLD, 1);
    from_all(s);
}

/* No traffic to or from this rank: progress the library for a while, nothing may change. */
static void idle_window(void *when) {
    snap_t a, b;
    take(&a);
    for (int i = 0; i < 20000; ++i) {
        int flag;
        MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
        if (flag) {
            report("a message arrived while idle (%s)", (const char *)when);
            break;
        }
    }
    take(&b);
    for (int i = 0; i < kNumExpected; ++i)
        if (a.v[i] != b.v[i])
            report("%s moved without traffic (%s): %llu -> %llu", kExpected[i].name, (const char *)when, a.v[i],
                   b.v[i]);
}
static void idle_unchanged(const char *when) { xrc_pvars_in_turn(idle_window, (void *)when); }

static void at_least(const char *name, unsigned long long got, unsigned long long want) {
    if (got < want) report("%s moved by %llu during the traffic, expected at least %llu", name, got, want);
}
static void equal_sum(const char *a, unsigned long long va, const char *b, unsigned long long vb) {
    if (va != vb) {
        fprintf(stderr, "pvars: ERROR: summed over the job, %s = %llu but %s = %llu\n", a, va, b, vb);
        ++g_errors;
    }
}

int main(int argc, char **argv) {
    int onnode = 0, atomics = 0, print = 0, provided;
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--onnode-xrc")) onnode = 1;
        else if (!strcmp(argv[i], "--atomics")) atomics = 1;
        else if (!strcmp(argv[i], "--print")) print = 1;
        else {
            fprintf(stderr, "usage: pvars [--onnode-xrc] [--atomics] [--print]\n");
            return 2;
        }
    }
    /* Handles allocated before MPI_Init (MPI_T registers the components' variables) count the wire-up too. */
    if (MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS || xrc_pvars_open(&g_pv) != 0) {
        fprintf(stderr, "pvars: cannot open btl xrc's MPI_T variables before MPI_Init\n");
        return 1;
    }
    MPI_Init(&argc, &argv);
    int size, local_size, local_rank, leaders, is_leader;
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_size(node, &local_size);
    MPI_Comm_rank(node, &local_rank);
    is_leader = local_rank == 0;
    MPI_Allreduce(&is_leader, &leaders, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    const int remote = size - local_size;                         /* peers on other nodes */
    const int xpeers = remote + (onnode ? local_size - 1 : 0);   /* peers xrc carries traffic to */

    g_all = calloc((size_t)g_pv.count + 1, sizeof(*g_all));
    for (int i = 0; i < kNumExpected; ++i) {
        g_idx[i] = xrc_pvars_index(&g_pv, kExpected[i].name);
        if (g_idx[i] < 0) {
            fprintf(stderr, "pvars: rank %d: no MPI_T variable %s%s\n", g_rank, XRC_PVARS_PREFIX, kExpected[i].name);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        if (g_pv.classes[g_idx[i]] != kExpected[i].var_class)
            report("%s has class %d, expected %d", kExpected[i].name, g_pv.classes[g_idx[i]], kExpected[i].var_class);
    }
    if (g_pv.count != kNumExpected) report("%d btl_xrc_ variables, the test knows %d", g_pv.count, kNumExpected);
    MPI_Barrier(MPI_COMM_WORLD);
    idle_unchanged("after MPI_Init");

    snap_t before, after;
    snapshot(&before);
    if (V(before, "registered_bytes") == 0) report("registered_bytes is 0 after MPI_Init");
    if (V(before, "registered_bytes_peak") < V(before, "registered_bytes"))
        report("%s %llu is below the level %llu", "registered_bytes_peak", V(before, "registered_bytes_peak"),
               V(before, "registered_bytes"));

    /* Traffic: every pair, both ways. */
    enum { kMessages = 64, kSmall = 1024, kLarge = 1 << 20 };
    char *small_out = malloc(kSmall), *small_in = malloc(kSmall), *large_out = malloc(kLarge),
         *large_in = malloc(kLarge);
    memset(small_out, g_rank, kSmall);
    memset(large_out, g_rank + 1, kLarge);
    for (int step = 1; step < size; ++step) {
        const int to = (g_rank + step) % size, from = (g_rank - step + size) % size;
        for (int m = 0; m < kMessages; ++m) {
            MPI_Sendrecv(small_out, kSmall, MPI_BYTE, to, m, small_in, kSmall, MPI_BYTE, from, m, MPI_COMM_WORLD,
                         MPI_STATUS_IGNORE);
            if (small_in[kSmall - 1] != (char)from) ++g_errors;
        }
        MPI_Sendrecv(large_out, kLarge, MPI_BYTE, to, 99, large_in, kLarge, MPI_BYTE, from, 99, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
        if (large_in[0] != (char)(from + 1) || large_in[kLarge - 1] != (char)(from + 1)) ++g_errors;
    }
    if (atomics) {
        /* MPI_Win_create on private memory: osc/rdma reaches every peer through the BTL (an MPI_Win_allocate
         * window would be shared memory on the node, with CPU atomics) */
        MPI_Win win;
        long long *base = malloc(sizeof(long long));
        *base = 0;
        MPI_Win_create(base, sizeof(long long), sizeof(long long), MPI_INFO_NULL, MPI_COMM_WORLD, &win);
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Win_lock_all(0, win);
        for (int peer = 0; peer < size; ++peer) {
            long long one = 1, old;
            if (peer == g_rank) continue;
            MPI_Fetch_and_op(&one, &old, MPI_LONG_LONG, peer, 0, MPI_SUM, win);
            MPI_Win_flush(peer, win);
        }
        MPI_Win_unlock_all(win);
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Win_free(&win);
        if (*base != size - 1) report("the window holds %lld after %d fetch-and-adds of 1", *base, size - 1);
        free(base);
    }
    snapshot(&after);

    snap_t d;
    for (int i = 0; i < kNumExpected; ++i) d.v[i] = after.v[i] - before.v[i];
    if (print) {
        for (int i = 0; i < kNumExpected; ++i)
            if (kExpected[i].var_class == MPI_T_PVAR_CLASS_COUNTER)
                printf("pvar %d %s %llu\n", g_rank, kExpected[i].name, d.v[i]);
        fflush(stdout);
    }
    const unsigned long long want = (unsigned long long)kMessages * (unsigned long long)xpeers;
    at_least("ring_sends+srq_sends", V(d, "ring_sends") + V(d, "srq_sends"), want);
    at_least("ring_receives+srq_receives", V(d, "ring_receives") + V(d, "srq_receives"), want);
    at_least("bytes_sent", V(d, "bytes_sent"), want * kSmall);
    at_least("bytes_received", V(d, "bytes_received"), want * kSmall);
    at_least("srq_reposts", V(d, "srq_reposts"), V(d, "srq_receives"));
    /* ob1 moves the bulk of each large message by RDMA (RGET: the receiver reads) */
    at_least("rdma_bytes_read+rdma_bytes_written", V(d, "rdma_bytes_read") + V(d, "rdma_bytes_written"),
             (unsigned long long)xpeers * (kLarge / 2));
    at_least("rdma_reads+rdma_writes", V(d, "rdma_reads") + V(d, "rdma_writes"), (unsigned long long)xpeers);
    /* 64 sends to a peer pass btl_xrc_eager_rdma_threshold (16): each asks for a ring, and uses it if granted */
    at_least("eager_ring_requests", V(d, "eager_ring_requests"), xpeers > 8 ? 8 : (unsigned long long)xpeers);
    if (V(d, "eager_rings_used") > 0) at_least("ring_sends", V(d, "ring_sends"), 1);
    if (atomics) at_least("atomics", V(d, "atomics"), (unsigned long long)(size - 1));
    const char *none[] = {"send_errors", "rnr_retry_exceeded", "connections_closed", "srq_limit_events",
                          "connection_failures", "evictions", "cm_rejected", "cm_stale", "cm_rotations", "port_downs",
                          "port_ups", "reconnections", "failbacks"};
    for (unsigned i = 0; i < sizeof(none) / sizeof(none[0]); ++i)
        if (V(d, none[i]) != 0) report("%s moved by %llu during error-free traffic", none[i], V(d, none[i]));
    /* Connections: one INI QP per other node, one TGT QP per remote sender, the loopback pair when xrc carries
     * on-node traffic (osc/rdma over xrc reaches this rank's own window through it too); counted since before
     * MPI_Init, none closed before MPI_Finalize. */
    const int loopback = (onnode && local_size > 1) || atomics;
    const unsigned long long conns = (unsigned long long)(leaders - 1) + (unsigned long long)remote + loopback;
    if (V(after, "connections_opened") != conns || V(after, "connections_open") != conns ||
        V(after, "connections_closed") != 0)
        report("connections opened %llu, open %llu, closed %llu; expected %llu open (INI QPs per other node + TGT QPs "
               "per remote sender + loopback), none closed",
               V(after, "connections_opened"), V(after, "connections_open"), V(after, "connections_closed"), conns);
    if (V(after, "registered_bytes_peak") < V(after, "registered_bytes"))
        report("%s %llu is below the level %llu", "registered_bytes_peak", V(after, "registered_bytes_peak"),
               V(after, "registered_bytes"));

    /* Across the job: what was sent on a path was received on it. */
    snap_t sum;
    MPI_Allreduce(d.v, sum.v, kNumExpected, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    equal_sum("ring_sends", V(sum, "ring_sends"), "ring_receives", V(sum, "ring_receives"));
    equal_sum("srq_sends", V(sum, "srq_sends"), "srq_receives", V(sum, "srq_receives"));
    equal_sum("bytes_sent", V(sum, "bytes_sent"), "bytes_received", V(sum, "bytes_received"));
    equal_sum("eager_ring_requests", V(sum, "eager_ring_requests"), "eager_rings_granted+eager_rings_refused",
              V(sum, "eager_rings_granted") + V(sum, "eager_rings_refused"));
    equal_sum("eager_rings_used", V(sum, "eager_rings_used"), "eager_rings_granted", V(sum, "eager_rings_granted"));
    equal_sum("eager_ring_refusals", V(sum, "eager_ring_refusals"), "eager_rings_refused",
              V(sum, "eager_rings_refused"));
    equal_sum("eager_rings_resumed", V(sum, "eager_rings_resumed"), "eager_ring_resumes_agreed",
              V(sum, "eager_ring_resumes_agreed"));

    idle_unchanged("after the traffic");

    long total = 0;
    MPI_Reduce(&g_errors, &total, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (g_rank == 0) {
        printf("pvars: %s ranks=%d nodes=%d variables=%d messages=%llu bytes=%llu rdma_bytes=%llu "
               "connections=%llu errors=%ld\n",
               total ? "FAILED" : "OK", size, leaders, g_pv.count, V(sum, "ring_sends") + V(sum, "srq_sends"),
               V(sum, "bytes_sent"), V(sum, "rdma_bytes_read") + V(sum, "rdma_bytes_written"), conns, total);
        fflush(stdout);
    }
    xrc_pvars_close(&g_pv);
    free(g_all);
    free(small_out);
    free(small_in);
    free(large_out);
    free(large_in);
    MPI_Comm_free(&node);
    MPI_T_finalize();  /* before MPI_Finalize: the other order crashes Open MPI 4.1 (open-mpi/ompi#11485) */
    MPI_Finalize();
    return total ? 1 : 0;
}
