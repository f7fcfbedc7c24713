/* SPDX-License-Identifier: BSD-3-Clause
 * chaos_work: the workload of the randomized fault campaign (tests/chaos/chaos, docs/chaos.md). Every rank runs T
 * threads (MPI_THREAD_MULTIPLE when T > 1), each on its own duplicate of MPI_COMM_WORLD (so a thread's traffic is
 * a stream of its own: MPI orders messages per sender, communicator and tag), round after round:
 *
 *   point-to-point: in round r thread t exchanges with W peers, the offsets k of (r, t) (the same on every rank):
 *     it sends to rank+k and receives from rank-k a batch of 5 numbered messages each. Message number s of a stream
 *     (sender, receiver, thread) has a kind and a size drawn from (seed, sender, receiver, thread, s), so the
 *     receiver knows what to expect without being told:
 *       INLINE  16..112 B contiguous                     (the BTL's inline sends)
 *       EAGER   128..12200 B contiguous                  (eager: SRQ, then the eager RDMA ring)
 *       VEC     16..256 KiB sent from a strided datatype (ob1 copies it out in max_send_size fragments: the large
 *               SRQ class)
 *       VECR    16..256 KiB contiguous, received into a strided datatype (ob1's RGET falls back to copy-in/out)
 *       BULK    64 KiB..--large contiguous               (RDMA rendezvous: RGET with the BTL's default flags, RPUT
 *               when the job drops GET from btl_xrc_flags)
 *     Every byte is a mix64 pattern of the message's coordinates; the first 16 bytes name sender, receiver,
 *     thread, kind and number. The receiver checks that every number arrives once and in order (lost, dup,
 *     order), the size and every byte (corrupt; for VECR also that the gaps of the datatype stay untouched);
 *   one-sided (--onesided 1): each thread has its own window; in round r it puts a block (8..8192 B) into its
 *     slot at each of the W peers it sent to (passive target: lock, put, unlock), adds 1 with MPI_Fetch_and_op
 *     (MPI_SUM) to the counter of rank r mod N, then a barrier; each rank checks the blocks put into it this round.
 *     At the end every counter must hold exactly the number of additions made to it, and the values fetched from
 *     each counter must be 0, 1, ..., n-1 each exactly once (an addition doubled or lost shows as a gap or a
 *     repeat: sum).
 *
 * Rank 0's thread 0 prints "chaos: phase R" as round R starts, so that the campaign driver injects its faults at
 * points of the job's own progress. The job runs at least --min-rounds rounds and, with --stop-file, until that
 * file exists (rank 0 decides per thread, the decision is broadcast on the thread's communicator).
 *
 * --busy R:S:P  rank R makes no MPI call for S seconds at the start of round P (all its threads; P 0: before any
 *               traffic, so that on demand every connection to it is asked for while it computes)
 * --late R:S    rank R enters MPI_Finalize S seconds after the others
 * --inject K:R  the checker's own test: rank R sends one message of round 1 again (dup), skips a number (lost),
 *               swaps two (order), flips a bit of one (corrupt), or adds to a counter once more (sum)
 *
 * Output: every violation as soon as it is seen, "chaos: rank R VIOLATION KIND ..." (KIND lost, dup, order,
 * corrupt, sum); at the end "chaos: rank R OK|VIOLATION msgs=M bytes=B puts=P fops=F rounds=..." per rank, then
 * from rank 0 "chaos: verdict OK|VIOLATION ranks=N threads=T msgs=M bytes=B violations=V", and per rank
 * "chaos: rank R finalize S s". The exit status is 1 when any rank saw a violation. */
#include "mix64.h"

#include <errno.h>
#include <mpi.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum kind { INLINE, EAGER, VEC, VECR, BULK, NKINDS };
static const char *const kKindName[NKINDS] = {"inline", "eager", "vec", "vecr", "bulk"};
enum { BATCH = 5 };                      /* messages per stream and round */
enum { HEADER = 16 };                    /* bytes naming the message */
enum { BLOCK = 64, STRIDE = 96 };        /* the strided datatype: 64 bytes of data every 96 */
enum { SLOT = 8192 };                    /* a window slot */
static const unsigned char kCanary = 0xa5; /* the gaps of a strided receive buffer */
static const uint64_t kMagic = 0xc4a0;
enum { V_LOST, V_DUP, V_ORDER, V_CORRUPT, V_SUM, NV };
static const char *const kViolationName[NV] = {"lost", "dup", "order", "corrupt", "sum"};

/* what the command line chose */
static uint64_t seed_;
static int threads_ = 1, width_ = 1, min_rounds_ = 4, max_rounds_ = 100000, onesided_ = 1;
static long large_ = 1 << 20;
static const char *stop_file_;
static int busy_rank_ = -1, busy_phase_ = -1, late_rank_ = -1;
static double busy_seconds_, late_seconds_;
/* --inject KIND:RANK: the checker's own test (make check): rank RANK's thread 0 misbehaves once, in round 1 */
enum inject { INJECT_NONE, INJECT_DUP, INJECT_LOST, INJECT_ORDER, INJECT_CORRUPT, INJECT_SUM };
static const char *const kInjectName[] = {"none", "dup", "lost", "order", "corrupt", "sum"};
static enum inject inject_;
static int inject_rank_ = -1;

static int rank_, size_;
static MPI_Datatype block_type_; /* BLOCK bytes with an extent of STRIDE */
static pthread_barrier_t busy_barrier_;
static pthread_mutex_t print_lock_ = PTHREAD_MUTEX_INITIALIZER;
static long printed_;

struct worker {
    int index;
    MPI_Comm comm;
    MPI_Win win;
    unsigned char *base; /* the window: 2 * size_ slots (by round parity), then the counter */
    uint64_t *next_out;  /* per receiver: the number of the next message */
    uint64_t *next_in;   /* per sender: the number expected next */
    uint64_t (*gaps)[8]; /* per sender: numbers skipped (a later one arrived first), to tell order from lost */
    int *ngaps;
    int64_t *fetched; /* per round: what Fetch_and_op returned */
    long rounds, msgs, bytes, puts, fops, violations[NV];
    pthread_t thread;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void violation(struct worker *w, int v, const char *fmt, ...) {
    ++w->violations[v];
    pthread_mutex_lock(&print_lock_);
    if (printed_++ < 40) {
        char text[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(text, sizeof(text), fmt, ap);
        va_end(ap);
        printf("chaos: rank %d VIOLATION %s thread %d %s\n", rank_, kViolationName[v], w->index, text);
        fflush(stdout);
    }
    pthread_mutex_unlock(&print_lock_);
}

/* ---- what message number s of a stream is ---- */

static uint64_t stream_key(int src, int dst, int thread, uint64_t seq) {
    return mix64(seed_ ^ mix64(((uint64_t)src << 40) ^ ((uint64_t)dst << 24) ^ ((uint64_t)thread << 16)) ^
                 (seq * 0x9e3779b97f4a7c15ULL));
}

static enum kind kind_of(uint64_t seq) {
    static const enum kind big[3] = {VEC, VECR, BULK};
    switch (seq % BATCH) {
    case 0:
    case 2: return INLINE;
    case 1:
    case 3: return EAGER;
    default: return big[(seq / BATCH) % 3];
    }
}

/* bytes of data (for VEC and VECR a multiple of BLOCK) */
static size_t size_of(enum kind k, uint64_t key) {
    const uint64_t r = mix64(key ^ 0x5151);
    switch (k) {
    case INLINE: return 16 + r % 97;
    case EAGER: return 128 + r % (12200 - 128 + 1);
    case VEC:
    case VECR: return (size_t)BLOCK * (256 + r % (4096 - 256 + 1));
    default: {
        const uint64_t lo = 65536, hi = large_ > 65536 ? (uint64_t)large_ : 65536;
        return (size_t)(lo + r % (hi - lo + 1));
    }
    }
}

/* byte i of the message's data in packed order (i >= HEADER) */
static inline unsigned char data_byte(uint64_t key, size_t i) {
    return (unsigned char)(mix64(key ^ (uint64_t)(i >> 3)) >> (8 * (i & 7)));
}

static void header_of(unsigned char out[HEADER], int src, int dst, int thread, enum kind k, uint64_t seq) {
    const uint64_t w0 = (kMagic << 48) | ((uint64_t)(src & 0xffff) << 32) | ((uint64_t)(dst & 0xffff) << 16) |
                        ((uint64_t)(thread & 0xff) << 8) | (uint64_t)k;
    memcpy(out, &w0, 8);
    memcpy(out + 8, &seq, 8);
}

/* where packed byte i lives in a strided buffer */
static inline size_t strided(size_t i) {
    return (i / BLOCK) * STRIDE + i % BLOCK;
}

static void fill(unsigned char *buf, int is_strided, int src, int dst, int thread, enum kind k, uint64_t seq,
                 size_t len) {
    unsigned char h[HEADER];
    header_of(h, src, dst, thread, k, seq);
    const uint64_t key = stream_key(src, dst, thread, seq);
    for (size_t i = 0; i < len; ++i) {
        const unsigned char b = i < HEADER ? h[i] : data_byte(key, i);
        buf[is_strided ? strided(i) : i] = b;
    }
}

/* ---- the receiving side's bookkeeping of a stream ---- */

static int take_gap(struct worker *w, int from, uint64_t seq) {
    for (int i = 0; i < w->ngaps[from]; ++i)
        if (w->gaps[from][i] == seq) {
            w->gaps[from][i] = w->gaps[from][--w->ngaps[from]];
            return 1;
        }
    return 0;
}

/* One received message, expected to be number `want` from `from`; `got` bytes arrived (MPI_Get_count, -1 when
 * not a whole number of strided blocks), `err` is its status's error. */
static void check_message(struct worker *w, int from, uint64_t want, const unsigned char *buf, int is_strided,
                          long got, int err) {
    unsigned char h[HEADER];
    for (size_t i = 0; i < HEADER; ++i) h[i] = buf[is_strided ? strided(i) : i];
    uint64_t w0, seq;
    memcpy(&w0, h, 8);
    memcpy(&seq, h + 8, 8);
    const int magic_ok = (w0 >> 48) == kMagic, src = (int)((w0 >> 32) & 0xffff), dst = (int)((w0 >> 16) & 0xffff),
              thread = (int)((w0 >> 8) & 0xff);
    if (!magic_ok || src != from || dst != rank_ || thread != w->index) {
        violation(w, V_CORRUPT,
                  "from %d: message %llu: header names sender %d receiver %d thread %d (magic %s), %ld bytes", from,
                  (unsigned long long)want, src, dst, thread, magic_ok ? "ok" : "wrong", got);
        return;
    }
    /* which number arrived, against the one expected next on this stream */
    if (seq != w->next_in[from]) {
        if (seq > w->next_in[from]) {
            violation(w, V_ORDER, "from %d: message %llu arrived while %llu was expected next", from,
                      (unsigned long long)seq, (unsigned long long)w->next_in[from]);
            for (uint64_t s = w->next_in[from]; s < seq && w->ngaps[from] < 8; ++s)
                w->gaps[from][w->ngaps[from]++] = s;
            w->next_in[from] = seq + 1;
        } else if (take_gap(w, from, seq)) {
            violation(w, V_ORDER, "from %d: message %llu arrived after later ones", from, (unsigned long long)seq);
        } else {
            violation(w, V_DUP, "from %d: message %llu arrived again (next expected %llu)", from,
                      (unsigned long long)seq, (unsigned long long)w->next_in[from]);
        }
    } else {
        ++w->next_in[from];
    }
    const enum kind k = kind_of(seq);
    /* another message than the one this receive was posted for (reported above) laid out otherwise: its bytes
     * cannot be read here */
    if ((k == VECR) != is_strided) return;
    const uint64_t key = stream_key(from, rank_, w->index, seq);
    const size_t real = size_of(k, key);
    if ((int)(w0 & 0xff) != (int)k || err != MPI_SUCCESS || (size_t)got != real) {
        violation(w, V_CORRUPT, "from %d: message %llu (%s): %ld bytes received, %zu sent%s", from,
                  (unsigned long long)seq, kKindName[k], got, real,
                  err != MPI_SUCCESS ? " (error status)" : "");
        return;
    }
    for (size_t i = HEADER; i < real; ++i)
        if (buf[is_strided ? strided(i) : i] != data_byte(key, i)) {
            violation(w, V_CORRUPT, "from %d: message %llu (%s, %zu bytes): byte %zu differs", from,
                      (unsigned long long)seq, kKindName[k], real, i);
            return;
        }
    if (is_strided)
        for (size_t i = 0; i < real; ++i)
            if (i % BLOCK == BLOCK - 1 && buf[strided(i) + 1] != kCanary) {
                violation(w, V_CORRUPT, "from %d: message %llu (%s): the gap after byte %zu was written", from,
                          (unsigned long long)seq, kKindName[k], i);
                return;
            }
    ++w->msgs;
    w->bytes += (long)real;
}

/* ---- one round ---- */

/* offset j (0 <= j < width_) of round r for thread t: every offset 1..size-1 comes up within a few rounds */
static int offset_of(long r, int t, int j) {
    const int n = size_ - 1;
    return (int)(((uint64_t)r * (uint64_t)width_ + (uint64_t)j + (uint64_t)t * 7u) % (uint64_t)n) + 1;
}

static size_t receive_room(void) {
    const size_t strided_max = (size_t)4096 * STRIDE;
    return ((size_t)large_ > strided_max ? (size_t)large_ : strided_max) / STRIDE * STRIDE + STRIDE;
}

struct posted {
    unsigned char *buf;
    size_t len;
    int strided, peer, to; /* peer: the sender of a receive (-1 for a send); to: a send's destination */
    uint64_t seq;
};

/* MPI_Waitall, except that requests still incomplete after STRAGGLER_S seconds are named once (receive from whom or
 * send to whom, its number and size), so that a hang's diagnostics say which message never completed. */
#define STRAGGLER_S 30.0
static int wait_all_naming_stragglers(struct worker *w, long r, int m, MPI_Request *req, MPI_Status *st,
                                      const struct posted *p) {
    const double start = now_s();
    int named = 0;
    for (;;) {
        int flag = 0;
        const int rc = MPI_Testall(m, req, &flag, st);
        if (flag || rc != MPI_SUCCESS) return rc;
        if (named || now_s() - start < STRAGGLER_S) continue;
        named = 1;
        pthread_mutex_lock(&print_lock_);
        int listed = 0;
        for (int i = 0; i < m && listed < 8; ++i) {
            int done = 0;
            MPI_Status s;
            MPI_Request_get_status(req[i], &done, &s);
            if (done) continue;
            ++listed;
            if (p[i].peer >= 0)
                printf("chaos: rank %d thread %d round %ld still waits for message %llu (%zu bytes max) from rank %d\n",
                       rank_, w->index, r, (unsigned long long)p[i].seq, p[i].len, p[i].peer);
            else
                printf("chaos: rank %d thread %d round %ld: its send of message %llu (%zu bytes) to rank %d has not "
                       "completed\n",
                       rank_, w->index, r, (unsigned long long)p[i].seq, p[i].len, p[i].to);
        }
        fflush(stdout);
        pthread_mutex_unlock(&print_lock_);
    }
}

static void exchange(struct worker *w, long r) {
    const int n = width_ * BATCH * 2;
    MPI_Request *req = malloc(sizeof(MPI_Request) * (size_t)n);
    MPI_Status *st = malloc(sizeof(MPI_Status) * (size_t)n);
    struct posted *p = calloc((size_t)n, sizeof(struct posted));
    if (!req || !st || !p) MPI_Abort(MPI_COMM_WORLD, 3);
    int m = 0;
    for (int j = 0; j < width_; ++j) {
        const int k = offset_of(r, w->index, j), to = (rank_ + k) % size_, from = (rank_ - k + size_) % size_;
        /* receives first, in the order the numbers are expected: MPI matches them in posting order */
        for (int b = 0; b < BATCH; ++b) {
            const uint64_t seq = w->next_in[from] + (uint64_t)b;
            const enum kind kd = kind_of(seq);
            const size_t len = size_of(kd, stream_key(from, rank_, w->index, seq));
            struct posted *q = &p[m];
            q->len = len, q->seq = seq, q->peer = from, q->to = -1, q->strided = kd == VECR;
            /* Every receive has room for the largest message of any kind, so that no message is ever truncated:
             * when a fault makes another message match this receive, its size is reported. (A truncated receive
             * is no test of the BTL: Open MPI 4.1.4's ob1 then reads a whole RGET message past the receive's
             * count, over vader too, and may hang.) Pages never written are not backed by memory. */
            q->buf = malloc(receive_room());
            if (!q->buf) MPI_Abort(MPI_COMM_WORLD, 3);
            if (q->strided) {
                memset(q->buf, kCanary, receive_room());
                MPI_Irecv(q->buf, (int)(receive_room() / STRIDE), block_type_, from, 0, w->comm, &req[m]);
            } else {
                MPI_Irecv(q->buf, (int)receive_room(), MPI_BYTE, from, 0, w->comm, &req[m]);
            }
            ++m;
        }
        for (int b = 0; b < BATCH; ++b) {
            uint64_t seq = w->next_out[to]++;
            const int inject = r == 1 && j == 0 && w->index == 0 && rank_ == inject_rank_;
            if (inject && b == 1 && inject_ == INJECT_DUP) seq -= 1;
            if (inject && b == 1 && inject_ == INJECT_LOST) seq = ++w->next_out[to] - 1;
            if (inject && b == 1 && inject_ == INJECT_ORDER) seq += 1;
            if (inject && b == 2 && inject_ == INJECT_ORDER) seq -= 1;
            const enum kind kd = kind_of(seq);
            const size_t len = size_of(kd, stream_key(rank_, to, w->index, seq));
            struct posted *q = &p[m];
            q->len = len, q->seq = seq, q->peer = -1, q->to = to, q->strided = kd == VEC;
            q->buf = malloc(q->strided ? (len / BLOCK) * STRIDE : len);
            if (!q->buf) MPI_Abort(MPI_COMM_WORLD, 3);
            fill(q->buf, q->strided, rank_, to, w->index, kd, seq, len);
            if (inject && b == 1 && inject_ == INJECT_CORRUPT) q->buf[q->strided ? strided(len - 1) : len - 1] ^= 1;
            if (q->strided)
                MPI_Isend(q->buf, (int)(len / BLOCK), block_type_, to, 0, w->comm, &req[m]);
            else
                MPI_Isend(q->buf, (int)len, MPI_BYTE, to, 0, w->comm, &req[m]);
            ++m;
        }
    }
    const int rc = wait_all_naming_stragglers(w, r, m, req, st, p);
    for (int i = 0; i < m; ++i) {
        struct posted *q = &p[i];
        const int err = rc == MPI_ERR_IN_STATUS ? st[i].MPI_ERROR : rc;
        if (q->peer >= 0) {
            int count = -1;
            MPI_Get_count(&st[i], q->strided ? block_type_ : MPI_BYTE, &count);
            const long got = count == MPI_UNDEFINED ? -1 : q->strided ? (long)count * BLOCK : count;
            check_message(w, q->peer, q->seq, q->buf, q->strided, got, err);
        } else if (err != MPI_SUCCESS) {
            violation(w, V_CORRUPT, "a send of %zu bytes completed with error %d", q->len, err);
        }
        free(q->buf);
    }
    free(req);
    free(st);
    free(p);
}

static uint64_t block_key(int src, int dst, int thread, long r) {
    return mix64(seed_ ^ 0x0b10c ^ mix64(((uint64_t)src << 40) ^ ((uint64_t)dst << 24) ^ ((uint64_t)thread << 16)) ^
                 ((uint64_t)r * 0xc2b2ae3d27d4eb4fULL));
}

static size_t block_len(uint64_t key) {
    return 8 + (size_t)(mix64(key ^ 0x1e7) % (SLOT - 8 + 1));
}

static unsigned char *slot_of(struct worker *w, int src, long r) {
    return w->base + ((size_t)(r & 1) * (size_t)size_ + (size_t)src) * SLOT;
}

static void one_sided(struct worker *w, long r) {
    unsigned char *out = malloc(SLOT);
    if (!out) MPI_Abort(MPI_COMM_WORLD, 3);
    for (int j = 0; j < width_; ++j) {
        const int to = (rank_ + offset_of(r, w->index, j)) % size_;
        const uint64_t key = block_key(rank_, to, w->index, r);
        const size_t len = block_len(key);
        for (size_t i = 0; i < len; ++i) out[i] = data_byte(key, i);
        MPI_Win_lock(MPI_LOCK_SHARED, to, 0, w->win);
        MPI_Put(out, (int)len, MPI_BYTE, to, (MPI_Aint)(((size_t)(r & 1) * (size_t)size_ + (size_t)rank_) * SLOT),
                (int)len, MPI_BYTE, w->win);
        MPI_Win_unlock(to, w->win);
        ++w->puts;
    }
    free(out);
    const int owner = (int)(r % size_);
    const int64_t one = 1;
    int64_t before = -1;
    MPI_Win_lock(MPI_LOCK_SHARED, owner, 0, w->win);
    MPI_Fetch_and_op(&one, &before, MPI_INT64_T, owner, (MPI_Aint)(2 * (size_t)size_ * SLOT), MPI_SUM, w->win);
    MPI_Win_unlock(owner, w->win);
    w->fetched[r] = before;
    ++w->fops;
    if (r == 1 && w->index == 0 && rank_ == inject_rank_ && inject_ == INJECT_SUM) {
        MPI_Win_lock(MPI_LOCK_SHARED, owner, 0, w->win);
        MPI_Fetch_and_op(&one, &before, MPI_INT64_T, owner, (MPI_Aint)(2 * (size_t)size_ * SLOT), MPI_SUM, w->win);
        MPI_Win_unlock(owner, w->win);
    }
    /* every put of this round is complete at its target (unlock), then the blocks put here are checked */
    MPI_Barrier(w->comm);
    MPI_Win_lock(MPI_LOCK_EXCLUSIVE, rank_, 0, w->win);
    for (int j = 0; j < width_; ++j) {
        const int from = (rank_ - offset_of(r, w->index, j) + size_) % size_;
        const uint64_t key = block_key(from, rank_, w->index, r);
        const size_t len = block_len(key);
        const unsigned char *in = slot_of(w, from, r);
        for (size_t i = 0; i < len; ++i)
            if (in[i] != data_byte(key, i)) {
                violation(w, V_CORRUPT, "round %ld: the block of %zu bytes put by rank %d differs at byte %zu", r,
                          len, from, i);
                break;
            }
    }
    MPI_Win_unlock(rank_, w->win);
}

/* the end of the one-sided part: every counter exact, every value fetched once */
static int cmp64(const void *a, const void *b) {
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static void check_sums(struct worker *w) {
    MPI_Barrier(w->comm);
    const long rounds = w->rounds;
    int64_t value = -1;
    MPI_Win_lock(MPI_LOCK_EXCLUSIVE, rank_, 0, w->win);
    memcpy(&value, w->base + 2 * (size_t)size_ * SLOT, sizeof(value));
    MPI_Win_unlock(rank_, w->win);
    long mine = 0; /* rounds whose counter is this rank's */
    for (long r = 0; r < rounds; ++r) mine += r % size_ == rank_;
    const int64_t want = (int64_t)mine * size_;
    if (value != want)
        violation(w, V_SUM, "the counter holds %lld after %lld additions", (long long)value, (long long)want);
    int64_t *all = malloc(sizeof(int64_t) * (size_t)rounds * (size_t)size_);
    int64_t *vals = malloc(sizeof(int64_t) * (size_t)(want > 0 ? want : 1));
    if (!all || !vals) MPI_Abort(MPI_COMM_WORLD, 3);
    MPI_Allgather(w->fetched, (int)rounds, MPI_INT64_T, all, (int)rounds, MPI_INT64_T, w->comm);
    long n = 0;
    for (int p = 0; p < size_; ++p)
        for (long r = rank_; r < rounds; r += size_) vals[n++] = all[(size_t)p * (size_t)rounds + (size_t)r];
    qsort(vals, (size_t)n, sizeof(int64_t), cmp64);
    for (long i = 0; i < n; ++i)
        if (vals[i] != i) {
            violation(w, V_SUM, "the values fetched from the counter are not 0..%ld once each: position %ld holds %lld",
                      n - 1, i, (long long)vals[i]);
            break;
        }
    free(all);
    free(vals);
}

static double compute(double seconds) {
    volatile double x = 1.0;
    const double end = now_s() + seconds;
    while (now_s() < end)
        for (int i = 0; i < 100000; ++i) x = x * 1.0000001 + 1e-9;
    return x;
}

static void *work(void *arg) {
    struct worker *w = arg;
    const double start = now_s();
    int go = 1;
    for (long r = 0; go; ++r) {
        if (rank_ == 0 && w->index == 0) {
            printf("chaos: phase %ld t=%.2f\n", r, now_s() - start);
            fflush(stdout);
        }
        if (rank_ == busy_rank_ && r == busy_phase_) {
            /* every thread of this rank out of MPI together: thread 0 computes, the others wait off MPI */
            pthread_barrier_wait(&busy_barrier_);
            if (w->index == 0) {
                printf("chaos: rank %d busy for %.1f s at round %ld\n", rank_, busy_seconds_, r);
                fflush(stdout);
                compute(busy_seconds_);
            }
            pthread_barrier_wait(&busy_barrier_);
        }
        exchange(w, r);
        if (onesided_) one_sided(w, r);
        w->rounds = r + 1;
        if (rank_ == 0)
            go = w->rounds < max_rounds_ &&
                 (w->rounds < min_rounds_ || (stop_file_ != NULL && access(stop_file_, F_OK) != 0));
        MPI_Bcast(&go, 1, MPI_INT, 0, w->comm);
    }
    if (onesided_) check_sums(w);
    /* every stream's numbers: what this rank's senders say they sent must have been taken here */
    for (int p = 0; p < size_; ++p)
        for (int i = 0; i < w->ngaps[p]; ++i)
            violation(w, V_LOST, "from %d: message %llu never arrived", p, (unsigned long long)w->gaps[p][i]);
    uint64_t *sent_to_me = malloc(sizeof(uint64_t) * (size_t)size_);
    if (!sent_to_me) MPI_Abort(MPI_COMM_WORLD, 3);
    MPI_Alltoall(w->next_out, 1, MPI_UINT64_T, sent_to_me, 1, MPI_UINT64_T, w->comm);
    for (int p = 0; p < size_; ++p)
        if (p != rank_ && sent_to_me[p] != w->next_in[p])
            violation(w, sent_to_me[p] > w->next_in[p] ? V_LOST : V_DUP,
                      "from %d: %llu messages sent, the stream here is at %llu", p,
                      (unsigned long long)sent_to_me[p], (unsigned long long)w->next_in[p]);
    free(sent_to_me);
    return NULL;
}

static int parse_pair(const char *s, int *a, double *b, long *c) {
    char *end;
    errno = 0;
    *a = (int)strtol(s, &end, 10);
    if (*end != ':') return 0;
    *b = strtod(end + 1, &end);
    if (c == NULL) return *end == '\0';
    if (*end != ':') return 0;
    *c = strtol(end + 1, &end, 10);
    return *end == '\0';
}

static void usage_exit(const char *why) {
    if (rank_ == 0) fprintf(stderr, "chaos_work: %s\n", why);
    MPI_Finalize();
    exit(2);
}

int main(int argc, char **argv) {
    /* threads_ comes from the command line, which MPI_Init_thread must see first */
    for (int i = 1; i + 1 < argc; ++i)
        if (strcmp(argv[i], "--threads") == 0) threads_ = atoi(argv[i + 1]);
    if (threads_ < 1 || threads_ > 64) threads_ = 1;
    int provided = MPI_THREAD_SINGLE;
    if (threads_ > 1)
        MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    else
        MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    if (threads_ > 1 && provided < MPI_THREAD_MULTIPLE) usage_exit("MPI_THREAD_MULTIPLE is not provided");
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v == NULL) usage_exit("an option without its value");
        ++i;
        if (strcmp(a, "--seed") == 0) seed_ = strtoull(v, NULL, 0);
        else if (strcmp(a, "--threads") == 0) continue;
        else if (strcmp(a, "--width") == 0) width_ = atoi(v);
        else if (strcmp(a, "--min-rounds") == 0) min_rounds_ = atoi(v);
        else if (strcmp(a, "--max-rounds") == 0) max_rounds_ = atoi(v);
        else if (strcmp(a, "--stop-file") == 0) stop_file_ = strcmp(v, "-") == 0 ? NULL : v;
        else if (strcmp(a, "--large") == 0) large_ = atol(v);
        else if (strcmp(a, "--onesided") == 0) onesided_ = atoi(v);
        else if (strcmp(a, "--busy") == 0) {
            long phase = -1;
            if (!parse_pair(v, &busy_rank_, &busy_seconds_, &phase)) usage_exit("--busy RANK:SECONDS:ROUND");
            busy_phase_ = (int)phase;
        } else if (strcmp(a, "--inject") == 0) {
            const char *colon = strchr(v, ':');
            for (int k = 1; colon && k < (int)(sizeof(kInjectName) / sizeof(kInjectName[0])); ++k)
                if ((size_t)(colon - v) == strlen(kInjectName[k]) && strncmp(v, kInjectName[k], strlen(kInjectName[k])) == 0)
                    inject_ = (enum inject)k;
            if (inject_ == INJECT_NONE) usage_exit("--inject dup|lost|order|corrupt|sum:RANK");
            inject_rank_ = atoi(colon + 1);
        } else if (strcmp(a, "--late") == 0) {
            if (!parse_pair(v, &late_rank_, &late_seconds_, NULL)) usage_exit("--late RANK:SECONDS");
        } else
            usage_exit("unknown option (see the comment at the top of chaos_work.c)");
    }
    if (size_ < 2) usage_exit("needs at least 2 ranks");
    if (width_ < 1) width_ = 1;
    if (width_ > size_ - 1) width_ = size_ - 1;
    if (min_rounds_ < 1) min_rounds_ = 1;
    if (max_rounds_ < min_rounds_) max_rounds_ = min_rounds_;
    if (busy_rank_ >= 0 && busy_phase_ >= min_rounds_) usage_exit("--busy must fall within --min-rounds");

    MPI_Datatype contiguous;
    MPI_Type_contiguous(BLOCK, MPI_BYTE, &contiguous);
    MPI_Type_create_resized(contiguous, 0, STRIDE, &block_type_);
    MPI_Type_commit(&block_type_);
    MPI_Type_free(&contiguous);
    pthread_barrier_init(&busy_barrier_, NULL, (unsigned)threads_);

    struct worker *ws = calloc((size_t)threads_, sizeof(struct worker));
    if (!ws) MPI_Abort(MPI_COMM_WORLD, 3);
    for (int t = 0; t < threads_; ++t) {
        struct worker *w = &ws[t];
        w->index = t;
        MPI_Comm_dup(MPI_COMM_WORLD, &w->comm);
        /* a message of another size matching a receive is the program's to report, not a reason to abort */
        MPI_Comm_set_errhandler(w->comm, MPI_ERRORS_RETURN);
        w->next_out = calloc((size_t)size_, sizeof(uint64_t));
        w->next_in = calloc((size_t)size_, sizeof(uint64_t));
        w->gaps = calloc((size_t)size_, sizeof(*w->gaps));
        w->ngaps = calloc((size_t)size_, sizeof(int));
        w->fetched = calloc((size_t)max_rounds_, sizeof(int64_t));
        if (!w->next_out || !w->next_in || !w->gaps || !w->ngaps || !w->fetched) MPI_Abort(MPI_COMM_WORLD, 3);
        if (onesided_) {
            const MPI_Aint bytes = (MPI_Aint)(2 * (size_t)size_ * SLOT + sizeof(int64_t));
            MPI_Win_allocate(bytes, 1, MPI_INFO_NULL, w->comm, &w->base, &w->win);
            memset(w->base, 0, (size_t)bytes);
        }
    }
    /* windows zeroed everywhere before anyone adds to a counter */
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank_ == 0) {
        printf("chaos: started ranks=%d threads=%d width=%d onesided=%d\n", size_, threads_, width_, onesided_);
        fflush(stdout);
    }
    if (threads_ == 1) {
        work(&ws[0]);
    } else {
        for (int t = 0; t < threads_; ++t) pthread_create(&ws[t].thread, NULL, work, &ws[t]);
        for (int t = 0; t < threads_; ++t) pthread_join(ws[t].thread, NULL);
    }

    long v[NV] = {0}, msgs = 0, bytes = 0, puts = 0, fops = 0, rounds = 0;
    for (int t = 0; t < threads_; ++t) {
        for (int k = 0; k < NV; ++k) v[k] += ws[t].violations[k];
        msgs += ws[t].msgs, bytes += ws[t].bytes, puts += ws[t].puts, fops += ws[t].fops;
        rounds = ws[t].rounds > rounds ? ws[t].rounds : rounds;
    }
    long mine = 0;
    for (int k = 0; k < NV; ++k) mine += v[k];
    char kinds[128] = "";
    for (int k = 0; k < NV; ++k)
        if (v[k]) snprintf(kinds + strlen(kinds), sizeof(kinds) - strlen(kinds), " %s=%ld", kViolationName[k], v[k]);
    printf("chaos: rank %d %s msgs=%ld bytes=%ld puts=%ld fops=%ld rounds=%ld%s\n", rank_, mine ? "VIOLATION" : "OK",
           msgs, bytes, puts, fops, rounds, kinds);
    fflush(stdout);
    long totals[3] = {mine, msgs, bytes}, sums[3] = {0, 0, 0};
    MPI_Allreduce(totals, sums, 3, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (rank_ == 0) {
        printf("chaos: verdict %s ranks=%d threads=%d msgs=%ld bytes=%ld violations=%ld\n", sums[0] ? "VIOLATION" : "OK",
               size_, threads_, sums[1], sums[2], sums[0]);
        fflush(stdout);
    }
    for (int t = 0; t < threads_; ++t) {
        if (onesided_) MPI_Win_free(&ws[t].win);
        MPI_Comm_free(&ws[t].comm);
        free(ws[t].next_out), free(ws[t].next_in), free(ws[t].gaps), free(ws[t].ngaps), free(ws[t].fetched);
    }
    free(ws);
    MPI_Type_free(&block_type_);
    if (rank_ == late_rank_) {
        printf("chaos: rank %d enters MPI_Finalize %.1f s late\n", rank_, late_seconds_);
        fflush(stdout);
        struct timespec ts = {(time_t)late_seconds_, (long)((late_seconds_ - (double)(time_t)late_seconds_) * 1e9)};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
    }
    const double t0 = now_s();
    MPI_Finalize();
    printf("chaos: rank %d finalize %.3f s\n", rank_, now_s() - t0);
    fflush(stdout);
    return sums[0] ? 1 : 0;
}
