// SPDX-License-Identifier: BSD-3-Clause
/* A sender that is alive but late into MPI_Finalize sends a last burst to a rank of a node whose other rank (the
 * one that made the sender's TGT QP) has left already. Every pair of ranks exchanges one verified message first
 * (connections made). Rank 0 then waits, without MPI calls, until the file $LATE_BURST_GO exists, sends
 * $LATE_BURST_COUNT (default 16) small verified messages (inline sends: unsignaled unless the transport says
 * otherwise) to the last rank, prints "late_burst: burst sent", and enters MPI_Finalize at once. The last rank
 * receives them (60 s at most) and prints "late_burst: received count=N errors=E". Every other rank goes straight
 * to MPI_Finalize (with a fence shim it is no barrier). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "every_peer.h"

enum { kMaxBurst = 256 };

static double seconds_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long errors = exchange_with_every_peer(rank, size);
    const char *count_text = getenv("LATE_BURST_COUNT");
    int count = count_text != NULL ? atoi(count_text) : 16;
    if (count < 1 || count > kMaxBurst) count = 16;
    const int to = size - 1;
    static int burst[kMaxBurst][2];
    if (rank == 0) {
        printf("late_burst: connected ranks=%d errors=%ld\n", size, errors);
        fflush(stdout);
        const char *go = getenv("LATE_BURST_GO");
        for (int i = 0; go != NULL && access(go, F_OK) != 0 && i < 2400; ++i) usleep(50000);
        for (int i = 0; i < count; ++i) {
            burst[i][0] = i;
            burst[i][1] = 0x5a000000 + i * 7919;
            MPI_Send(burst[i], 2, MPI_INT, to, 11, MPI_COMM_WORLD);
        }
        printf("late_burst: burst sent count=%d\n", count);
        fflush(stdout);
    } else if (rank == to) {
        MPI_Request requests[kMaxBurst];
        for (int i = 0; i < count; ++i) {
            burst[i][0] = burst[i][1] = -1;
            MPI_Irecv(burst[i], 2, MPI_INT, 0, 11, MPI_COMM_WORLD, &requests[i]);
        }
        const double deadline = seconds_now() + 60;
        int done = 0;
        while (!done && seconds_now() < deadline) {
            MPI_Testall(count, requests, &done, MPI_STATUSES_IGNORE);
            if (!done) usleep(1000);
        }
        int received = 0;
        for (int i = 0; i < count; ++i) {
            received += burst[i][0] != -1;
            errors += burst[i][0] != i || burst[i][1] != 0x5a000000 + i * 7919;
        }
        printf("late_burst: received count=%d errors=%ld%s\n", received, errors, done ? "" : " (gave up after 60 s)");
        fflush(stdout);
        if (!done) MPI_Abort(MPI_COMM_WORLD, 3);
    }
    MPI_Finalize();
    return errors != 0 ? 1 : 0;
}
