/* SPDX-License-Identifier: BSD-3-Clause
 * MPI_THREAD_MULTIPLE: T threads per rank (argument 1, default 4), each on its own duplicate of MPI_COMM_WORLD,
 * all at once: MPI_Sendrecv with every other rank at every size class (8 B inline, 1 KiB eager, 8 KiB SRQ,
 * 64 KiB and 1 MiB rendezvous), wildcard receives (MPI_ANY_SOURCE, MPI_ANY_TAG) of a message from every other
 * rank, and an MPI_Allreduce of what each thread received, for ITERS rounds (argument 2, default 3). Every byte is
 * verified against its coordinates (mix64.h). Rank 0 prints "threads: OK ranks=N threads=T errors=0". */
#include "mix64.h"

#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int kSizes[] = {8, 1000, 8000, 65536, 1 << 20};
#define NSIZES ((int)(sizeof(kSizes) / sizeof(kSizes[0])))

static int rank_, size_, iters_;

struct worker {
    int index;
    MPI_Comm comm;
    long errors;
    pthread_t thread;
};

static uint64_t word_at(int src, int dst, int thread, int bytes, int iter, size_t i) {
    return mix64(((uint64_t)src << 48) ^ ((uint64_t)dst << 36) ^ ((uint64_t)thread << 28) ^ ((uint64_t)bytes << 4) ^
                 (uint64_t)iter ^ ((uint64_t)i << 20) ^ 0x9e3779b97f4a7c15ULL);
}

static void fill(unsigned char *b, int src, int dst, int thread, int bytes, int iter) {
    for (int i = 0; i < bytes; i += 8) {
        const uint64_t w = word_at(src, dst, thread, bytes, iter, (size_t)i);
        memcpy(b + i, &w, (size_t)(bytes - i < 8 ? bytes - i : 8));
    }
}

static long check(const unsigned char *b, int src, int dst, int thread, int bytes, int iter) {
    for (int i = 0; i < bytes; i += 8) {
        const uint64_t w = word_at(src, dst, thread, bytes, iter, (size_t)i);
        if (memcmp(b + i, &w, (size_t)(bytes - i < 8 ? bytes - i : 8)) != 0) return 1;
    }
    return 0;
}

static void *work(void *arg) {
    struct worker *w = arg;
    const int max = kSizes[NSIZES - 1];
    unsigned char *out = malloc((size_t)max), *in = malloc((size_t)max);
    for (int iter = 0; iter < iters_; ++iter) {
        /* Point-to-point: in step k, send to rank+k and receive from rank-k (a pairing that never deadlocks). */
        for (int s = 0; s < NSIZES; ++s) {
            const int bytes = kSizes[s];
            for (int k = 1; k < size_; ++k) {
                const int to = (rank_ + k) % size_, from = (rank_ - k + size_) % size_;
                fill(out, rank_, to, w->index, bytes, iter);
                memset(in, 0, (unsigned)bytes);
                MPI_Status st;
                MPI_Sendrecv(out, bytes, MPI_BYTE, to, s, in, bytes, MPI_BYTE, from, s, w->comm, &st);
                int count = -1;
                MPI_Get_count(&st, MPI_BYTE, &count);
                if (count != bytes || check(in, from, rank_, w->index, bytes, iter)) {
                    fprintf(stderr, "threads: rank %d thread %d: %d bytes from %d wrong (count %d)\n", rank_, w->index,
                            bytes, from, count);
                    ++w->errors;
                }
            }
        }
        /* Wildcards: one 64-byte message from every other rank, tag = sender + 100, received in any order. */
        MPI_Request *req = malloc(sizeof(MPI_Request) * (size_t)size_);
        unsigned char(*outs)[64] = malloc((size_t)size_ * 64);
        int n = 0;
        for (int to = 0; to < size_; ++to) {
            if (to == rank_) continue;
            fill(outs[to], rank_, to, w->index, 64, iter + 1000);
            MPI_Isend(outs[to], 64, MPI_BYTE, to, rank_ + 100, w->comm, &req[n++]);
        }
        long sum = 0;
        for (int i = 0; i < size_ - 1; ++i) {
            unsigned char buf[64];
            MPI_Status st;
            MPI_Recv(buf, 64, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, w->comm, &st);
            if (st.MPI_TAG != st.MPI_SOURCE + 100 || check(buf, st.MPI_SOURCE, rank_, w->index, 64, iter + 1000)) {
                fprintf(stderr, "threads: rank %d thread %d: wildcard message from %d (tag %d) wrong\n", rank_,
                        w->index, st.MPI_SOURCE, st.MPI_TAG);
                ++w->errors;
            }
            sum += st.MPI_SOURCE;
        }
        MPI_Waitall(n, req, MPI_STATUSES_IGNORE);
        free(req);
        free(outs);
        /* A collective on the thread's communicator: the sum over ranks of the sources each received from. */
        long total = 0;
        MPI_Allreduce(&sum, &total, 1, MPI_LONG, MPI_SUM, w->comm);
        const long want = (long)(size_ - 1) * size_ * (size_ - 1) / 2;
        if (total != want) {
            fprintf(stderr, "threads: rank %d thread %d: allreduce gave %ld, expected %ld\n", rank_, w->index, total,
                    want);
            ++w->errors;
        }
    }
    free(out);
    free(in);
    return NULL;
}

int main(int argc, char **argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    const int nthreads = argc > 1 ? atoi(argv[1]) : 4;
    iters_ = argc > 2 ? atoi(argv[2]) : 3;
    if (provided != MPI_THREAD_MULTIPLE) {
        if (rank_ == 0) printf("threads: FAILED MPI_THREAD_MULTIPLE not provided (%d)\n", provided);
        MPI_Finalize();
        return 1;
    }
    struct worker *w = calloc((size_t)nthreads, sizeof(*w));
    for (int t = 0; t < nthreads; ++t) { /* collective: in the same order on every rank, before the threads */
        w[t].index = t;
        MPI_Comm_dup(MPI_COMM_WORLD, &w[t].comm);
    }
    for (int t = 0; t < nthreads; ++t) pthread_create(&w[t].thread, NULL, work, &w[t]);
    long errors = 0;
    for (int t = 0; t < nthreads; ++t) {
        pthread_join(w[t].thread, NULL);
        errors += w[t].errors;
        MPI_Comm_free(&w[t].comm);
    }
    long total = 0;
    MPI_Allreduce(&errors, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (rank_ == 0)
        printf("threads: %s ranks=%d threads=%d iters=%d errors=%ld\n", total ? "FAILED" : "OK", size_, nthreads,
               iters_, total);
    free(w);
    MPI_Finalize();
    return total ? 1 : 0;
}
