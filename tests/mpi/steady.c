/* SPDX-License-Identifier: BSD-3-Clause
 * steady: verified all-to-all traffic for a given time (fault tests inject faults while it runs). Each round every
 * rank exchanges one message with every other rank (sizes cycle 64 B, 8 KiB, 256 KiB: inline, eager, rendezvous),
 * each filled with a pattern of (source, destination, round, offset) and checked at the receiver; rank 0 decides
 * after each round whether to go on (the whole job stops on the same round).
 *
 * usage: steady SECONDS [STOP-FILE [BURST]]
 * Runs at least SECONDS, and with STOP-FILE until that file exists too (so a test's faults all land inside the job,
 * however slowly the machine runs them). With BURST > 0, each round also sends BURST small messages to every other
 * rank on a communicator of their own, all with one tag, each carrying (sender, sequence number per pair): the
 * receiver checks it gets every number once and in order (a message delivered twice, or lost, is an error even
 * where the main stream's per-round tags would hide it). STOP-FILE "-": none. Prints "steady: traffic" after the first round, and at the end "steady:
 * OK|FAILED rounds=N errors=E" and the longest pause between two rounds with when it ended (seconds since the epoch);
 * exits non-zero on any error.
 */
#include "mix64.h"

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const size_t kSizes[] = {64, 8192, 262144};

static unsigned char pattern(int src, int dst, long round, size_t i) {
    return (unsigned char)mix64(((uint64_t)src << 48) ^ ((uint64_t)dst << 32) ^ ((uint64_t)round << 20) ^ i);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const double seconds = argc > 1 ? atof(argv[1]) : 8.0;
    const char *stop_file = argc > 2 && strcmp(argv[2], "-") != 0 ? argv[2] : NULL;
    const int burst = argc > 3 ? atoi(argv[3]) : 0;
    MPI_Comm stream;
    MPI_Comm_dup(MPI_COMM_WORLD, &stream);
    uint64_t *bsend = calloc((size_t)size * (size_t)(burst > 0 ? burst : 1) * 2, sizeof(uint64_t));
    uint64_t *brecv = calloc((size_t)size * (size_t)(burst > 0 ? burst : 1) * 2, sizeof(uint64_t));
    uint64_t *next_out = calloc((size_t)size, sizeof(uint64_t)), *next_in = calloc((size_t)size, sizeof(uint64_t));
    long stream_errors = 0;
    const size_t max = kSizes[sizeof(kSizes) / sizeof(kSizes[0]) - 1];
    unsigned char *sbuf = malloc(max * (size_t)size), *rbuf = malloc(max * (size_t)size);
    MPI_Request *reqs = malloc(sizeof(MPI_Request) * 2 * (size_t)size * (size_t)(1 + (burst > 0 ? burst : 0)));
    if (!sbuf || !rbuf || !reqs || !bsend || !brecv || !next_out || !next_in) MPI_Abort(MPI_COMM_WORLD, 2);
    long errors = 0, round = 0;
    const double start = MPI_Wtime();
    /* rank 0: the longest time between two rounds' ends and when it ended (wall clock: a fault test compares it
     * with when its fault ended) */
    double last_end = start, longest_pause = 0, pause_ended = 0;
    int go = 1;
    while (go) {
        const size_t len = kSizes[round % (sizeof(kSizes) / sizeof(kSizes[0]))];
        int n = 0;
        for (int p = 0; p < size; ++p) {
            if (p == rank) continue;
            unsigned char *s = sbuf + max * (size_t)p;
            for (size_t i = 0; i < len; ++i) s[i] = pattern(rank, p, round, i);
            MPI_Irecv(rbuf + max * (size_t)p, (int)len, MPI_BYTE, p, (int)(round & 0x7fff), MPI_COMM_WORLD, &reqs[n++]);
            MPI_Isend(s, (int)len, MPI_BYTE, p, (int)(round & 0x7fff), MPI_COMM_WORLD, &reqs[n++]);
            for (int i = 0; i < burst; ++i) {
                uint64_t *out = bsend + ((size_t)p * (size_t)burst + (size_t)i) * 2;
                out[0] = (uint64_t)rank;
                out[1] = next_out[p]++;
                MPI_Irecv(brecv + ((size_t)p * (size_t)burst + (size_t)i) * 2, 2, MPI_UINT64_T, p, 0, stream,
                          &reqs[n++]);
                MPI_Isend(out, 2, MPI_UINT64_T, p, 0, stream, &reqs[n++]);
            }
        }
        MPI_Waitall(n, reqs, MPI_STATUSES_IGNORE);
        for (int p = 0; p < size; ++p) {
            if (p == rank) continue;
            for (int i = 0; i < burst; ++i) {
                const uint64_t *in = brecv + ((size_t)p * (size_t)burst + (size_t)i) * 2;
                if (in[0] != (uint64_t)p || in[1] != next_in[p]) {
                    if (stream_errors < 5)
                        fprintf(stderr,
                                "steady: rank %d: stream from %d: got (sender %llu, seq %llu), expected seq %llu: "
                                "a message %s\n",
                                rank, p, (unsigned long long)in[0], (unsigned long long)in[1],
                                (unsigned long long)next_in[p], in[1] < next_in[p] ? "delivered twice" : "lost");
                    ++stream_errors;
                    ++errors;
                    next_in[p] = in[1];  /* resynchronize: one error per fault */
                }
                ++next_in[p];
            }
            const unsigned char *r = rbuf + max * (size_t)p;
            for (size_t i = 0; i < len; ++i)
                if (r[i] != pattern(p, rank, round, i)) {
                    if (errors < 5)
                        fprintf(stderr, "steady: rank %d: round %ld from %d: byte %zu differs\n", rank, round, p, i);
                    ++errors;
                    break;
                }
        }
        if (round == 0 && rank == 0) {
            printf("steady: traffic\n");
            fflush(stdout);
        }
        if (rank == 0) {
            const double now = MPI_Wtime();
            if (now - last_end > longest_pause) {
                struct timespec wall;
                clock_gettime(CLOCK_REALTIME, &wall);
                longest_pause = now - last_end;
                pause_ended = (double)wall.tv_sec + wall.tv_nsec / 1e9;
            }
            last_end = now;
        }
        ++round;
        go = MPI_Wtime() - start < seconds || (stop_file != NULL && access(stop_file, F_OK) != 0);
        MPI_Bcast(&go, 1, MPI_INT, 0, MPI_COMM_WORLD);
    }
    long total = 0, stream_total = 0, checked = 0, checked_total = 0;
    for (int p = 0; p < size; ++p) checked += (long)next_in[p];
    MPI_Allreduce(&errors, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&stream_errors, &stream_total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&checked, &checked_total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("steady: %s rounds=%ld errors=%ld\n", total ? "FAILED" : "OK", round, total);
    if (rank == 0 && burst > 0)
        printf("steady: stream messages=%ld out_of_sequence=%ld\n", checked_total, stream_total);
    if (rank == 0) printf("steady: longest pause %.3f s, ended at %.3f\n", longest_pause, pause_ended);
    MPI_Comm_free(&stream);
    free(bsend);
    free(brecv);
    free(next_out);
    free(next_in);
    free(sbuf);
    free(rbuf);
    free(reqs);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    MPI_Finalize();
    clock_gettime(CLOCK_MONOTONIC, &t1);
    // Every rank's own time: after a fault, the ranks that lost a rail are the ones whose finalize may wait.
    char host[64] = "";
    gethostname(host, sizeof(host) - 1);
    printf("steady: finalize %.3f s (rank %d on %s)\n", (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9,
           rank, host);
    return total ? 1 : 0;
}
