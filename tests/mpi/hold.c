// SPDX-License-Identifier: BSD-3-Clause
/* Connects every pair of ranks (one verified message each way), then holds all connections open until the file
 * named by $HOLD_FILE exists, so a test can count the transport's resources while the job is live. Rank 0 prints
 * "hold: connected" when every pair has exchanged data. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long errors = 0;
    for (int peer = 0; peer < size; ++peer) {
        if (peer == rank) continue;
        int out = rank * 1000 + peer, in = -1;
        MPI_Sendrecv(&out, 1, MPI_INT, peer, 7, &in, 1, MPI_INT, peer, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        errors += in != peer * 1000 + rank;
    }
    long total = 0;
    MPI_Allreduce(&errors, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    const char *file = getenv("HOLD_FILE");
    if (rank == 0) {
        printf("hold: connected ranks=%d errors=%ld\n", size, total);
        fflush(stdout);
        for (int i = 0; file != NULL && access(file, F_OK) != 0 && i < 1200; ++i) usleep(50000);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return total ? 1 : 0;
}
