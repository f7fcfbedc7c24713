/* SPDX-License-Identifier: BSD-3-Clause
 * pollers: MPI_THREAD_MULTIPLE where every thread progresses at once. T threads per rank (argument 1, default 4),
 * each on its own duplicate of MPI_COMM_WORLD, exchange a verified 64-byte message with their ring neighbours
 * round after round, waiting with MPI_Iprobe and MPI_Testall loops: those call progress directly, so several
 * threads are in the BTL's progress at once (a blocking wait lets one thread progress at a time in Open MPI 4.1).
 * Runs until the file named by argument 2 exists (at least one round); rank 0 prints "pollers: traffic" after
 * its first thread's first round and "pollers: OK ranks=N threads=T rounds=R errors=0" at the end. */
#include "mix64.h"

#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int rank_, size_;
static const char *stop_file_;

struct worker {
    int index;
    MPI_Comm comm;
    long rounds, errors;
    pthread_t thread;
};

static uint64_t word_at(int src, int thread, long round, int i) {
    return mix64(((uint64_t)src << 48) ^ ((uint64_t)thread << 40) ^ ((uint64_t)round << 8) ^ (uint64_t)i);
}

static void wait_polling(MPI_Request *reqs, int n, MPI_Comm comm) {
    int done = 0;
    while (!done) {
        int flag = 0;
        MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &flag, MPI_STATUS_IGNORE);
        MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE);
    }
}

static void *work(void *arg) {
    struct worker *w = arg;
    const int to = (rank_ + 1) % size_, from = (rank_ + size_ - 1) % size_;
    for (long round = 0;; ++round) {
        uint64_t out[8], in[8];
        for (int i = 0; i < 8; ++i) out[i] = word_at(rank_, w->index, round, i);
        MPI_Request reqs[2];
        MPI_Irecv(in, sizeof(in), MPI_BYTE, from, 1, w->comm, &reqs[0]);
        MPI_Isend(out, sizeof(out), MPI_BYTE, to, 1, w->comm, &reqs[1]);
        wait_polling(reqs, 2, w->comm);
        for (int i = 0; i < 8; ++i)
            if (in[i] != word_at(from, w->index, round, i)) {
                fprintf(stderr, "pollers: rank %d thread %d: round %ld from %d wrong\n", rank_, w->index, round, from);
                ++w->errors;
                break;
            }
        w->rounds = round + 1;
        if (rank_ == 0 && w->index == 0 && round == 0) {
            printf("pollers: traffic\n");
            fflush(stdout);
        }
        /* Every rank stops on the same round: rank 0 looks at the file, the others hear it. */
        int stop = rank_ == 0 && access(stop_file_, F_OK) == 0;
        MPI_Request bcast;
        MPI_Ibcast(&stop, 1, MPI_INT, 0, w->comm, &bcast);
        wait_polling(&bcast, 1, w->comm);
        if (stop) break;
    }
    return NULL;
}

int main(int argc, char **argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    const int nthreads = argc > 1 ? atoi(argv[1]) : 4;
    stop_file_ = argc > 2 ? argv[2] : "/nonexistent";
    if (provided != MPI_THREAD_MULTIPLE || nthreads < 1) {
        if (rank_ == 0) printf("pollers: FAILED MPI_THREAD_MULTIPLE not provided (%d)\n", provided);
        MPI_Finalize();
        return 1;
    }
    struct worker *w = calloc((size_t)nthreads, sizeof(*w));
    for (int t = 0; t < nthreads; ++t) {
        w[t].index = t;
        MPI_Comm_dup(MPI_COMM_WORLD, &w[t].comm);
    }
    for (int t = 0; t < nthreads; ++t) pthread_create(&w[t].thread, NULL, work, &w[t]);
    long errors = 0, rounds = 0;
    for (int t = 0; t < nthreads; ++t) {
        pthread_join(w[t].thread, NULL);
        errors += w[t].errors;
        rounds += w[t].rounds;
        MPI_Comm_free(&w[t].comm);
    }
    long total = 0;
    MPI_Allreduce(&errors, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (rank_ == 0)
        printf("pollers: %s ranks=%d threads=%d rounds=%ld errors=%ld\n", total ? "FAILED" : "OK", size_, nthreads,
               rounds, total);
    free(w);
    MPI_Finalize();
    return total ? 1 : 0;
}
