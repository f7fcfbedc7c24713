// SPDX-License-Identifier: BSD-3-Clause
/* One-sided traffic that keeps going, for the fault tests: every rank puts, gets, fetch-and-adds and
 * compare-and-swaps into every other rank's MPI_Win_allocate window, round after round, under MPI_Win_lock_all with
 * MPI_Win_flush after each operation (values checked). Nothing but one-sided traffic runs meanwhile: each rank
 * stops by itself when the file named by $RMA_STREAM_STOP exists (checked between rounds) or after
 * $RMA_STREAM_SECONDS seconds (default 120). Rank 0 prints "rma_stream: running" after its first round, and
 * "rma_stream: OK rounds=N errors=0" at the end. A fault injected meanwhile must end the job with an error. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define WORDS 512

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *stop = getenv("RMA_STREAM_STOP");
    const double seconds = getenv("RMA_STREAM_SECONDS") ? atof(getenv("RMA_STREAM_SECONDS")) : 120;
    int64_t *base;
    MPI_Win win;
    /* per origin: a block of WORDS words it puts into, then a counter and a flag */
    MPI_Win_allocate((MPI_Aint)size * (WORDS + 2) * sizeof(int64_t), sizeof(int64_t), MPI_INFO_NULL, MPI_COMM_WORLD,
                     &base, &win);
    for (int i = 0; i < size * (WORDS + 2); ++i) base[i] = 0;
    int64_t *out = malloc(WORDS * sizeof *out), *back = malloc(WORDS * sizeof *back);
    long errors = 0, rounds = 0;
    const double t0 = MPI_Wtime();
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_lock_all(0, win);
    for (;;) {
        for (int k = 1; k < size; ++k) {
            const int p = (rank + k) % size;
            const MPI_Aint mine = (MPI_Aint)rank * (WORDS + 2);
            for (int i = 0; i < WORDS; ++i) out[i] = rounds * 1000003 + rank * 1009 + i;
            MPI_Put(out, WORDS, MPI_INT64_T, p, mine, WORDS, MPI_INT64_T, win);
            MPI_Win_flush(p, win);
            MPI_Get(back, WORDS, MPI_INT64_T, p, mine, WORDS, MPI_INT64_T, win);
            MPI_Win_flush(p, win);
            for (int i = 0; i < WORDS; ++i) errors += back[i] != out[i];
            int64_t one = 1, old = -1, compare = rounds, next = rounds + 1, seen = -1;
            MPI_Fetch_and_op(&one, &old, MPI_INT64_T, p, mine + WORDS, MPI_SUM, win);
            MPI_Win_flush(p, win);
            errors += old != rounds;
            MPI_Compare_and_swap(&next, &compare, &seen, MPI_INT64_T, p, mine + WORDS + 1, win);
            MPI_Win_flush(p, win);
            errors += seen != rounds;
        }
        ++rounds;
        if (rounds == 1 && rank == 0) {
            printf("rma_stream: running ranks=%d\n", size);
            fflush(stdout);
        }
        if ((stop != NULL && access(stop, F_OK) == 0) || MPI_Wtime() - t0 > seconds) break;
    }
    MPI_Win_unlock_all(win);
    long total = 0, all_rounds = 0;
    MPI_Reduce(&errors, &total, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Reduce(&rounds, &all_rounds, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf("rma_stream: %s rounds=%ld ranks=%d errors=%ld\n", total ? "FAILED" : "OK", all_rounds, size, total);
    MPI_Win_free(&win);
    free(out), free(back);
    MPI_Finalize();
    return total ? 1 : 0;
}
