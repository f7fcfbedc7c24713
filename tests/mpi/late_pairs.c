/* SPDX-License-Identifier: BSD-3-Clause
 * late_pairs: connections made late. The even ranks exchange verified messages among themselves (a communicator of
 * their own) while the odd ranks make no MPI call until GO-FILE exists; then every pair of ranks exchanges one
 * verified integer, so each odd rank's first connections are made only after the go (a test changes something
 * about the fabric in between, for example a port's LID).
 *
 * usage: late_pairs GO-FILE
 * Prints "late_pairs: traffic" once the even ranks have talked, and at the end "late_pairs: OK|FAILED pairs=N
 * errors=E" (rank 0); exits non-zero on any error.
 */
#include "every_peer.h"

#include <mpi.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc != 2) {
        if (rank == 0) fprintf(stderr, "usage: late_pairs GO-FILE\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    long errors = 0;
    if (rank % 2 == 0) {
        MPI_Group world, even;
        MPI_Comm_group(MPI_COMM_WORLD, &world);
        int ranges[1][3] = {{0, size - 1, 2}};
        MPI_Group_range_incl(world, 1, ranges, &even);
        MPI_Comm evens;
        MPI_Comm_create_group(MPI_COMM_WORLD, even, 11, &evens);
        int mine = rank, sum = -1, expected = 0;
        for (int r = 0; r < size; r += 2) expected += r;
        MPI_Allreduce(&mine, &sum, 1, MPI_INT, MPI_SUM, evens);
        errors += sum != expected;
        if (rank == 0) {
            printf("late_pairs: traffic\n");
            fflush(stdout);
        }
        MPI_Comm_free(&evens);
        MPI_Group_free(&even);
        MPI_Group_free(&world);
    } else {
        while (access(argv[1], F_OK) != 0) usleep(100000);  // no MPI call until the go
    }
    errors += exchange_with_every_peer(rank, size);
    long total = 0;
    MPI_Reduce(&errors, &total, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("late_pairs: %s pairs=%d errors=%ld\n", total == 0 ? "OK" : "FAILED", size * (size - 1) / 2, total);
    MPI_Finalize();
    return total != 0;
}
