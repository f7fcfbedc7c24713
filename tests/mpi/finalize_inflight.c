// SPDX-License-Identifier: BSD-3-Clause
/* Messages that arrive while their receiver is in MPI_Finalize. Every pair of ranks exchanges one verified message
 * first (connections made). The last rank sends $INFLIGHT_LEAD (default 0) small messages to rank 0, which
 * receives them (ob1 takes its rails in turn: they change the rail the later messages start on). Rank 0 then
 * prints "finalize_inflight: rank 0 enters MPI_Finalize" and enters it. The last rank waits, without MPI calls,
 * until the file $INFLIGHT_GO exists, sends $INFLIGHT_COUNT (default 64, at most 4096) small messages to rank 0,
 * which never receives them (they arrive in its MPI_Finalize, where nothing above the BTL is left to take them),
 * prints "finalize_inflight: sent count=N", and enters MPI_Finalize. Every other rank goes straight to it (with
 * a fence shim it is no barrier). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "every_peer.h"

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long errors = exchange_with_every_peer(rank, size);
    const char *lead_text = getenv("INFLIGHT_LEAD");
    const int lead = lead_text != NULL ? atoi(lead_text) : 0;
    const char *count_text = getenv("INFLIGHT_COUNT");
    int count = count_text != NULL ? atoi(count_text) : 64;
    if (count < 1 || count > 4096) count = 64;
    const int last = size - 1;
    for (int i = 0; i < lead && last != 0; ++i) {
        int word = 0x1ead0000 + i, got = -1;
        if (rank == last) MPI_Send(&word, 1, MPI_INT, 0, 12, MPI_COMM_WORLD);
        if (rank == 0) {
            MPI_Recv(&got, 1, MPI_INT, last, 12, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            errors += got != word;
        }
    }
    if (rank == 0) {
        printf("finalize_inflight: connected ranks=%d errors=%ld\n", size, errors);
        printf("finalize_inflight: rank 0 enters MPI_Finalize\n");
        fflush(stdout);
    } else if (rank == last) {
        const char *go = getenv("INFLIGHT_GO");
        for (int i = 0; go != NULL && access(go, F_OK) != 0 && i < 2400; ++i) usleep(50000);
        for (int i = 0; i < count; ++i) {
            int word[2] = {i, 0x5a000000 + i};
            MPI_Send(word, 2, MPI_INT, 0, 11, MPI_COMM_WORLD);
        }
        printf("finalize_inflight: sent count=%d errors=%ld\n", count, errors);
        fflush(stdout);
    }
    MPI_Finalize();
    return errors != 0 ? 1 : 0;
}
