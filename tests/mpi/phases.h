// SPDX-License-Identifier: BSD-3-Clause
/* The frame of the one-sided test programs: a program is a list of named phases, run in order (or those named on
 * the command line). Each prints "<program>: <phase> OK|FAILED ranks=N errors=E" once every rank has run it; at the
 * end "<program>: OK|FAILED ranks=N errors=E", and the exit status is 0 only when every check of every rank passed.
 * CHECK counts a failed check (and prints the first few). */
#pragma once
#include <mpi.h>
#include <stdio.h>
#include <string.h>

static long errors = 0;
static int rank, size;
#define CHECK(cond, ...)                            \
    do {                                            \
        if (!(cond)) {                              \
            if (errors < 10) {                      \
                fprintf(stderr, "rank %d: ", rank); \
                fprintf(stderr, __VA_ARGS__);       \
            }                                       \
            ++errors;                               \
        }                                           \
    } while (0)

struct phase {
    const char *name;
    void (*run)(void);
};

static void run_phase(const char *program, const struct phase *p) {
    const long before = errors;
    p->run();
    long mine = errors - before, total = 0;
    MPI_Allreduce(&mine, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("%s: %s %s ranks=%d errors=%ld\n", program, p->name, total ? "FAILED" : "OK", size, total);
    fflush(stdout);
}

/* The whole program: MPI_Init, the phases, the verdict, MPI_Finalize. */
static int run_phases(int argc, char **argv, const char *program, const struct phase *phases, int count) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (int i = 1; i < argc; ++i) {
        int known = 0;
        for (int k = 0; k < count; ++k) known |= strcmp(argv[i], phases[k].name) == 0;
        if (!known) {
            if (rank == 0) fprintf(stderr, "%s: unknown phase '%s'\n", program, argv[i]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    for (int k = 0; k < count; ++k) {
        int wanted = argc == 1;
        for (int i = 1; i < argc; ++i) wanted |= strcmp(argv[i], phases[k].name) == 0;
        if (wanted) run_phase(program, &phases[k]);
    }
    long total = 0;
    MPI_Allreduce(&errors, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("%s: %s ranks=%d errors=%ld\n", program, total ? "FAILED" : "OK", size, total);
    MPI_Finalize();
    return total ? 1 : 0;
}
