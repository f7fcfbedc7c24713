/* SPDX-License-Identifier: BSD-3-Clause
 * Peers that compute: right after MPI_Init every rank but 0 computes for BUSY_SECONDS (argument 1, default 10)
 * without any MPI call, while rank 0 sends one int to each of them (MPI_Isend, then MPI_Waitall): its sends must
 * complete while they compute, whatever the connection timeout. Then every rank receives and verifies its int.
 * Rank 0 prints "busy_peers: OK ranks=N errors=0 sends_done_ms=T busy_s=S", T the time its sends took. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A compute phase: no MPI call, no sleep (a sleeping process would let a progress thread of MPI's own run). */
static double compute(double seconds) {
    volatile double x = 1.0;
    const double end = now_s() + seconds;
    while (now_s() < end)
        for (int i = 0; i < 100000; ++i) x = x * 1.0000001 + 1e-9;
    return x;
}

static int value_for(int rank) {
    return rank * 7919 + 13;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const double busy = argc > 1 ? atof(argv[1]) : 10.0;
    long errors = 0;
    if (rank == 0) {
        int *out = malloc(sizeof(int) * (size_t)size);
        MPI_Request *req = malloc(sizeof(MPI_Request) * (size_t)size);
        const double t0 = now_s();
        for (int peer = 1; peer < size; ++peer) {
            out[peer] = value_for(peer);
            MPI_Isend(&out[peer], 1, MPI_INT, peer, 5, MPI_COMM_WORLD, &req[peer - 1]);
        }
        MPI_Waitall(size - 1, req, MPI_STATUSES_IGNORE);
        const double took = now_s() - t0;
        /* The sends completed while every peer still computed: they did not wait for a peer's MPI call. */
        if (took >= busy) {
            fprintf(stderr, "busy_peers: the sends took %.3f s, as long as the peers computed\n", took);
            ++errors;
        }
        long total = 0;
        MPI_Reduce(&errors, &total, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
        printf("busy_peers: %s ranks=%d errors=%ld sends_done_ms=%.1f busy_s=%.0f\n", total ? "FAILED" : "OK", size,
               total, took * 1000.0, busy);
        fflush(stdout);
        free(out);
        free(req);
        errors = total;
    } else {
        (void)compute(busy);
        int in = -1;
        MPI_Recv(&in, 1, MPI_INT, 0, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (in != value_for(rank)) {
            fprintf(stderr, "busy_peers: rank %d received %d, expected %d\n", rank, in, value_for(rank));
            ++errors;
        }
        MPI_Reduce(&errors, NULL, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    }
    MPI_Finalize();
    return errors ? 1 : 0;
}
