// SPDX-License-Identifier: BSD-3-Clause
/* Smoke test program: every rank exchanges messages of several sizes with every other rank and verifies a
 * checksum of the payload. Prints "ring: OK ..." and exits 0 only if every byte arrived intact. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned char pattern(int src, int dst, size_t size, size_t i) {
    return (unsigned char)((src * 131 + dst * 31 + size * 7 + i * 13) & 0xff);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const size_t sizes[] = {0, 1, 7, 64, 4096, 12289, 65536, 1 << 20};
    const size_t max = 1 << 20;
    unsigned char *sbuf = malloc(max), *rbuf = malloc(max);
    long errors = 0, messages = 0;
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); ++s) {
        for (int peer = 0; peer < size; ++peer) {
            if (peer == rank) continue;
            for (size_t i = 0; i < sizes[s]; ++i) sbuf[i] = pattern(rank, peer, sizes[s], i);
            memset(rbuf, 0, sizes[s]);
            MPI_Sendrecv(sbuf, (int)sizes[s], MPI_BYTE, peer, (int)s, rbuf, (int)sizes[s], MPI_BYTE, peer, (int)s,
                         MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            for (size_t i = 0; i < sizes[s]; ++i) errors += rbuf[i] != pattern(peer, rank, sizes[s], i);
            ++messages;
        }
    }
    long total_errors = 0, total_messages = 0;
    MPI_Reduce(&errors, &total_errors, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Reduce(&messages, &total_messages, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("ring: %s ranks=%d messages=%ld errors=%ld\n", total_errors ? "FAILED" : "OK", size,
                          total_messages, total_errors);
    free(sbuf);
    free(rbuf);
    MPI_Finalize();
    return total_errors ? 1 : 0;
}
