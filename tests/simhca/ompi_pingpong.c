// SPDX-License-Identifier: BSD-3-Clause
/* MPI ping-pong with data checking, used by ompi-openib.sh to drive Open MPI's openib BTL (UD connection
 * manager, RC QPs, SRQs, RDMA pipelines) through the software HCA. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int r, n; MPI_Comm_rank(MPI_COMM_WORLD, &r); MPI_Comm_size(MPI_COMM_WORLD, &n);
    int sizes[] = {8, 4096, 65536, 1 << 20};
    for (int s = 0; s < 4; ++s) {
        int len = sizes[s]; char *b = malloc(len);
        int iters = len > 100000 ? 50 : 500;
        double t0 = MPI_Wtime();
        for (int i = 0; i < iters; ++i) {
            if (r == 0) { memset(b, i, len); MPI_Send(b, len, MPI_CHAR, 1, 0, MPI_COMM_WORLD); MPI_Recv(b, len, MPI_CHAR, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE); if (b[len-1] != (char)(i+1)) { printf("BAD DATA\n"); MPI_Abort(MPI_COMM_WORLD, 1);} }
            else { MPI_Recv(b, len, MPI_CHAR, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE); memset(b, i+1, len); MPI_Send(b, len, MPI_CHAR, 0, 0, MPI_COMM_WORLD); }
        }
        double t = MPI_Wtime() - t0;
        if (r == 0) printf("%8d bytes: %.2f us half-RTT, %.1f MB/s\n", len, t / iters / 2 * 1e6, 2.0 * len * iters / t / 1e6);
        free(b);
    }
    MPI_Finalize();
    return 0;
}
