// SPDX-License-Identifier: BSD-3-Clause
/* MPI one-sided with derived datatypes, on windows made by MPI_Win_create and MPI_Win_allocate, every value checked.
 *
 *   get     MPI_Get of records described by a struct datatype (int, double, char, double[3], short: gaps between
 *           the members and at the end), 1, 7 and 700 records, and of one record holding a 48 KiB member (larger
 *           than osc/rdma's staging buffers), under MPI_Win_lock_all + MPI_Win_flush, under MPI_Win_lock, and as
 *           MPI_Rget + MPI_Wait.
 *   put     MPI_Put of the same records into the peer's window under fences; the gap bytes of the target keep
 *           their fill pattern (nothing but the members is written).
 *   acc     MPI_Accumulate (MPI_SUM) from every rank into every other rank's window with a vector of ints
 *           (stride 3, 2 per block) and a struct of two doubles with a gap; MPI_Get_accumulate with the vector
 *           type reads the values before the sum. Gaps keep their pattern.
 *
 * Usage: rma_datatypes [get|put|acc ...] (default: all). Prints "rma_datatypes: <phase> OK ..." per phase and
 * "rma_datatypes: OK ranks=N errors=0" at the end; exits 0 only when every check passed. */
#include "phases.h"

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FILL 0xa5 /* what the bytes between the members hold */

typedef struct {
    int a;
    double b;
    char c;
    double d[3];
    short e;
} rec_t;

static MPI_Datatype rec_type(void) {
    const int len[5] = {1, 1, 1, 3, 1};
    const MPI_Aint disp[5] = {offsetof(rec_t, a), offsetof(rec_t, b), offsetof(rec_t, c), offsetof(rec_t, d),
                              offsetof(rec_t, e)};
    const MPI_Datatype types[5] = {MPI_INT, MPI_DOUBLE, MPI_CHAR, MPI_DOUBLE, MPI_SHORT};
    MPI_Datatype t, resized;
    MPI_Type_create_struct(5, len, disp, types, &t);
    MPI_Type_create_resized(t, 0, sizeof(rec_t), &resized);
    MPI_Type_free(&t);
    MPI_Type_commit(&resized);
    return resized;
}

static void fill_rec(rec_t *r, int owner, int i) {
    memset(r, FILL, sizeof *r);
    r->a = owner * 100000 + i;
    r->b = owner + i * 0.25;
    r->c = (char)('a' + (owner + i) % 26);
    for (int k = 0; k < 3; ++k) r->d[k] = -(double)(i * 3 + k) - owner * 0.5;
    r->e = (short)(i ^ owner);
}

/* the members equal fill_rec(owner, i)'s; with check_gaps, every other byte is still FILL */
static int rec_ok(const rec_t *r, int owner, int i, int check_gaps) {
    rec_t want;
    fill_rec(&want, owner, i);
    if (check_gaps) return memcmp(r, &want, sizeof want) == 0;
    return r->a == want.a && r->b == want.b && r->c == want.c && r->d[0] == want.d[0] && r->d[1] == want.d[1] &&
           r->d[2] == want.d[2] && r->e == want.e;
}

/* a window of n records, by MPI_Win_create (flavor 0) or MPI_Win_allocate (1); every byte FILL */
static MPI_Win make_window(int flavor, size_t bytes, void **base) {
    MPI_Win win;
    if (flavor == 0) {
        *base = malloc(bytes);
        MPI_Win_create(*base, (MPI_Aint)bytes, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    } else {
        MPI_Win_allocate((MPI_Aint)bytes, 1, MPI_INFO_NULL, MPI_COMM_WORLD, base, &win);
    }
    memset(*base, FILL, bytes);
    return win;
}

static void free_window(int flavor, MPI_Win *win, void *base) {
    MPI_Win_free(win);
    if (flavor == 0) free(base);
}

static const char *flavor_name(int flavor) {
    return flavor == 0 ? "create" : "allocate";
}

/* ---- get ---------------------------------------------------------------------------------------------------- */

#define BIG_DOUBLES 6144 /* 48 KiB */
typedef struct {
    int head;
    double big[BIG_DOUBLES];
    int tail;
} big_t;

static MPI_Datatype big_type(void) {
    const int len[3] = {1, BIG_DOUBLES, 1};
    const MPI_Aint disp[3] = {offsetof(big_t, head), offsetof(big_t, big), offsetof(big_t, tail)};
    const MPI_Datatype types[3] = {MPI_INT, MPI_DOUBLE, MPI_INT};
    MPI_Datatype t;
    MPI_Type_create_struct(3, len, disp, types, &t);
    MPI_Type_commit(&t);
    return t;
}

static void phase_get(int flavor) {
    enum { MAXN = 700 };
    static const int counts[] = {1, 7, MAXN};
    MPI_Datatype rt = rec_type(), bt = big_type();
    const size_t bytes = MAXN * sizeof(rec_t) + sizeof(big_t);
    void *base;
    MPI_Win win = make_window(flavor, bytes, &base);
    rec_t *recs = base;
    big_t *big = (big_t *)(recs + MAXN);
    for (int i = 0; i < MAXN; ++i) fill_rec(&recs[i], rank, i);
    big->head = rank;
    big->tail = -rank;
    for (int i = 0; i < BIG_DOUBLES; ++i) big->big[i] = rank * 1e6 + i;
    MPI_Barrier(MPI_COMM_WORLD);

    rec_t *got = malloc(MAXN * sizeof *got);
    big_t *got_big = malloc(sizeof *got_big);
    for (int k = 1; k < size; ++k) {
        const int p = (rank + k) % size;
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; ++c) {
            const int n = counts[c];
            /* under lock_all + flush, under a shared lock on the one target, and MPI_Rget + MPI_Wait */
            static const char *const how[] = {"lock_all", "lock", "rget"};
            for (int sync = 0; sync < 3; ++sync) {
                memset(got, 0, MAXN * sizeof *got);
                if (sync == 0) {
                    MPI_Win_lock_all(0, win);
                    MPI_Get(got, n, rt, p, 0, n, rt, win);
                    MPI_Win_flush(p, win);
                    MPI_Win_unlock_all(win);
                } else if (sync == 1) {
                    MPI_Win_lock(MPI_LOCK_SHARED, p, 0, win);
                    MPI_Get(got, n, rt, p, 0, n, rt, win);
                    MPI_Win_unlock(p, win);
                } else {
                    MPI_Request req;
                    MPI_Win_lock_all(0, win);
                    MPI_Rget(got, n, rt, p, 0, n, rt, win, &req);
                    MPI_Wait(&req, MPI_STATUS_IGNORE);
                    MPI_Win_unlock_all(win);
                }
                for (int i = 0; i < n; ++i)
                    CHECK(rec_ok(&got[i], p, i, 0), "get/%s: %d records from %d (%s): record %d is wrong (a=%d)\n",
                          flavor_name(flavor), n, p, how[sync], i, got[i].a);
            }
        }
        memset(got_big, 0, sizeof *got_big);
        MPI_Win_lock(MPI_LOCK_SHARED, p, 0, win);
        MPI_Get(got_big, 1, bt, p, MAXN * sizeof(rec_t), 1, bt, win);
        MPI_Win_unlock(p, win);
        int bad = got_big->head != p || got_big->tail != -p;
        for (int i = 0; i < BIG_DOUBLES; ++i) bad += got_big->big[i] != p * 1e6 + i;
        CHECK(bad == 0, "get/%s: the 48 KiB record from %d has %d wrong values\n", flavor_name(flavor), p, bad);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    free(got), free(got_big);
    free_window(flavor, &win, base);
    MPI_Type_free(&rt), MPI_Type_free(&bt);
}

/* ---- put ---------------------------------------------------------------------------------------------------- */

static void phase_put(int flavor) {
    enum { PER = 9 }; /* records each origin writes into each target */
    MPI_Datatype rt = rec_type();
    const size_t bytes = (size_t)size * PER * sizeof(rec_t);
    void *base;
    MPI_Win win = make_window(flavor, bytes, &base);
    rec_t *recs = base;
    rec_t *mine = malloc(PER * sizeof *mine);
    for (int i = 0; i < PER; ++i) fill_rec(&mine[i], rank, i);
    MPI_Win_fence(0, win);
    for (int k = 1; k < size; ++k) {
        const int p = (rank + k) % size;
        MPI_Put(mine, PER, rt, p, (MPI_Aint)rank * PER * sizeof(rec_t), PER, rt, win);
    }
    MPI_Win_fence(0, win);
    for (int o = 0; o < size; ++o)
        for (int i = 0; i < PER; ++i) {
            const rec_t *r = &recs[o * PER + i];
            if (o == rank) {
                unsigned char untouched[sizeof(rec_t)];
                memset(untouched, FILL, sizeof untouched);
                CHECK(memcmp(r, untouched, sizeof untouched) == 0, "put/%s: my own slot %d was written\n",
                      flavor_name(flavor), i);
            } else {
                CHECK(rec_ok(r, o, i, 1), "put/%s: record %d from %d is wrong (members or gaps, a=%d)\n",
                      flavor_name(flavor), i, o, r->a);
            }
        }
    MPI_Win_fence(0, win);
    free(mine);
    free_window(flavor, &win, base);
    MPI_Type_free(&rt);
}

/* ---- acc ---------------------------------------------------------------------------------------------------- */

#define VBLOCKS 40 /* vector: 40 blocks of 2 ints, stride 3 */
typedef struct {
    double x;
    int gap[3];
    double y;
} pair_t;
#define PAIRS 16

static void phase_acc(int flavor) {
    MPI_Datatype vec, pair_raw, pair;
    MPI_Type_vector(VBLOCKS, 2, 3, MPI_INT, &vec);
    MPI_Type_commit(&vec);
    const int len[2] = {1, 1};
    const MPI_Aint disp[2] = {offsetof(pair_t, x), offsetof(pair_t, y)};
    const MPI_Datatype types[2] = {MPI_DOUBLE, MPI_DOUBLE};
    MPI_Type_create_struct(2, len, disp, types, &pair_raw);
    MPI_Type_create_resized(pair_raw, 0, sizeof(pair_t), &pair);
    MPI_Type_free(&pair_raw);
    MPI_Type_commit(&pair);

    const size_t vints = VBLOCKS * 3, bytes = vints * sizeof(int) + PAIRS * sizeof(pair_t);
    void *base;
    MPI_Win win = make_window(flavor, bytes, &base);
    int *v = base;
    pair_t *pairs = (pair_t *)(v + vints);
    for (size_t i = 0; i < vints; ++i)
        if (i % 3 != 2) v[i] = 0; /* the vector's members start at 0, the third int of each block keeps FILL */
    for (int i = 0; i < PAIRS; ++i) pairs[i].x = pairs[i].y = 0;

    int *vsrc = malloc(vints * sizeof *vsrc), *vold = malloc(vints * sizeof *vold);
    pair_t *psrc = malloc(PAIRS * sizeof *psrc);
    for (size_t i = 0; i < vints; ++i) vsrc[i] = (int)((rank + 1) * (i + 1));
    for (int i = 0; i < PAIRS; ++i) psrc[i].x = rank + 1, psrc[i].y = (rank + 1) * (double)i;
    int64_t sum_r1 = 0; /* sum of (r + 1) over the other ranks */
    for (int r = 0; r < size; ++r) sum_r1 += r == rank ? 0 : r + 1;

    MPI_Win_fence(0, win);
    for (int k = 1; k < size; ++k) {
        const int p = (rank + k) % size;
        MPI_Accumulate(vsrc, 1, vec, p, 0, 1, vec, MPI_SUM, win);
        MPI_Accumulate(psrc, PAIRS, pair, p, (MPI_Aint)(vints * sizeof(int)), PAIRS, pair, MPI_SUM, win);
    }
    MPI_Win_fence(0, win);
    int64_t bad = 0;
    for (size_t i = 0; i < vints; ++i) {
        if (i % 3 == 2) {
            unsigned char fill[sizeof(int)];
            memset(fill, FILL, sizeof fill);
            bad += memcmp(&v[i], fill, sizeof fill) != 0;
        } else {
            bad += v[i] != (int64_t)(i + 1) * sum_r1;
        }
    }
    CHECK(bad == 0, "acc/%s: %lld wrong ints in the vector (first: %d, expected %lld)\n", flavor_name(flavor),
          (long long)bad, v[0], (long long)sum_r1);
    bad = 0;
    for (int i = 0; i < PAIRS; ++i) bad += pairs[i].x != (double)sum_r1 || pairs[i].y != (double)sum_r1 * i;
    CHECK(bad == 0, "acc/%s: %lld wrong pairs (first x=%g, expected %lld)\n", flavor_name(flavor), (long long)bad,
          pairs[0].x, (long long)sum_r1);

    /* get_accumulate: every rank adds once more into its right neighbour and reads the values before */
    const int right = (rank + 1) % size;
    MPI_Win_fence(0, win);
    MPI_Get_accumulate(vsrc, 1, vec, vold, 1, vec, right, 0, 1, vec, MPI_SUM, win);
    MPI_Win_fence(0, win);
    int64_t right_sum = 0;
    for (int r = 0; r < size; ++r) right_sum += r == right ? 0 : r + 1;
    bad = 0;
    for (size_t i = 0; i < vints; ++i)
        if (i % 3 != 2) bad += vold[i] != (int64_t)(i + 1) * right_sum;
    CHECK(bad == 0, "get_accumulate/%s: %lld wrong old values from %d\n", flavor_name(flavor), (long long)bad, right);
    const int left = (rank + size - 1) % size;
    bad = 0;
    for (size_t i = 0; i < vints; ++i)
        if (i % 3 != 2) bad += v[i] != (int64_t)(i + 1) * (sum_r1 + left + 1);
    CHECK(bad == 0, "get_accumulate/%s: %lld wrong sums\n", flavor_name(flavor), (long long)bad);
    MPI_Win_fence(0, win);

    free(vsrc), free(vold), free(psrc);
    free_window(flavor, &win, base);
    MPI_Type_free(&vec), MPI_Type_free(&pair);
}

/* ---- main --------------------------------------------------------------------------------------------------- */

static void get(void) { phase_get(0), phase_get(1); }
static void put(void) { phase_put(0), phase_put(1); }
static void acc(void) { phase_acc(0), phase_acc(1); }

int main(int argc, char **argv) {
    static const struct phase phases[] = {{"get", get}, {"put", put}, {"acc", acc}};
    return run_phases(argc, argv, "rma_datatypes", phases, 3);
}
