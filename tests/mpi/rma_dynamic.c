// SPDX-License-Identifier: BSD-3-Clause
/* MPI one-sided on dynamic windows (MPI_Win_create_dynamic + MPI_Win_attach), every value checked.
 *
 *   ops     every rank attaches one cell and publishes its address (MPI_Get_address + MPI_Allgather); under
 *           MPI_Win_lock_all every rank does, on every other rank's cell, MPI_Get, a 64-bit MPI_Fetch_and_op,
 *           a 32-bit MPI_Compare_and_swap and a 32-bit MPI_Accumulate (MPI_SUM), each followed by MPI_Win_flush.
 *           The 32-bit targets share their 8-byte words with memory just outside the attachment that the owner
 *           keeps changing meanwhile: an emulation of narrow atomics through 64-bit ones that touched it would
 *           lose the owner's updates. Checked: every fetched value (the fetch-and-op results of one target form
 *           one chain of increments), one compare-and-swap winner per target, the sums, the owner's words.
 *   attach  rounds of attach/detach: each round every rank attaches a new buffer of another size (tens of bytes to
 *           tens of KiB, several live at once, some sharing pages), reads its right neighbour's newest buffer,
 *           then writes into the first half of its left neighbour's, and detaches its oldest one.
 *   list    a linked list grown by every rank at once: each element is attached by its owner when it is created
 *           and linked with a 64-bit MPI_Compare_and_swap on the "next" pointer of the tail (rank and address in
 *           one word), under MPI_Win_lock_all ("list") or an exclusive lock per step ("list-excl"); rank 0 then
 *           walks it and checks every element is there once, each rank's in its order.
 *
 * Usage: rma_dynamic [ops|attach|list|list-excl ...] (default: all). Prints "rma_dynamic: <phase> OK ..." per
 * phase and "rma_dynamic: OK ranks=N errors=0" at the end; exits 0 only when every check passed. */
#include "phases.h"

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- ops ---------------------------------------------------------------------------------------------------- */

/* The attachment is [sum32, guard_hi): both 32-bit targets are halves of 8-byte words whose other half is outside
 * it. The block's own alignment (8) puts counter and data on 8-byte boundaries, as 64-bit atomics need. */
typedef struct {
    int32_t guard_lo; /* not attached; the owner changes it during the epoch */
    int32_t sum32;    /* 32-bit accumulate target (first attached byte) */
    int64_t counter;  /* 64-bit fetch-and-op target */
    int64_t data[8];  /* read with MPI_Get */
    int32_t flag32;   /* 32-bit compare-and-swap target (last attached bytes) */
    int32_t guard_hi; /* not attached; the owner changes it during the epoch */
} cell_t;
#define CELL_ATTACHED_BEGIN offsetof(cell_t, sum32)
#define CELL_ATTACHED_SIZE (offsetof(cell_t, guard_hi) - offsetof(cell_t, sum32))

static void phase_ops(void) {
    MPI_Win win;
    MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    cell_t *cell = calloc(1, sizeof *cell);
    cell->flag32 = -1;
    for (int i = 0; i < 8; ++i) cell->data[i] = (int64_t)rank * 1000003 + i;
    MPI_Win_attach(win, (char *)cell + CELL_ATTACHED_BEGIN, CELL_ATTACHED_SIZE);
    MPI_Aint mine, *base = malloc(size * sizeof *base);
    MPI_Get_address(cell, &mine);
    MPI_Allgather(&mine, 1, MPI_AINT, base, 1, MPI_AINT, MPI_COMM_WORLD);

    int64_t *fetched = calloc(size, sizeof *fetched); /* fetch-and-op result per target */
    int32_t *swapped = calloc(size, sizeof *swapped); /* compare-and-swap result per target */
    volatile int32_t *guard_lo = &cell->guard_lo, *guard_hi = &cell->guard_hi;
    int32_t owner_updates = 0;
    MPI_Win_lock_all(0, win);
    for (int k = 1; k < size; ++k) {
        const int p = (rank + k) % size; /* every rank starts with a different target */
        int64_t data[8], inc = rank + 1;
        int32_t me = rank, expect = -1, add = rank + 1;
        MPI_Get(data, 8, MPI_INT64_T, p, MPI_Aint_add(base[p], offsetof(cell_t, data)), 8, MPI_INT64_T, win);
        MPI_Win_flush(p, win);
        for (int i = 0; i < 8; ++i)
            CHECK(data[i] == (int64_t)p * 1000003 + i, "ops: get from %d: data[%d] = %lld\n", p, i, (long long)data[i]);
        *guard_lo = ++owner_updates, *guard_hi = -owner_updates;
        MPI_Fetch_and_op(&inc, &fetched[p], MPI_INT64_T, p, MPI_Aint_add(base[p], offsetof(cell_t, counter)), MPI_SUM,
                         win);
        MPI_Win_flush(p, win);
        *guard_lo = ++owner_updates, *guard_hi = -owner_updates;
        MPI_Compare_and_swap(&me, &expect, &swapped[p], MPI_INT32_T, p, MPI_Aint_add(base[p], offsetof(cell_t, flag32)),
                             win);
        MPI_Win_flush(p, win);
        *guard_lo = ++owner_updates, *guard_hi = -owner_updates;
        MPI_Accumulate(&add, 1, MPI_INT32_T, p, MPI_Aint_add(base[p], offsetof(cell_t, sum32)), 1, MPI_INT32_T, MPI_SUM,
                       win);
        MPI_Win_flush(p, win);
        *guard_lo = ++owner_updates, *guard_hi = -owner_updates;
    }
    MPI_Win_unlock_all(win);
    MPI_Barrier(MPI_COMM_WORLD);

    /* what everyone fetched from everyone: row = origin, column = target */
    int64_t *all_fetched = malloc((size_t)size * size * sizeof *all_fetched);
    int32_t *all_swapped = malloc((size_t)size * size * sizeof *all_swapped);
    MPI_Allgather(fetched, size, MPI_INT64_T, all_fetched, size, MPI_INT64_T, MPI_COMM_WORLD);
    MPI_Allgather(swapped, size, MPI_INT32_T, all_swapped, size, MPI_INT32_T, MPI_COMM_WORLD);

    /* my cell, as the others left it */
    int64_t total = 0;
    for (int r = 0; r < size; ++r) total += r == rank ? 0 : r + 1;
    CHECK(cell->counter == total, "ops: counter %lld, expected %lld\n", (long long)cell->counter, (long long)total);
    CHECK(cell->sum32 == total, "ops: sum32 %d, expected %lld\n", cell->sum32, (long long)total);
    CHECK(cell->guard_lo == owner_updates && cell->guard_hi == -owner_updates,
          "ops: words outside the attachment changed: %d %d, expected %d %d\n", cell->guard_lo, cell->guard_hi,
          owner_updates, -owner_updates);
    /* the fetch-and-op results on my counter: one chain 0 -> inc -> ... -> total, each origin once */
    int64_t at = 0;
    for (int step = 0; step < size - 1; ++step) {
        int next = -1;
        for (int r = 0; r < size; ++r)
            if (r != rank && all_fetched[(size_t)r * size + rank] == at) next = r;
        CHECK(next >= 0, "ops: no fetch-and-op on my counter returned %lld\n", (long long)at);
        if (next < 0) break;
        at += next + 1;
    }
    CHECK(at == total, "ops: fetch-and-op chain ends at %lld, expected %lld\n", (long long)at, (long long)total);
    /* compare-and-swap: exactly one origin saw -1 (the winner, whose rank is now in flag32), the others saw it */
    int winners = 0;
    for (int r = 0; r < size; ++r) {
        if (r == rank) continue;
        const int32_t seen = all_swapped[(size_t)r * size + rank];
        if (seen == -1) {
            ++winners;
            CHECK(cell->flag32 == r, "ops: flag32 %d, but rank %d won\n", cell->flag32, r);
        } else {
            CHECK(seen == cell->flag32, "ops: rank %d saw %d, flag32 is %d\n", r, seen, cell->flag32);
        }
    }
    CHECK(winners == (size > 1), "ops: %d compare-and-swap winners\n", winners);
    for (int i = 0; i < 8; ++i) CHECK(cell->data[i] == (int64_t)rank * 1000003 + i, "ops: my data[%d] changed\n", i);

    MPI_Win_detach(win, (char *)cell + CELL_ATTACHED_BEGIN);
    MPI_Win_free(&win);
    free(all_fetched), free(all_swapped), free(fetched), free(swapped), free(base), free(cell);
}

/* ---- attach ------------------------------------------------------------------------------------------------- */

#define ROUNDS 16
#define LIVE 3 /* buffers attached at once per rank */

static size_t round_size(int round, int owner) {
    static const size_t sizes[] = {24, 4096, 40, 65536 + 8, 200, 3000, 16384, 8};
    return sizes[(round + owner) % (sizeof sizes / sizeof sizes[0])];
}
static int64_t pattern(int owner, int round, size_t i) {
    return ((int64_t)owner << 40) ^ ((int64_t)round << 24) ^ (int64_t)i;
}

static void phase_attach(void) {
    MPI_Win win;
    MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    int64_t *live[ROUNDS] = {0};
    MPI_Aint *addr = malloc(size * sizeof *addr);
    const int right = (rank + 1) % size, left = (rank + size - 1) % size;
    for (int round = 0; round < ROUNDS; ++round) {
        const size_t n = round_size(round, rank) / sizeof(int64_t);
        int64_t *buf = malloc(n * sizeof *buf);
        for (size_t i = 0; i < n; ++i) buf[i] = pattern(rank, round, i);
        MPI_Win_attach(win, buf, n * sizeof *buf);
        live[round] = buf;
        MPI_Aint mine;
        MPI_Get_address(buf, &mine);
        MPI_Allgather(&mine, 1, MPI_AINT, addr, 1, MPI_AINT, MPI_COMM_WORLD);

        /* read the right neighbour's newest buffer, then overwrite the first half of the left neighbour's */
        const size_t rn = round_size(round, right) / sizeof(int64_t), ln = round_size(round, left) / sizeof(int64_t);
        int64_t *got = malloc(rn * sizeof *got), *put = malloc(ln * sizeof *put);
        for (size_t i = 0; i < ln / 2; ++i) put[i] = -pattern(rank, round, i);
        MPI_Win_lock_all(0, win);
        MPI_Get(got, (int)rn, MPI_INT64_T, right, addr[right], (int)rn, MPI_INT64_T, win);
        MPI_Win_flush(right, win);
        MPI_Win_unlock_all(win);
        for (size_t i = 0; i < rn; ++i)
            CHECK(got[i] == pattern(right, round, i), "attach: round %d: got %lld from %d at %zu\n", round,
                  (long long)got[i], right, i);
        MPI_Barrier(MPI_COMM_WORLD); /* every read is done before anyone writes */
        MPI_Win_lock_all(0, win);
        if (ln / 2 > 0) MPI_Put(put, (int)(ln / 2), MPI_INT64_T, left, addr[left], (int)(ln / 2), MPI_INT64_T, win);
        MPI_Win_flush(left, win);
        MPI_Win_unlock_all(win);
        MPI_Barrier(MPI_COMM_WORLD); /* every put into my buffer is complete */
        for (size_t i = 0; i < n; ++i) {
            const int64_t want = i < n / 2 ? -pattern(right, round, i) : pattern(rank, round, i);
            CHECK(buf[i] == want, "attach: round %d: my buffer holds %lld at %zu, expected %lld\n", round,
                  (long long)buf[i], i, (long long)want);
        }
        free(got), free(put);
        if (round >= LIVE - 1) { /* the oldest goes: the next round's peers see one region fewer, then one more */
            MPI_Win_detach(win, live[round - (LIVE - 1)]);
            free(live[round - (LIVE - 1)]);
            live[round - (LIVE - 1)] = NULL;
        }
        MPI_Barrier(MPI_COMM_WORLD); /* nobody reads a buffer after its owner detached it */
    }
    for (int round = 0; round < ROUNDS; ++round)
        if (live[round] != NULL) MPI_Win_detach(win, live[round]), free(live[round]);
    MPI_Win_free(&win);
    free(addr);
}

/* ---- list --------------------------------------------------------------------------------------------------- */

#define ELEMENTS 12 /* per rank (with the head, 208 bytes: within one page) */

typedef struct {
    int64_t value; /* owner * 1000 + sequence number */
    uint64_t next; /* 0, or (owner + 1) << 48 | address: one word, so one compare-and-swap links an element */
} elem_t;

static uint64_t make_ptr(int owner, MPI_Aint address) {
    return ((uint64_t)(owner + 1) << 48) | (uint64_t)address;
}
static int ptr_rank(uint64_t p) {
    return (int)(p >> 48) - 1;
}
static MPI_Aint ptr_addr(uint64_t p) {
    return (MPI_Aint)(p & ((UINT64_C(1) << 48) - 1));
}

static void phase_list(int exclusive) {
    const char *name = exclusive ? "list-excl" : "list";
    MPI_Win win;
    /* Every compare-and-swap through the BTL, the calling rank's own elements' too: without this, osc/rdma (5.0.7
     * and main) swaps in a rank's own memory with the CPU under its accumulate lock while remote ranks swap there
     * with network atomics that ignore that lock, so two swaps of one "next" pointer can both succeed when a rank
     * is alone on its node (docs/upstream.md, section 7). */
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "acc_single_intrinsic", "true");
    MPI_Win_create_dynamic(info, MPI_COMM_WORLD, &win);
    MPI_Info_free(&info);
    /* The elements and the head (a sentinel element on rank 0) on one page: osc/rdma registers whole pages, so only
     * a rank's first attach adds a region, before any peer can know an address in it. Were the array to cross a
     * page, rank 0's first element could land on a page below the head's while peers read its region table, which
     * 5.0.7's osc/rdma mishandles (docs/upstream.md, section 2; tests/mpi/rma_region_race.c reproduces it). */
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    elem_t *mine = NULL;
    if (posix_memalign((void **)&mine, page, page) != 0) MPI_Abort(MPI_COMM_WORLD, 2);
    memset(mine, 0, (ELEMENTS + 1) * sizeof *mine);
    MPI_Aint head_addr = 0;
    if (rank == 0) {
        mine[ELEMENTS].value = -1;
        MPI_Win_attach(win, &mine[ELEMENTS], sizeof(elem_t));
        MPI_Get_address(&mine[ELEMENTS], &head_addr);
    }
    MPI_Bcast(&head_addr, 1, MPI_AINT, 0, MPI_COMM_WORLD);
    uint64_t tail = make_ptr(0, head_addr);
    long hops = 0;
    if (!exclusive) MPI_Win_lock_all(0, win);
    for (int e = 0; e < ELEMENTS; ++e) {
        /* a new element, attached by its owner before anyone can reach it */
        mine[e].value = (int64_t)rank * 1000 + e;
        mine[e].next = 0;
        MPI_Win_attach(win, &mine[e], sizeof(elem_t));
        MPI_Aint a;
        MPI_Get_address(&mine[e], &a);
        const uint64_t self = make_ptr(rank, a), nil = 0;
        for (;;) { /* link it behind the tail; a non-nil answer is a newer tail: follow it */
            uint64_t seen = 0;
            const int t = ptr_rank(tail);
            if (exclusive) MPI_Win_lock(MPI_LOCK_EXCLUSIVE, t, 0, win);
            MPI_Compare_and_swap(&self, &nil, &seen, MPI_UINT64_T, t,
                                 MPI_Aint_add(ptr_addr(tail), offsetof(elem_t, next)), win);
            if (exclusive)
                MPI_Win_unlock(t, win);
            else
                MPI_Win_flush(t, win);
            if (seen == 0) break;
            CHECK(ptr_rank(seen) >= 0 && ptr_rank(seen) < size, "%s: next pointer 0x%llx names no rank\n", name,
                  (unsigned long long)seen);
            if (ptr_rank(seen) < 0 || ptr_rank(seen) >= size) break;
            tail = seen;
            ++hops;
        }
        tail = self;
    }
    if (!exclusive) MPI_Win_unlock_all(win);
    MPI_Barrier(MPI_COMM_WORLD);

    if (rank == 0) { /* walk it */
        int *last = malloc(size * sizeof *last), count = 0;
        for (int r = 0; r < size; ++r) last[r] = -1;
        MPI_Win_lock_all(0, win);
        uint64_t at = mine[ELEMENTS].next;
        while (at != 0 && count <= size * ELEMENTS) {
            elem_t el;
            const int r = ptr_rank(at);
            CHECK(r >= 0 && r < size, "%s: pointer 0x%llx names no rank\n", name, (unsigned long long)at);
            if (r < 0 || r >= size) break;
            MPI_Get(&el, (int)sizeof el, MPI_BYTE, r, ptr_addr(at), (int)sizeof el, MPI_BYTE, win);
            MPI_Win_flush(r, win);
            const int owner = (int)(el.value / 1000), seq = (int)(el.value % 1000);
            CHECK(owner == r && seq > last[r] && seq < ELEMENTS, "%s: element %d is %lld (rank %d's last was %d)\n",
                  name, count, (long long)el.value, r, last[r]);
            if (owner == r) last[r] = seq;
            ++count;
            at = el.next;
        }
        MPI_Win_unlock_all(win);
        CHECK(count == size * ELEMENTS, "%s: %d elements in the list, expected %d\n", name, count, size * ELEMENTS);
        for (int r = 0; r < size; ++r)
            CHECK(last[r] == ELEMENTS - 1, "%s: rank %d's last element is %d\n", name, r, last[r]);
        free(last);
    }
    long all_hops = 0;
    MPI_Reduce(&hops, &all_hops, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("rma_dynamic: %s elements=%d stale_tails=%ld\n", name, size * ELEMENTS, all_hops);
    MPI_Barrier(MPI_COMM_WORLD);
    for (int e = 0; e < ELEMENTS; ++e) MPI_Win_detach(win, &mine[e]);
    if (rank == 0) MPI_Win_detach(win, &mine[ELEMENTS]);
    MPI_Win_free(&win);
    free(mine);
}

/* ---- main --------------------------------------------------------------------------------------------------- */

static void list(void) {
    phase_list(0);
}
static void list_excl(void) {
    phase_list(1);
}

int main(int argc, char **argv) {
    static const struct phase phases[] = {
        {"ops", phase_ops}, {"attach", phase_attach}, {"list", list}, {"list-excl", list_excl}};
    return run_phases(argc, argv, "rma_dynamic", phases, 4);
}
