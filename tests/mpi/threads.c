/* SPDX-License-Identifier: BSD-3-Clause
 * MPI_THREAD_MULTIPLE: T threads per rank (argument 1, default 4), each on its own duplicate of MPI_COMM_WORLD,
 * all at once: MPI_Sendrecv with every other rank at every size class (8 B inline, 1 KiB eager, 8 KiB SRQ,
 * 64 KiB and 1 MiB rendezvous), wildcard receives (MPI_ANY_SOURCE, MPI_ANY_TAG) of a message from every other
 * rank, and an MPI_Allreduce of what each thread received, for ITERS rounds (argument 2, default 3). Every byte is
 * verified against its coordinates (mix64.h). With a third argument "rma", each thread also has its own window
 * (MPI_Win_allocate on its communicator) and, every round, puts a block into its slot at every other rank under a
 * shared lock, reads every other rank's block back with MPI_Get, and adds to a counter at rank 0 with
 * MPI_Fetch_and_op; the blocks and the counter are verified. Rank 0 prints "threads: OK ranks=N threads=T
 * errors=0".
 * With THREADS_STOP_FILE set in the environment (point-to-point only), every thread goes on past ITERS rounds
 * until that file exists (rank 0's threads look, and tell the others through their round's collective), so that a
 * test's faults land while every thread has traffic in flight; rank 0 prints "threads: traffic" after its first
 * thread's first round.
 * With a third argument "shared", the threads share MPI_COMM_WORLD and one tag instead, as threaded applications
 * often do: every round, each thread posts receives from any source for as many messages as it will be sent, then
 * sends SHARED_BURST blocking MPI_Sends of every shared size class to every other rank, then waits; any thread's
 * receive may take any thread's message. Each message names its sender, thread, round, size and position; the
 * receiver checks its bytes and adds its id to a sum and a count, which must equal, per rank, those of every
 * message sent to it: nothing lost, nothing twice. */
#include "mix64.h"

#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const int kSizes[] = {8, 1000, 8000, 65536, 1 << 20};
#define NSIZES ((int)(sizeof(kSizes) / sizeof(kSizes[0])))

static int rank_, size_, iters_, rma_, shared_;
static const char *stop_file_; /* THREADS_STOP_FILE: go on until it exists */
#define RMA_BLOCK 4096         /* bytes each rank puts into its slot of every other rank's window */

struct worker {
    int index;
    MPI_Comm comm;
    MPI_Win win;         /* rma_ only: size_ slots of RMA_BLOCK bytes, then one long counter */
    unsigned char *base; /* the window's memory */
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
    for (int iter = 0; iter < iters_ || stop_file_ != NULL; ++iter) {
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
        if (stop_file_ != NULL) {
            if (rank_ == 0 && w->index == 0 && iter == 0) {
                printf("threads: traffic\n");
                fflush(stdout);
            }
            int stop = rank_ == 0 && iter + 1 >= iters_ && access(stop_file_, F_OK) == 0;
            MPI_Allreduce(MPI_IN_PLACE, &stop, 1, MPI_INT, MPI_MAX, w->comm);
            if (stop) break;
        }
    }
    free(out);
    free(in);
    return NULL;
}

/* One round of one-sided traffic on the thread's own window: puts into every peer's slot for this rank, a
 * barrier, then the blocks other ranks put here are checked locally, every peer's block for this rank is read
 * back with MPI_Get, and rank 0's counter gets one MPI_Fetch_and_op per rank. */
static void rma_round(struct worker *w, int iter) {
    const int block_tag = 2000 + iter;
    unsigned char out[RMA_BLOCK], back[RMA_BLOCK];
    for (int k = 1; k < size_; ++k) {
        const int to = (rank_ + k) % size_;
        fill(out, rank_, to, w->index, RMA_BLOCK, block_tag);
        MPI_Win_lock(MPI_LOCK_SHARED, to, 0, w->win);
        MPI_Put(out, RMA_BLOCK, MPI_BYTE, to, (MPI_Aint)rank_ * RMA_BLOCK, RMA_BLOCK, MPI_BYTE, w->win);
        MPI_Win_unlock(to, w->win);
    }
    long one = 1, before = -1;
    MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, w->win);
    MPI_Fetch_and_op(&one, &before, MPI_LONG, 0, (MPI_Aint)size_ * RMA_BLOCK, MPI_SUM, w->win);
    MPI_Win_unlock(0, w->win);
    if (before < 0 || before >= (long)(iter + 1) * size_) {
        fprintf(stderr, "threads: rank %d thread %d: counter read %ld in round %d\n", rank_, w->index, before, iter);
        ++w->errors;
    }
    MPI_Barrier(w->comm);
    MPI_Win_lock(MPI_LOCK_EXCLUSIVE, rank_, 0, w->win);
    for (int from = 0; from < size_; ++from) {
        if (from != rank_ && check(w->base + (size_t)from * RMA_BLOCK, from, rank_, w->index, RMA_BLOCK, block_tag)) {
            fprintf(stderr, "threads: rank %d thread %d: block put by %d wrong\n", rank_, w->index, from);
            ++w->errors;
        }
    }
    MPI_Win_unlock(rank_, w->win);
    for (int k = 1; k < size_; ++k) {
        const int peer = (rank_ + k) % size_;
        memset(back, 0, sizeof(back));
        MPI_Win_lock(MPI_LOCK_SHARED, peer, 0, w->win);
        MPI_Get(back, RMA_BLOCK, MPI_BYTE, peer, (MPI_Aint)rank_ * RMA_BLOCK, RMA_BLOCK, MPI_BYTE, w->win);
        MPI_Win_unlock(peer, w->win);
        if (check(back, rank_, peer, w->index, RMA_BLOCK, block_tag)) {
            fprintf(stderr, "threads: rank %d thread %d: block read back from %d wrong\n", rank_, w->index, peer);
            ++w->errors;
        }
    }
    MPI_Barrier(w->comm); /* nobody puts the next round's blocks before everyone has read this round's */
}

static void *work_with_rma(void *arg) {
    struct worker *w = arg;
    work(arg);
    for (int iter = 0; iter < iters_; ++iter) rma_round(w, iter);
    return NULL;
}

/* shared: 8 B inline, 1000 B eager through a fragment, 8000 B the largest eager class or rendezvous */
static const int kSharedSizes[] = {8, 1000, 8000};
#define NSHARED ((int)(sizeof(kSharedSizes) / sizeof(kSharedSizes[0])))
#define SHARED_BURST 16
#define SHARED_TAG 7
static pthread_mutex_t shared_mutex = PTHREAD_MUTEX_INITIALIZER;
static uint64_t shared_sum, shared_count; /* ids of the messages this rank received, under shared_mutex */

static uint64_t shared_id(int src, int thread, int iter, int s, int k) {
    return ((uint64_t)src << 40) | ((uint64_t)thread << 28) | ((uint64_t)iter << 12) | ((uint64_t)s << 8) | (uint64_t)k;
}

/* A message of `bytes`: its id, then words derived from it. */
static void shared_fill(unsigned char *b, uint64_t id, int bytes) {
    memcpy(b, &id, sizeof(id));
    for (int i = 8; i < bytes; i += 8) {
        const uint64_t v = mix64(id ^ ((uint64_t)i << 48));
        memcpy(b + i, &v, (size_t)(bytes - i < 8 ? bytes - i : 8));
    }
}

static void *work_shared(void *arg) {
    struct worker *w = arg;
    const int max = kSharedSizes[NSHARED - 1], n = (size_ - 1) * SHARED_BURST * NSHARED;
    unsigned char *out = malloc((size_t)max), *in = malloc((size_t)max * (size_t)n);
    MPI_Request *req = malloc(sizeof(MPI_Request) * (size_t)n);
    MPI_Status *st = malloc(sizeof(MPI_Status) * (size_t)n);
    for (int iter = 0; iter < iters_; ++iter) {
        for (int i = 0; i < n; ++i)
            MPI_Irecv(in + (size_t)i * max, max, MPI_BYTE, MPI_ANY_SOURCE, SHARED_TAG, MPI_COMM_WORLD, &req[i]);
        for (int s = 0; s < NSHARED; ++s)
            for (int k = 0; k < SHARED_BURST; ++k)
                for (int d = 1; d < size_; ++d) {
                    shared_fill(out, shared_id(rank_, w->index, iter, s, k), kSharedSizes[s]);
                    MPI_Send(out, kSharedSizes[s], MPI_BYTE, (rank_ + d) % size_, SHARED_TAG, MPI_COMM_WORLD);
                }
        MPI_Waitall(n, req, st);
        uint64_t sum = 0;
        for (int i = 0; i < n; ++i) {
            const unsigned char *b = in + (size_t)i * max;
            uint64_t id = 0;
            memcpy(&id, b, sizeof(id));
            const int s = (int)((id >> 8) & 0xf), src = (int)(id >> 40);
            int count = -1;
            MPI_Get_count(&st[i], MPI_BYTE, &count);
            unsigned char want[8000];
            if (s < NSHARED) shared_fill(want, id, kSharedSizes[s]);
            if (s >= NSHARED || src != st[i].MPI_SOURCE || count != kSharedSizes[s] || memcmp(b, want, (size_t)count)) {
                fprintf(stderr, "threads: rank %d thread %d: shared message %d from %d wrong (id %llx, %d bytes)\n",
                        rank_, w->index, i, st[i].MPI_SOURCE, (unsigned long long)id, count);
                ++w->errors;
            }
            sum += mix64(id);
        }
        pthread_mutex_lock(&shared_mutex);
        shared_sum += sum;
        shared_count += (uint64_t)n;
        pthread_mutex_unlock(&shared_mutex);
    }
    free(out), free(in), free(req), free(st);
    return NULL;
}

/* What this rank must have received in shared mode: every message of every other rank's threads, once. */
static long shared_check(int nthreads) {
    uint64_t sum = 0, count = 0;
    for (int src = 0; src < size_; ++src)
        for (int t = 0; src != rank_ && t < nthreads; ++t)
            for (int iter = 0; iter < iters_; ++iter)
                for (int s = 0; s < NSHARED; ++s)
                    for (int k = 0; k < SHARED_BURST; ++k, ++count) sum += mix64(shared_id(src, t, iter, s, k));
    if (sum == shared_sum && count == shared_count) return 0;
    fprintf(stderr, "threads: rank %d: shared messages received %llu (sum %llx), expected %llu (sum %llx)\n", rank_,
            (unsigned long long)shared_count, (unsigned long long)shared_sum, (unsigned long long)count,
            (unsigned long long)sum);
    return 1;
}

int main(int argc, char **argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    const int nthreads = argc > 1 ? atoi(argv[1]) : 4;
    iters_ = argc > 2 ? atoi(argv[2]) : 3;
    rma_ = argc > 3 && strcmp(argv[3], "rma") == 0;
    shared_ = argc > 3 && strcmp(argv[3], "shared") == 0;
    stop_file_ = rma_ || shared_ ? NULL : getenv("THREADS_STOP_FILE");
    if (provided != MPI_THREAD_MULTIPLE) {
        if (rank_ == 0) printf("threads: FAILED MPI_THREAD_MULTIPLE not provided (%d)\n", provided);
        MPI_Finalize();
        return 1;
    }
    struct worker *w = calloc((size_t)nthreads, sizeof(*w));
    for (int t = 0; t < nthreads; ++t) { /* collective: in the same order on every rank, before the threads */
        w[t].index = t;
        MPI_Comm_dup(MPI_COMM_WORLD, &w[t].comm);
        if (rma_) {
            MPI_Win_allocate((MPI_Aint)size_ * RMA_BLOCK + (MPI_Aint)sizeof(long), 1, MPI_INFO_NULL, w[t].comm,
                             &w[t].base, &w[t].win);
            MPI_Win_lock(MPI_LOCK_EXCLUSIVE, rank_, 0, w[t].win);
            memset(w[t].base, 0, (size_t)size_ * RMA_BLOCK + sizeof(long));
            MPI_Win_unlock(rank_, w[t].win);
        }
    }
    if (rma_) MPI_Barrier(MPI_COMM_WORLD); /* every counter is zero before anyone adds to it */
    for (int t = 0; t < nthreads; ++t)
        pthread_create(&w[t].thread, NULL, shared_ ? work_shared : rma_ ? work_with_rma : work, &w[t]);
    long errors = 0;
    for (int t = 0; t < nthreads; ++t) {
        pthread_join(w[t].thread, NULL);
        errors += w[t].errors;
    }
    if (shared_) errors += shared_check(nthreads);
    for (int t = 0; t < nthreads; ++t) { /* collective, in the same order everywhere */
        if (rma_) {
            long counter = 0;
            MPI_Win_lock(MPI_LOCK_EXCLUSIVE, rank_, 0, w[t].win);
            memcpy(&counter, w[t].base + (size_t)size_ * RMA_BLOCK, sizeof(counter));
            MPI_Win_unlock(rank_, w[t].win);
            if (rank_ == 0 && counter != (long)iters_ * size_) {
                fprintf(stderr, "threads: thread %d: counter %ld, expected %ld\n", t, counter, (long)iters_ * size_);
                ++errors;
            }
            MPI_Win_free(&w[t].win);
        }
        MPI_Comm_free(&w[t].comm);
    }
    long total = 0;
    MPI_Allreduce(&errors, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (rank_ == 0)
        printf("threads: %s ranks=%d threads=%d iters=%d rma=%d shared=%d errors=%ld\n", total ? "FAILED" : "OK", size_,
               nthreads, iters_, rma_, shared_, total);
    free(w);
    MPI_Finalize();
    return total ? 1 : 0;
}
