// SPDX-License-Identifier: BSD-3-Clause
/* Collectives over the BTL under test: alltoall, allreduce and bcast at several sizes, every element checked.
 * Prints "collectives: OK ..." and exits 0 only when every check passed. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long errors = 0;
    const int counts[] = {1, 7, 1024, 65536};
    for (unsigned c = 0; c < sizeof(counts) / sizeof(counts[0]); ++c) {
        const int n = counts[c];
        int32_t *send = malloc(sizeof(int32_t) * n * size), *recv = malloc(sizeof(int32_t) * n * size);
        for (int p = 0; p < size; ++p)
            for (int i = 0; i < n; ++i) send[p * n + i] = rank * 7919 + p * 131 + i;
        MPI_Alltoall(send, n, MPI_INT32_T, recv, n, MPI_INT32_T, MPI_COMM_WORLD);
        for (int p = 0; p < size; ++p)
            for (int i = 0; i < n; ++i) errors += recv[p * n + i] != p * 7919 + rank * 131 + i;

        for (int i = 0; i < n; ++i) send[i] = rank + i;
        MPI_Allreduce(send, recv, n, MPI_INT32_T, MPI_SUM, MPI_COMM_WORLD);
        for (int i = 0; i < n; ++i) errors += recv[i] != size * (size - 1) / 2 + size * i;

        const int root = (int)(c % (unsigned)size);
        for (int i = 0; i < n; ++i) recv[i] = rank == root ? root * 3 + i : -1;
        MPI_Bcast(recv, n, MPI_INT32_T, root, MPI_COMM_WORLD);
        for (int i = 0; i < n; ++i) errors += recv[i] != root * 3 + i;
        free(send);
        free(recv);
    }
    long total = 0;
    MPI_Reduce(&errors, &total, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("collectives: %s ranks=%d errors=%ld\n", total ? "FAILED" : "OK", size, total);
    MPI_Finalize();
    return total ? 1 : 0;
}
