// SPDX-License-Identifier: BSD-3-Clause
/* A process dies and the job goes on (User-Level Failure Mitigation, Open MPI 5.0 built with it, run with
 * `mpirun --with-ft ulfm`).
 *
 * Every pair of ranks first exchanges verified messages of several sizes (connections made, eager and rendezvous).
 * The ranks named by $ULFM_VICTIMS (comma-separated, default: the last one) then kill themselves with SIGKILL, all
 * at once, each after printing "ulfm: rank R killed at T" (T: CLOCK_REALTIME in seconds; the simulated nodes share
 * the host's clock). With $ULFM_NODE_PID set (the pid of the first victim's node's HCA daemon, simhcad), the first
 * victim kills that daemon first: the node goes down with its ranks, as when a node crashes (name every rank of
 * that node as a victim). With $ULFM_RNDV=BYTES, every victim dies as soon as it has posted rendezvous sends of
 * BYTES to every survivor ($ULFM_RNDV_US microseconds later), and each survivor's receive of them must either complete
 * with the right data or fail
 * ("ulfm: rank R: rendezvous from the dead: N whole and right, M failed"). With $ULFM_EARLY=1 the victims die as
 * soon as MPI_Init has returned, before any message. Every survivor is blocked in a receive from
 * the first victim and prints "ulfm: rank R learned of rank V's death at T (failed|revoked)" when that receive fails
 * (MPIX_ERR_PROC_FAILED, or MPIX_ERR_REVOKED when another survivor revoked first). Every survivor then revokes
 * MPI_COMM_WORLD, shrinks it and agrees (MPIX_Comm_agree) that the shrunken communicator holds exactly the survivors;
 * on it they run verified all-pairs messages of every size, an allreduce checked against its expected sum and, with
 * $ULFM_ONESIDED=1, a one-sided epoch (MPI_Put of a verified block into every other survivor's window between fences).
 * Rank 0 of the survivors prints "ulfm: OK survivors=N dead=K errors=0" and every survivor exits 0 only when nothing
 * was wrong. With $ULFM_HOLD_FILE the survivors then wait (rank 0 printing "ulfm: survivors holding until FILE
 * exists") until that file exists, before they finalize.
 *
 * Without ULFM (no MPIX_Comm_shrink in mpi-ext.h: Open MPI 4.1, or 5.0 built without it) it prints a line saying
 * so and exits 77 (skipped). */
#include "mix64.h"

#include <mpi.h>
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if !defined(OMPI_HAVE_MPI_EXT_FTMPI) || !OMPI_HAVE_MPI_EXT_FTMPI
int main(void) {
    printf("ulfm: this MPI has no User-Level Failure Mitigation (mpi-ext.h: no MPIX_Comm_shrink)\n");
    return 77;
}
#else

#define MAX_VICTIMS 16
static long g_errors;
static int g_world_rank;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void error(const char *what, int code) {
    char text[MPI_MAX_ERROR_STRING] = "";
    int length = 0;
    if (code != MPI_SUCCESS) MPI_Error_string(code, text, &length);
    fprintf(stderr, "ulfm: rank %d: ERROR %s%s%s\n", g_world_rank, what, length ? ": " : "", text);
    ++g_errors;
}

/* $ULFM_TRACE=1: each survivor says which step it finished (where a hang stopped). */
static void trace(const char *step, int rc) {
    static int on = -1;
    if (on < 0) on = getenv("ULFM_TRACE") != NULL && atoi(getenv("ULFM_TRACE")) == 1;
    if (!on) return;
    printf("ulfm: rank %d: %s (%d) at %.6f\n", g_world_rank, step, rc, now());
    fflush(stdout);
}

/* The bytes world ranks src -> dst send in round `round` at size `size`: differ at every position. */
static void fill(unsigned char *buf, size_t size, int src, int dst, int round) {
    uint64_t state = mix64(((uint64_t)src << 40) ^ ((uint64_t)dst << 20) ^ ((uint64_t)round << 8) ^ size);
    for (size_t i = 0; i < size; ++i) {
        if (i % 8 == 0) state = mix64(state + i);
        buf[i] = (unsigned char)(state >> (8 * (i % 8)));
    }
}

static const size_t kSizes[] = {8, 4096, 65536, 1 << 20};
enum { kNumSizes = sizeof kSizes / sizeof kSizes[0], kMaxSize = 1 << 20 };

/* Every ordered pair of `comm` exchanges one verified message of each size; ranks are named by their world rank
 * in the payload. Returns the first error code met (errors are counted). */
static int all_pairs(MPI_Comm comm, const int *world_of, int round, unsigned char *out, unsigned char *in,
                     unsigned char *want) {
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    for (int k = 0; k < kNumSizes; ++k)
        for (int step = 1; step < size; ++step) {
            const int to = (rank + step) % size, from = (rank - step + size) % size;
            fill(out, kSizes[k], world_of[rank], world_of[to], round);
            MPI_Status status;
            const int rc = MPI_Sendrecv(out, (int)kSizes[k], MPI_BYTE, to, 40 + k, in, (int)kSizes[k], MPI_BYTE, from,
                                        40 + k, comm, &status);
            if (rc != MPI_SUCCESS) return rc;
            fill(want, kSizes[k], world_of[from], world_of[rank], round);
            int count = -1;
            MPI_Get_count(&status, MPI_BYTE, &count);
            if (count != (int)kSizes[k] || memcmp(in, want, kSizes[k]) != 0) {
                char what[128];
                snprintf(what, sizeof what, "round %d: %zu bytes from world rank %d: wrong data", round, kSizes[k],
                         world_of[from]);
                error(what, MPI_SUCCESS);
            }
        }
    return MPI_SUCCESS;
}

/* The storm ($ULFM_STORM=1): the first victim's node-mates (its survivors on its host) each receive, from every
 * other survivor, numbered 64-byte messages (tag 50) until that sender's end (tag 51, carrying its count): each
 * must arrive exactly once, in order. Every other survivor sends, in turn, one message to the first victim (tag 60:
 * eager, so each completes at once while the victim lives) and one numbered message to each node-mate, until a send
 * to the victim fails, then sends each node-mate its end. The victim dies with sends to it in flight: the node that
 * held it refuses the next ones, and what its node-mates were sent at the same time over the same connections must
 * neither be lost nor arrive twice. Returns the error of the send to the victim that failed (for a node-mate:
 * MPIX_ERR_PROC_FAILED once every sender ended, or the error met). */
/* Each rank's part in the storm, agreed before anyone dies: 0 sender, 1 node-mate of the first victim, 2 victim. */
static int *storm_roles(MPI_Comm comm, const int *victims, int dead) {
    char host[MPI_MAX_PROCESSOR_NAME] = "";
    int length = 0, size;
    MPI_Get_processor_name(host, &length);
    MPI_Comm_size(comm, &size);
    char *hosts = calloc((size_t)size, MPI_MAX_PROCESSOR_NAME);
    MPI_Allgather(host, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, hosts, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, comm);
    int *role = calloc((size_t)size, sizeof(int));
    for (int r = 0; r < size; ++r) {
        for (int i = 0; i < dead; ++i) role[r] |= victims[i] == r ? 2 : 0;
        if (role[r] == 0 && strcmp(hosts + (size_t)r * MPI_MAX_PROCESSOR_NAME,
                                   hosts + (size_t)victims[0] * MPI_MAX_PROCESSOR_NAME) == 0)
            role[r] = 1;
    }
    free(hosts);
    return role;
}

static int storm(MPI_Comm comm, const int *victims, const int *role) {
    enum { kMessage = 64, kBound = 1 << 22 };
    char host[MPI_MAX_PROCESSOR_NAME] = "";
    int length = 0, size;
    MPI_Get_processor_name(host, &length);
    MPI_Comm_size(comm, &size);
    unsigned char out[kMessage], in[kMessage], want[kMessage];
    int rc = MPI_SUCCESS;
    if (role[g_world_rank] == 1) {
        long received = 0;
        for (int from = 0; from < size; ++from) {
            if (role[from] != 0) continue;
            for (long expect = 0;; ++expect) {
                MPI_Status status;
                rc = MPI_Recv(in, kMessage, MPI_BYTE, from, MPI_ANY_TAG, comm, &status);
                if (rc != MPI_SUCCESS) {
                    error("a storm receive from a survivor failed", rc);
                    break;
                }
                if (status.MPI_TAG == 51) {
                    long count;
                    memcpy(&count, in, sizeof count);
                    if (count != expect) {
                        char what[160];
                        snprintf(what, sizeof what, "rank %d's storm: %ld messages arrived, it sent %ld", from, expect,
                                 count);
                        error(what, MPI_SUCCESS);
                    }
                    break;
                }
                fill(want, kMessage, from, g_world_rank, (int)expect);
                if (memcmp(in, want, kMessage) != 0) {
                    char what[160];
                    snprintf(what, sizeof what, "rank %d's storm: message %ld is not the one sent in that place", from,
                             expect);
                    error(what, MPI_SUCCESS);
                    break;
                }
                ++received;
            }
        }
        printf("ulfm: rank %d (%s) received %ld storm messages, each once and in order\n", g_world_rank, host,
               received);
        fflush(stdout);
        rc = MPIX_ERR_PROC_FAILED;
    } else {
        long sent = 0;
        memset(out, 0x5a, sizeof out);
        for (long i = 0; i < kBound; ++i) {
            rc = MPI_Send(out, kMessage, MPI_BYTE, victims[0], 60, comm);
            if (rc != MPI_SUCCESS) break;
            for (int to = 0; to < size; ++to) {
                if (role[to] != 1) continue;
                fill(want, kMessage, g_world_rank, to, (int)sent);
                const int mate_rc = MPI_Send(want, kMessage, MPI_BYTE, to, 50, comm);
                if (mate_rc != MPI_SUCCESS) error("a storm send to a node-mate of the victim failed", mate_rc);
            }
            ++sent;
        }
        for (int to = 0; to < size; ++to)
            if (role[to] == 1 && MPI_Send(&sent, 1, MPI_LONG, to, 51, comm) != MPI_SUCCESS)
                error("a storm's end to a node-mate of the victim failed", MPI_SUCCESS);
        if (rc != MPI_SUCCESS) {
            int class = MPI_SUCCESS;
            MPI_Error_class(rc, &class);
            if (class != MPIX_ERR_PROC_FAILED && class != MPIX_ERR_REVOKED) error("a storm send to the victim", rc);
        }
        printf("ulfm: rank %d (%s) sent %ld storm messages to each node-mate of rank %d\n", g_world_rank, host, sent,
               victims[0]);
        fflush(stdout);
    }
    return rc;
}

/* Rendezvous from the dead ($ULFM_RNDV): each victim sends `bytes` to every survivor (tag 70), each survivor
 * receives from every victim; `buf` holds a block per peer. */
static void rendezvous_start(const int *victims, int dead, int victim, int size, size_t bytes, unsigned char *buf,
                             MPI_Request *req) {
    for (int r = 0; r < size; ++r) {
        int peer_dead = 0;
        for (int i = 0; i < dead; ++i) peer_dead |= victims[i] == r;
        if (r == g_world_rank || victim == peer_dead) continue; /* victims to survivors only */
        unsigned char *block = buf + (size_t)r * bytes;
        if (victim) {
            fill(block, bytes, g_world_rank, r, 70);
            MPI_Isend(block, (int)bytes, MPI_BYTE, r, 70, MPI_COMM_WORLD, &req[r]);
        } else {
            MPI_Irecv(block, (int)bytes, MPI_BYTE, r, 70, MPI_COMM_WORLD, &req[r]);
        }
    }
}

/* A survivor's receives from the dead: each either completed whole and right, or failed (never a message in part). */
static void rendezvous_end(const int *victims, int dead, size_t bytes, unsigned char *buf, MPI_Request *req) {
    unsigned char *want = malloc(bytes);
    int whole = 0, failed = 0;
    for (int i = 0; i < dead; ++i) {
        const int v = victims[i];
        MPI_Status status;
        const int rc = MPI_Wait(&req[v], &status);
        int class = MPI_SUCCESS;
        MPI_Error_class(rc, &class);
        if (rc == MPI_SUCCESS) {
            int count = -1;
            MPI_Get_count(&status, MPI_BYTE, &count);
            fill(want, bytes, v, g_world_rank, 70);
            if (count != (int)bytes || memcmp(buf + (size_t)v * bytes, want, bytes) != 0)
                error("a rendezvous receive from a dead rank completed with wrong data", MPI_SUCCESS);
            ++whole;
        } else if (class == MPIX_ERR_PROC_FAILED || class == MPIX_ERR_REVOKED) {
            ++failed;
        } else {
            error("a rendezvous receive from a dead rank", rc);
        }
    }
    free(want);
    printf("ulfm: rank %d: rendezvous from the dead: %d whole and right, %d failed\n", g_world_rank, whole, failed);
    fflush(stdout);
}

static int parse_victims(int size, int *victims) {
    const char *text = getenv("ULFM_VICTIMS");
    if (text == NULL || *text == '\0') {
        victims[0] = size - 1;
        return 1;
    }
    int n = 0;
    for (const char *p = text; *p != '\0' && n < MAX_VICTIMS;) {
        char *end;
        const long v = strtol(p, &end, 10);
        if (end == p || v <= 0 || v >= size) return -1; /* rank 0 reports: it must survive */
        victims[n++] = (int)v;
        p = *end == ',' ? end + 1 : end;
    }
    return n;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int size;
    MPI_Comm_rank(MPI_COMM_WORLD, &g_world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int victims[MAX_VICTIMS];
    const int dead = parse_victims(size, victims);
    if (dead <= 0 || dead >= size) {
        if (g_world_rank == 0) fprintf(stderr, "ulfm: ULFM_VICTIMS must name 1..size-1 ranks other than 0\n");
        MPI_Finalize();
        return 2;
    }
    int victim = 0;
    for (int i = 0; i < dead; ++i) victim |= victims[i] == g_world_rank;
    unsigned char *out = malloc(kMaxSize), *in = malloc(kMaxSize), *want = malloc(kMaxSize);
    int *world_of = malloc(sizeof(int) * (size_t)size);
    for (int r = 0; r < size; ++r) world_of[r] = r;

    /* $ULFM_EARLY=1: the victims die as soon as MPI_Init has returned, before any message (connections made
     * eagerly may still be being made; on demand, every one is made after the death). */
    const char *early_text = getenv("ULFM_EARLY");
    const int early = early_text != NULL && atoi(early_text) == 1;
    int rc = MPI_SUCCESS;
    if (!early) {
        rc = all_pairs(MPI_COMM_WORLD, world_of, 0, out, in, want);
        if (rc != MPI_SUCCESS) error("all pairs before any death", rc);
        rc = MPI_Barrier(MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS) error("barrier before any death", rc);
    }

    MPI_Comm storm_comm = MPI_COMM_NULL; /* not revoked with MPI_COMM_WORLD: the storm's count is kept apart */
    const char *storm_text = getenv("ULFM_STORM");
    const int storm_on = storm_text != NULL && atoi(storm_text) == 1;
    int *roles = NULL;
    if (storm_on) {
        MPI_Comm_dup(MPI_COMM_WORLD, &storm_comm);
        MPI_Comm_set_errhandler(storm_comm, MPI_ERRORS_RETURN);
        roles = storm_roles(storm_comm, victims, dead);
    }
    /* $ULFM_RNDV=BYTES: every victim dies in the middle of rendezvous sends of BYTES to every survivor. */
    const char *rndv_text = getenv("ULFM_RNDV");
    const size_t rndv = rndv_text != NULL ? (size_t)strtoul(rndv_text, NULL, 10) : 0;
    unsigned char *rndv_buf = rndv > 0 ? malloc(rndv * (size_t)size) : NULL;
    MPI_Request *rndv_req = calloc((size_t)size, sizeof(MPI_Request));
    for (int r = 0; r < size; ++r) rndv_req[r] = MPI_REQUEST_NULL;
    if (rndv > 0) rendezvous_start(victims, dead, victim, size, rndv, rndv_buf, rndv_req);
    if (victim) {
        if (rndv > 0) {
            /* $ULFM_RNDV_US: progress that long first (default 0: die as soon as the sends are posted, their data
             * still to be read by the survivors) */
            const char *us = getenv("ULFM_RNDV_US");
            const double until = now() + (us != NULL ? atof(us) : 0.0) * 1e-6;
            int all = 0;
            while (!all && now() < until) MPI_Testall(size, rndv_req, &all, MPI_STATUSES_IGNORE);
            int done = 0, sent = 0;
            for (int r = 0; r < size; ++r) {
                int peer_dead = 0;
                for (int i = 0; i < dead; ++i) peer_dead |= victims[i] == r;
                if (peer_dead) continue;
                int flag = 1;
                if (rndv_req[r] != MPI_REQUEST_NULL) MPI_Test(&rndv_req[r], &flag, MPI_STATUS_IGNORE);
                ++sent;
                done += flag != 0;
            }
            printf("ulfm: rank %d: %d of its %d rendezvous sends had completed\n", g_world_rank, done, sent);
        } else if (!early) {
            usleep(300000); /* the survivors are in their receives (or their storm) by then */
        }
        const char *node_pid = getenv("ULFM_NODE_PID");
        const int node_down = g_world_rank == victims[0] && node_pid != NULL && atoi(node_pid) > 0;
        printf("ulfm: rank %d killed at %.6f%s\n", g_world_rank, now(), node_down ? " with its node's HCA" : "");
        fflush(stdout);
        if (node_down && kill((pid_t)atoi(node_pid), SIGKILL) != 0) perror("ulfm: kill of the node's HCA daemon");
        raise(SIGKILL);
    }
    /* Every survivor is blocked in a receive from the first victim when it dies: each learns of the death itself
     * (MPIX_ERR_PROC_FAILED), or from a survivor that learned first and revoked (MPIX_ERR_REVOKED). In a storm, a
     * send to it fails instead. */
    int word = 0;
    if (storm_on)
        rc = storm(storm_comm, victims, roles);
    else
        rc = MPI_Recv(&word, 1, MPI_INT, victims[0], 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    int class = MPI_SUCCESS;
    MPI_Error_class(rc, &class);
    if (class == MPIX_ERR_PROC_FAILED || class == MPIX_ERR_REVOKED) {
        printf("ulfm: rank %d learned of rank %d's death at %.6f (%s)\n", g_world_rank, victims[0], now(),
               class == MPIX_ERR_REVOKED ? "revoked" : "failed");
        fflush(stdout);
    } else {
        error("a receive from the first victim did not fail with MPIX_ERR_PROC_FAILED or MPIX_ERR_REVOKED", rc);
    }
    if (rndv > 0) rendezvous_end(victims, dead, rndv, rndv_buf, rndv_req);
    free(rndv_buf);
    free(rndv_req);

    /* Every survivor revokes (idempotent), shrinks and agrees. */
    MPIX_Comm_revoke(MPI_COMM_WORLD);
    trace("revoked", MPI_SUCCESS);
    MPI_Comm shrunk;
    rc = MPIX_Comm_shrink(MPI_COMM_WORLD, &shrunk);
    if (rc != MPI_SUCCESS) {
        error("MPIX_Comm_shrink", rc);
        fflush(stderr);
        MPI_Abort(MPI_COMM_SELF, 1);
    }
    trace("shrunk", rc);
    MPI_Comm_set_errhandler(shrunk, MPI_ERRORS_RETURN);
    int srank, ssize;
    MPI_Comm_rank(shrunk, &srank);
    MPI_Comm_size(shrunk, &ssize);
    MPI_Allgather(&g_world_rank, 1, MPI_INT, world_of, 1, MPI_INT, shrunk);
    int right = ssize == size - dead;
    for (int r = 0; r < ssize; ++r)
        for (int i = 0; i < dead; ++i) right &= world_of[r] != victims[i];
    rc = MPIX_Comm_agree(shrunk, &right);
    if (rc != MPI_SUCCESS) error("MPIX_Comm_agree", rc);
    trace("agreed", rc);
    if (!right) error("the shrunken communicator does not hold exactly the survivors", MPI_SUCCESS);

    for (int round = 1; round <= 3 && rc == MPI_SUCCESS; ++round) {
        rc = all_pairs(shrunk, world_of, round, out, in, want);
        if (rc != MPI_SUCCESS) error("all pairs among the survivors", rc);
    }
    long mine = world_of[srank] + 1, sum = 0, expect = 0;
    for (int r = 0; r < ssize; ++r) expect += world_of[r] + 1;
    rc = MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, shrunk);
    if (rc != MPI_SUCCESS || sum != expect) error("allreduce among the survivors", rc);

    trace("all pairs and allreduce among the survivors", rc);
    const char *onesided = getenv("ULFM_ONESIDED");
    if (onesided != NULL && atoi(onesided) == 1) {
        enum { kBlock = 4096 };
        unsigned char *base = calloc((size_t)ssize, kBlock);
        MPI_Win win;
        rc = MPI_Win_create(base, (MPI_Aint)ssize * kBlock, 1, MPI_INFO_NULL, shrunk, &win);
        if (rc != MPI_SUCCESS) {
            error("MPI_Win_create among the survivors", rc);
        } else {
            MPI_Win_fence(0, win);
            for (int step = 1; step < ssize; ++step) {
                const int to = (srank + step) % ssize;
                fill(out + (size_t)step * kBlock, kBlock, world_of[srank], world_of[to], 77);
                MPI_Put(out + (size_t)step * kBlock, kBlock, MPI_BYTE, to, (MPI_Aint)srank * kBlock, kBlock, MPI_BYTE,
                        win);
            }
            rc = MPI_Win_fence(0, win);
            if (rc != MPI_SUCCESS) error("the one-sided epoch among the survivors", rc);
            for (int from = 0; from < ssize; ++from) {
                if (from == srank) continue;
                fill(want, kBlock, world_of[from], world_of[srank], 77);
                if (memcmp(base + (size_t)from * kBlock, want, kBlock) != 0)
                    error("a put among the survivors left wrong data", MPI_SUCCESS);
            }
            MPI_Win_free(&win);
        }
        free(base);
    }

    trace("done", MPI_SUCCESS);
    long total = 0;
    MPI_Allreduce(&g_errors, &total, 1, MPI_LONG, MPI_SUM, shrunk);
    if (srank == 0) {
        printf("ulfm: %s survivors=%d dead=%d errors=%ld\n", total == 0 ? "OK" : "FAILED", ssize, dead, total);
        fflush(stdout);
    }
    /* With $ULFM_HOLD_FILE the survivors stay (connections up) until that file exists, so that the script can count
     * what every node's HCA holds after the deaths; rank 0 of the survivors says when they hold. */
    const char *hold_file = getenv("ULFM_HOLD_FILE");
    if (hold_file != NULL && *hold_file != '\0') {
        if (srank == 0) {
            printf("ulfm: survivors holding until %s exists\n", hold_file);
            fflush(stdout);
            while (access(hold_file, F_OK) != 0) usleep(50000);
        }
        MPI_Barrier(shrunk);
    }
    MPI_Comm_free(&shrunk);
    if (storm_comm != MPI_COMM_NULL) MPI_Comm_free(&storm_comm);
    free(roles);
    free(out);
    free(in);
    free(want);
    free(world_of);
    MPI_Finalize();
    return total == 0 ? 0 : 1;
}
#endif
