// SPDX-License-Identifier: BSD-3-Clause
/* Compare-and-swap on one word from its owner and from other nodes at once (osc/rdma): every rank adds 1 to a
 * 64-bit counter on rank 0, CAS_COUNT times (default 2000), each by read then MPI_Compare_and_swap until the swap
 * holds, under MPI_Win_lock_all + flush. Compare-and-swap is atomic with respect to every other on the same location
 * and type (MPI 4.1, 12.7.1), so the counter must end at size * CAS_COUNT. With CAS_INTRINSIC set the window
 * carries the info acc_single_intrinsic=true. A reproducer of osc/rdma's mix of CPU and network atomics
 * (docs/upstream.md, section 7): with one rank per node and a BTL with network atomics, rank 0's own swaps are
 * done by the CPU under its accumulate lock and the remote ones by the network without it, and increments are
 * lost; with acc_single_intrinsic every swap goes through the BTL.
 * Rank 0 prints "rma_cas_mix: OK|LOST final=F expected=E retries=R intrinsic=0|1"; exits 0 only when OK. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *count_text = getenv("CAS_COUNT");
    const int count = count_text != NULL ? atoi(count_text) : 2000;
    const int intrinsic = getenv("CAS_INTRINSIC") != NULL;
    MPI_Info info;
    MPI_Info_create(&info);
    if (intrinsic) MPI_Info_set(info, "acc_single_intrinsic", "true");
    uint64_t *counter;
    MPI_Win win;
    MPI_Win_allocate(sizeof *counter, sizeof *counter, info, MPI_COMM_WORLD, &counter, &win);
    MPI_Info_free(&info);
    *counter = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_lock_all(0, win);
    long retries = 0;
    for (int i = 0; i < count; ++i) {
        uint64_t seen = 0, answer = 0, next;
        MPI_Fetch_and_op(NULL, &seen, MPI_UINT64_T, 0, 0, MPI_NO_OP, win);
        MPI_Win_flush(0, win);
        for (;;) {
            next = seen + 1;
            MPI_Compare_and_swap(&next, &seen, &answer, MPI_UINT64_T, 0, 0, win);
            MPI_Win_flush(0, win);
            if (answer == seen) break;
            seen = answer;
            ++retries;
        }
    }
    MPI_Win_unlock_all(win);
    MPI_Barrier(MPI_COMM_WORLD);
    long all_retries = 0;
    MPI_Reduce(&retries, &all_retries, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    int ok = 1;
    if (rank == 0) {
        const uint64_t expected = (uint64_t)size * (uint64_t)count;
        ok = *counter == expected;
        printf("rma_cas_mix: %s final=%llu expected=%llu retries=%ld intrinsic=%d\n", ok ? "OK" : "LOST",
               (unsigned long long)*counter, (unsigned long long)expected, all_retries, intrinsic);
    }
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Win_free(&win);
    MPI_Finalize();
    return ok ? 0 : 1;
}
