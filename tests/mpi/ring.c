// SPDX-License-Identifier: BSD-3-Clause
/*
 * ring: a sparse pattern, the one connections on demand are for. Every rank exchanges messages with its two
 * neighbours on a periodic ring (rank - stride and rank + stride, `--stride` ranks away: with block mapping and a
 * stride of ranks-per-node every rank talks to the two neighbouring nodes, a 1-D stencil), at several sizes (eager,
 * and rendezvous through RDMA), every payload a pattern derived from (src, dst, size, iteration) and checked
 * byte for byte. No collective touches other pairs. Each rank prints one line:
 *   "ring: rank R ok first=T.TTTTTT s errors=0"
 * where `first` is how long the first exchange (connections being made) took after MPI_Init. With $HOLD_FILE
 * set, every rank then keeps its connections until that file exists (resource counts); rank 0 prints
 * "ring: holding" first.
 *
 * usage: ring [--iters N] [--stride S]
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mix64.h"

static unsigned char byte_at(int src, int dst, size_t size, int iter, size_t i)
{
    const uint64_t seed = mix64(((uint64_t)src << 40) ^ ((uint64_t)dst << 20) ^ (uint64_t)size ^ ((uint64_t)iter << 60));
    return (unsigned char)(mix64(seed + i / 8) >> (8 * (i % 8)));
}

int main(int argc, char **argv)
{
    int iters = 3, stride = 1;
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--iters") && i + 1 < argc)
            iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--stride") && i + 1 < argc)
            stride = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: ring [--iters N] [--stride S]\n");
            return 2;
        }
    }
    MPI_Init(&argc, &argv);
    const double start = MPI_Wtime();
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const int left = ((rank - stride) % size + size) % size, right = (rank + stride) % size;
    static const size_t sizes[] = {8, 4096, 65536, 1 << 20};
    const size_t max = sizes[sizeof sizes / sizeof sizes[0] - 1];
    unsigned char *out_l = malloc(max), *out_r = malloc(max), *in_l = malloc(max), *in_r = malloc(max);
    if (!out_l || !out_r || !in_l || !in_r) MPI_Abort(MPI_COMM_WORLD, 2);
    long errors = 0;
    double first = -1;
    for (int it = 0; it < iters; ++it) {
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; ++k) {
            const size_t n = sizes[k];
            for (size_t i = 0; i < n; ++i) {
                out_l[i] = byte_at(rank, left, n, it, i);
                out_r[i] = byte_at(rank, right, n, it, i);
            }
            MPI_Request req[4];
            MPI_Irecv(in_l, (int)n, MPI_BYTE, left, 1, MPI_COMM_WORLD, &req[0]);
            MPI_Irecv(in_r, (int)n, MPI_BYTE, right, 2, MPI_COMM_WORLD, &req[1]);
            MPI_Isend(out_r, (int)n, MPI_BYTE, right, 1, MPI_COMM_WORLD, &req[2]);
            MPI_Isend(out_l, (int)n, MPI_BYTE, left, 2, MPI_COMM_WORLD, &req[3]);
            MPI_Waitall(4, req, MPI_STATUSES_IGNORE);
            if (first < 0) first = MPI_Wtime() - start;
            for (size_t i = 0; i < n; ++i) {
                errors += in_l[i] != byte_at(left, rank, n, it, i);
                errors += in_r[i] != byte_at(right, rank, n, it, i);
            }
        }
    }
    printf("ring: rank %d %s first=%.6f s errors=%ld\n", rank, errors ? "FAILED" : "ok", first, errors);
    fflush(stdout);
    const char *file = getenv("HOLD_FILE");
    if (file != NULL) {
        if (rank == 0) {
            printf("ring: holding\n");
            fflush(stdout);
        }
        for (int i = 0; access(file, F_OK) != 0 && i < 2400; ++i) usleep(50000);
    }
    free(out_l);
    free(out_r);
    free(in_l);
    free(in_r);
    MPI_Finalize();
    return errors ? 1 : 0;
}
