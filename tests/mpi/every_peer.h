// SPDX-License-Identifier: BSD-3-Clause
/* One verified integer with every other rank of MPI_COMM_WORLD (a pairwise Sendrecv): connects every pair of a
 * test program before its own pattern starts. Returns the number of wrong values received. */
#pragma once
#include <mpi.h>

static long exchange_with_every_peer(int rank, int size) {
    long errors = 0;
    for (int peer = 0; peer < size; ++peer) {
        if (peer == rank) continue;
        int out = rank * 1000 + peer, in = -1;
        MPI_Sendrecv(&out, 1, MPI_INT, peer, 7, &in, 1, MPI_INT, peer, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        errors += in != peer * 1000 + rank;
    }
    return errors;
}
