// SPDX-License-Identifier: BSD-3-Clause
/* Connects every pair of ranks (one verified message each way), then holds all connections open until the file
 * named by $HOLD_FILE exists, so a test can count the transport's resources while the job is live. Rank 0 prints
 * "hold: connected" when every pair has exchanged data. With $HOLD_LAST_SEND set, rank 0 then sends one last
 * message to the last rank (MPI_Isend, MPI_Request_free: nobody waits for it, MPI still owes its delivery) and
 * every rank goes straight to MPI_Finalize, where that message (1 KiB) is still draining (fault tests); with
 * $HOLD_LAST_RECV set too, the last rank receives it first (and checks it). With $HOLD_SLOW_FINALIZE=S rank 0 enters
 * MPI_Finalize S seconds late, and each rank prints "hold: rank R finalize took T s". With $HOLD_SMALL_EXCHANGE set,
 * rank 0 and the last rank exchange 8 bytes first (below). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "every_peer.h"

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long errors = exchange_with_every_peer(rank, size);
    long total = 0;
    MPI_Allreduce(&errors, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    const char *file = getenv("HOLD_FILE");
    if (rank == 0) {
        printf("hold: connected ranks=%d errors=%ld\n", size, total);
        fflush(stdout);
        for (int i = 0; file != NULL && access(file, F_OK) != 0 && i < 1200; ++i) usleep(50000);
    }
    /* $HOLD_SMALL_EXCHANGE: rank 0 sends 8 bytes to the last rank (sent inline: ob1 hears at once that it is sent)
     * and waits for 8 bytes back, which the last rank sends once it has rank 0's. A fault test refuses rank 0's
     * message in the HCA: both ranks then wait for each other unless the BTL ends the job. */
    if (getenv("HOLD_SMALL_EXCHANGE") != NULL && size > 1) {
        long word = 42;
        if (rank == 0) {
            MPI_Send(&word, 1, MPI_LONG, size - 1, 8, MPI_COMM_WORLD);
            MPI_Recv(&word, 1, MPI_LONG, size - 1, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            printf("hold: small exchange done (%ld)\n", word);
            fflush(stdout);
        } else if (rank == size - 1) {
            MPI_Recv(&word, 1, MPI_LONG, 0, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            ++word;
            MPI_Send(&word, 1, MPI_LONG, 0, 8, MPI_COMM_WORLD);
        }
    }
    /* 1 KiB: past ob1's inline sends (256 bytes), so it is a fragment the BTL keeps until it completes. */
    static int last[256];
    for (int i = 0; i < 256; ++i) last[i] = 42 + i;
    if (getenv("HOLD_LAST_SEND") != NULL) {
        if (rank == 0) {
            MPI_Request request;
            MPI_Isend(last, 256, MPI_INT, size - 1, 9, MPI_COMM_WORLD, &request);
            MPI_Request_free(&request);
        } else if (rank == size - 1 && getenv("HOLD_LAST_RECV") != NULL) {
            /* A correct program receives it before its MPI_Finalize: rank 0's finalize must deliver it. */
            int got[256] = {0}, wrong = 0;
            MPI_Recv(got, 256, MPI_INT, 0, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            for (int i = 0; i < 256; ++i) wrong += got[i] != last[i];
            printf("hold: rank %d received the last message: %s\n", rank, wrong == 0 ? "right" : "WRONG");
            fflush(stdout);
            if (wrong != 0) total = 1;
        }
    } else {
        MPI_Barrier(MPI_COMM_WORLD);
    }
    /* $HOLD_SLOW_FINALIZE=S: rank 0 reaches MPI_Finalize S seconds after the others (alive but slow), and every rank
     * says how long its MPI_Finalize took. */
    const char *slow = getenv("HOLD_SLOW_FINALIZE");
    if (slow != NULL && rank == 0) sleep((unsigned)atoi(slow));
    struct timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    MPI_Finalize();
    clock_gettime(CLOCK_MONOTONIC, &end);
    if (slow != NULL) {
        printf("hold: rank %d finalize took %.2f s\n", rank,
               (double)(end.tv_sec - start.tv_sec) + (double)(end.tv_nsec - start.tv_nsec) / 1e9);
        fflush(stdout);
    }
    return total ? 1 : 0;
}
