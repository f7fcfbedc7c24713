// SPDX-License-Identifier: BSD-3-Clause
/* MPI one-sided test for osc/rdma over a BTL: put, get, accumulate, fetch_and_op, compare_and_swap, with fence,
 * lock/unlock and flush synchronisation; every value is checked. Prints "onesided: OK ..." and exits 0 only when
 * every check passed. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define N 4096

static long errors = 0;
#define CHECK(cond, ...)                                     \
    do {                                                     \
        if (!(cond)) {                                       \
            if (errors < 10) fprintf(stderr, __VA_ARGS__);   \
            ++errors;                                        \
        }                                                    \
    } while (0)

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int64_t *base;
    MPI_Win win;
    MPI_Win_allocate(N * sizeof(int64_t) * size, sizeof(int64_t), MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    for (int i = 0; i < N * size; ++i) base[i] = -1;
    int64_t *local = malloc(N * sizeof(int64_t));

    /* put with fence: every rank writes its block into every peer's window */
    MPI_Win_fence(0, win);
    for (int i = 0; i < N; ++i) local[i] = (int64_t)rank * 1000003 + i;
    for (int peer = 0; peer < size; ++peer) MPI_Put(local, N, MPI_INT64_T, peer, rank * N, N, MPI_INT64_T, win);
    MPI_Win_fence(0, win);
    for (int src = 0; src < size; ++src)
        for (int i = 0; i < N; ++i)
            CHECK(base[src * N + i] == (int64_t)src * 1000003 + i, "put: rank %d got %lld from %d at %d\n", rank,
                  (long long)base[src * N + i], src, i);

    /* get with lock/unlock: read back what the next rank received from us */
    int next = (rank + 1) % size;
    MPI_Win_lock(MPI_LOCK_SHARED, next, 0, win);
    MPI_Get(local, N, MPI_INT64_T, next, rank * N, N, MPI_INT64_T, win);
    MPI_Win_unlock(next, win);
    for (int i = 0; i < N; ++i)
        CHECK(local[i] == (int64_t)rank * 1000003 + i, "get: rank %d read %lld at %d\n", rank, (long long)local[i], i);
    MPI_Barrier(MPI_COMM_WORLD);

    /* accumulate (sum) and fetch_and_op into rank 0's counters, compare_and_swap on a flag */
    MPI_Win_fence(0, win);
    if (rank == 0) base[0] = 0, base[1] = 0, base[2] = -1;
    MPI_Win_fence(0, win);
    int64_t one = 1, old = 0, mine = rank, expect = -1, result = 0;
    MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
    for (int k = 0; k < 100; ++k) {
        MPI_Accumulate(&one, 1, MPI_INT64_T, 0, 0, 1, MPI_INT64_T, MPI_SUM, win);
        MPI_Fetch_and_op(&one, &old, MPI_INT64_T, 0, 1, MPI_SUM, win);
        MPI_Win_flush(0, win);
        CHECK(old >= 0 && old < 100 * size, "fetch_and_op: rank %d saw %lld\n", rank, (long long)old);
    }
    MPI_Compare_and_swap(&mine, &expect, &result, MPI_INT64_T, 0, 2, win);
    MPI_Win_unlock(0, win);
    int winner_here = result == -1;
    int winners = 0;
    MPI_Allreduce(&winner_here, &winners, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    CHECK(winners == 1, "compare_and_swap: %d winners\n", winners);
    MPI_Win_fence(0, win);
    if (rank == 0) {
        CHECK(base[0] == 100 * size, "accumulate: %lld, expected %d\n", (long long)base[0], 100 * size);
        CHECK(base[1] == 100 * size, "fetch_and_op total: %lld, expected %d\n", (long long)base[1], 100 * size);
        CHECK(base[2] >= 0 && base[2] < size, "compare_and_swap: flag %lld\n", (long long)base[2]);
    }
    MPI_Win_fence(0, win);

    long total = 0;
    MPI_Reduce(&errors, &total, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("onesided: %s ranks=%d errors=%ld\n", total ? "FAILED" : "OK", size, total);
    MPI_Win_free(&win);
    free(local);
    MPI_Finalize();
    return total ? 1 : 0;
}
