// SPDX-License-Identifier: BSD-3-Clause
/* Reproducer for a race in osc/rdma's dynamic-window region cache (docs/upstream.md): a peer that refreshes its copy
 * of a target's region table reads the region count without the target's region lock, then reads that many
 * entries under the lock. When the target attaches a region in between, and that region lies below the ones
 * already attached, the table has shifted up by one entry: the copy misses the highest region, and an access to it
 * fails with MPI_ERR_RMA_RANGE although it is attached.
 * Layout forced here: rank 0 attaches one cell on the highest of 8 pages, then attaches and detaches the lower
 * pages, one at a time, RACE_ROUNDS times (default 2000; each attach lands below the cell's region); every other rank
 * reads the cell (MPI_Get + flush under MPI_Win_lock_all, errors returned, not fatal) until the cell says rank 0
 * is done. Rank 0 prints "rma_region_race: gets=N range_errors=E other_errors=O rounds=R"; the exit status is 0
 * when E and O are 0 (no race seen), 1 otherwise. Needs at least 2 ranks, the readers on other nodes than rank 0
 * (a peer whose state is in shared memory reads the table directly). RACE_LAYOUT=above is the control: the cell on
 * the lowest page and the attaches above it, where an insertion shifts nothing the readers need (expect 0 errors). */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { kPages = 8 };
static const int64_t kDone = 0x5eed;

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *r = getenv("RACE_ROUNDS");
    const int rounds = r != NULL ? atoi(r) : 2000;
    const long page = sysconf(_SC_PAGESIZE);
    const char *layout = getenv("RACE_LAYOUT");
    const int above = layout != NULL && strcmp(layout, "above") == 0;
    const int cell_page = above ? 0 : kPages - 1; /* the others are attached and detached around it */

    MPI_Win win;
    MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN);
    unsigned char *pages = NULL;
    MPI_Aint cell_addr = 0;
    if (rank == 0) {
        if (posix_memalign((void **)&pages, (size_t)page, (size_t)page * kPages) != 0) MPI_Abort(MPI_COMM_WORLD, 2);
        int64_t *cell = (int64_t *)(pages + (size_t)page * cell_page);
        *cell = 0;
        MPI_Win_attach(win, cell, sizeof *cell);
        MPI_Get_address(cell, &cell_addr);
    }
    MPI_Bcast(&cell_addr, 1, MPI_AINT, 0, MPI_COMM_WORLD);
    long gets = 0, range_errors = 0, other_errors = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        for (int i = 0; i < rounds; ++i) {
            void *other = pages + (size_t)page * (size_t)(i % (kPages - 1) + (above ? 1 : 0));
            MPI_Win_attach(win, other, 64);
            MPI_Win_detach(win, other);
        }
        /* the readers hold lock_all: rank 0 joins it to tell them it is done */
        const int64_t done = kDone;
        MPI_Win_lock_all(0, win);
        MPI_Put(&done, 1, MPI_INT64_T, 0, cell_addr, 1, MPI_INT64_T, win);
        MPI_Win_flush(0, win);
        MPI_Win_unlock_all(win);
    } else {
        MPI_Win_lock_all(0, win);
        for (int64_t seen = 0; seen != kDone;) {
            const int rc = MPI_Get(&seen, 1, MPI_INT64_T, 0, cell_addr, 1, MPI_INT64_T, win);
            const int rc2 = rc == MPI_SUCCESS ? MPI_Win_flush(0, win) : rc;
            ++gets;
            if (rc2 != MPI_SUCCESS) {
                int cls = 0;
                MPI_Error_class(rc2, &cls);
                if (cls == MPI_ERR_RMA_RANGE)
                    ++range_errors;
                else
                    ++other_errors;
                seen = 0;
            }
        }
        MPI_Win_unlock_all(win);
    }
    long totals[3] = {0, 0, 0}, mine[3] = {gets, range_errors, other_errors};
    MPI_Reduce(mine, totals, 3, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("rma_region_race: layout=%s gets=%ld range_errors=%ld other_errors=%ld rounds=%d\n",
               above ? "above" : "below", totals[0], totals[1], totals[2], rounds);
        MPI_Win_detach(win, pages + (size_t)page * cell_page);
    }
    MPI_Win_free(&win);
    free(pages);
    MPI_Finalize();
    return rank == 0 && (totals[1] != 0 || totals[2] != 0) ? 1 : 0;
}
