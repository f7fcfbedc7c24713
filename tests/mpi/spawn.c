// SPDX-License-Identifier: BSD-3-Clause
/* Dynamic processes: the parents (started by mpirun) spawn SPAWN_CHILDREN children (default 2) with MPI_Comm_spawn;
 * every parent and every child exchange verified messages both ways across the intercommunicator (one small and
 * one large message each way, so both the eager and the rendezvous path are crossed), the children exchange
 * verified messages among themselves, then both sides MPI_Comm_disconnect and the children finalize and exit.
 * The parents go on: they exchange messages among themselves again, then, when $SPAWN_HOLD_FILE is set, rank 0
 * prints "spawn: children gone" and every parent waits until that file exists, so a test can look at the HCAs while
 * the parents are alive and the children are gone. Rank 0 of the parents prints
 * "spawn: OK parents=P children=C errors=0" (FAILED when any check failed) and the exit status is 0 only when
 * every check of every process passed; each child reports its errors to the parents before disconnecting.
 * SPAWN_INFO_HOST and SPAWN_INFO_MAP_BY, when set, are passed as the "host" and "map_by" info keys of the spawn
 * (e.g. "nodeA,nodeB" and "node": one child per node). */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mix64.h"

enum { kSmall = 64, kLarge = 256 * 1024, kTagInter = 11, kTagPeer = 13, kTagErrors = 14 };

static long errors = 0;
static int world_rank;

#define CHECK(cond, ...)                                    \
    do {                                                    \
        if (!(cond)) {                                      \
            if (errors < 10) {                              \
                fprintf(stderr, "spawn: %d: ", world_rank); \
                fprintf(stderr, __VA_ARGS__);               \
            }                                               \
            ++errors;                                       \
        }                                                   \
    } while (0)

/* The payload from `from` (side 0 parent, 1 child) to `to`: every byte depends on both and on the position. */
static void fill(unsigned char *buf, size_t n, int side, int from, int to) {
    for (size_t i = 0; i < n; ++i)
        buf[i] = (unsigned char)mix64(((uint64_t)side << 56) ^ ((uint64_t)from << 40) ^ ((uint64_t)to << 24) ^ i);
}
static long mismatches(const unsigned char *buf, size_t n, int side, int from, int to) {
    long bad = 0;
    for (size_t i = 0; i < n; ++i)
        bad +=
            buf[i] != (unsigned char)mix64(((uint64_t)side << 56) ^ ((uint64_t)from << 40) ^ ((uint64_t)to << 24) ^ i);
    return bad;
}

/* One message of each size from every rank of `comm`'s local group to every rank of its remote group (an
 * intercommunicator) or to every other rank (an intracommunicator), and the same back, every byte checked. */
static void exchange(MPI_Comm comm, int side, int tag, const char *what) {
    int inter = 0, me, peers;
    MPI_Comm_test_inter(comm, &inter);
    MPI_Comm_rank(comm, &me);
    if (inter)
        MPI_Comm_remote_size(comm, &peers);
    else
        MPI_Comm_size(comm, &peers);
    const int peer_side = inter ? !side : side;
    unsigned char *out = malloc(kLarge), *in = malloc(kLarge);
    const size_t sizes[] = {kSmall, kLarge};
    for (int s = 0; s < 2; ++s) {
        for (int p = 0; p < peers; ++p) {
            if (!inter && p == me) continue;
            fill(out, sizes[s], side, me, p);
            memset(in, 0, sizes[s]);
            MPI_Sendrecv(out, (int)sizes[s], MPI_BYTE, p, tag, in, (int)sizes[s], MPI_BYTE, p, tag, comm,
                         MPI_STATUS_IGNORE);
            const long bad = mismatches(in, sizes[s], peer_side, p, me);
            CHECK(bad == 0, "%s: %zu bytes from %d: %ld bytes wrong\n", what, sizes[s], p, bad);
        }
    }
    free(out);
    free(in);
}

static int child(MPI_Comm parent) {
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    exchange(parent, 1, kTagInter, "child <-> parent");
    exchange(MPI_COMM_WORLD, 1, kTagPeer, "child <-> child");
    long total = 0;
    MPI_Reduce(&errors, &total, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (world_rank == 0) MPI_Send(&total, 1, MPI_LONG, 0, kTagErrors, parent);
    MPI_Comm_disconnect(&parent);
    MPI_Finalize();
    return 0;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm parent;
    MPI_Comm_get_parent(&parent);
    if (parent != MPI_COMM_NULL) return child(parent);

    int size;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *n = getenv("SPAWN_CHILDREN");
    const int children = n != NULL ? atoi(n) : 2;
    exchange(MPI_COMM_WORLD, 0, kTagPeer, "parent <-> parent, before");

    MPI_Info info;
    MPI_Info_create(&info);
    const char *host = getenv("SPAWN_INFO_HOST");
    if (host != NULL && *host != '\0') MPI_Info_set(info, "host", host);
    const char *map_by = getenv("SPAWN_INFO_MAP_BY");
    if (map_by != NULL && *map_by != '\0') MPI_Info_set(info, "map_by", map_by);
    MPI_Comm inter;
    int codes[64];
    MPI_Comm_spawn(argv[0], MPI_ARGV_NULL, children, info, 0, MPI_COMM_WORLD, &inter,
                   children <= 64 ? codes : MPI_ERRCODES_IGNORE);
    MPI_Info_free(&info);
    exchange(inter, 0, kTagInter, "parent <-> child");
    long child_errors = 0;
    if (world_rank == 0) MPI_Recv(&child_errors, 1, MPI_LONG, 0, kTagErrors, inter, MPI_STATUS_IGNORE);
    MPI_Comm_disconnect(&inter);

    /* the children are gone (or going): the parents carry on */
    exchange(MPI_COMM_WORLD, 0, kTagPeer, "parent <-> parent, after");
    const char *hold = getenv("SPAWN_HOLD_FILE");
    if (hold != NULL) {
        MPI_Barrier(MPI_COMM_WORLD);
        if (world_rank == 0) {
            printf("spawn: children gone\n");
            fflush(stdout);
        }
        /* Calling into MPI while waiting, as a process that goes on does: what the children's exit changed (the
         * connections they closed, served by the service thread) reaches this process's status record only from
         * progress. */
        for (int i = 0; access(hold, F_OK) != 0 && i < 1200; ++i) {
            int flag = 0;
            MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
            usleep(50000);
        }
        exchange(MPI_COMM_WORLD, 0, kTagPeer, "parent <-> parent, after the hold");
    }
    long total = 0;
    MPI_Reduce(&errors, &total, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    total += child_errors;
    if (world_rank == 0)
        printf("spawn: %s parents=%d children=%d errors=%ld\n", total ? "FAILED" : "OK", size, children, total);
    MPI_Finalize();
    return total ? 1 : 0;
}
