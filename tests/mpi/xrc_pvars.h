// SPDX-License-Identifier: BSD-3-Clause
/* btl xrc's MPI_T performance variables (btl_xrc_*), read by name through MPI_T_pvar_*: one session, one
 * handle per variable. The variables are continuous: a counter reads what happened since its handle was
 * allocated, a level or high watermark reads the current value. MPI_T_init_thread registers every component's
 * variables, so handles allocated before MPI_Init count everything the BTL did. */
#ifndef XRC_PVARS_H
#define XRC_PVARS_H

#include <mpi.h>
#include <stdio.h>

#define XRC_PVARS_PREFIX "btl_xrc_"

typedef struct {
    int count;
    char (*names)[64]; /* without the prefix */
    int *classes;      /* MPI_T_PVAR_CLASS_* */
    MPI_T_pvar_handle *handles;
    MPI_T_pvar_session session;
} xrc_pvars_t;

/* Finds every btl_xrc_ variable and allocates its handle; 0, or -1 with a message on stderr. Needs MPI_T
 * initialised (MPI_T_init_thread); MPI_Init may come before or after. */
int xrc_pvars_open(xrc_pvars_t *p);
/* Reads every variable into values[p->count]; 0 or -1. */
int xrc_pvars_read(xrc_pvars_t *p, unsigned long long *values);
/* Collective over MPI_COMM_WORLD: reads every variable at a cut of the job that no message crosses, so that what
 * the ranks counted adds up (each message sent before the cut was received before it, none is in flight). The
 * ranks pass a token in rank order, each posting it on before it reads; rank 0 reads last and then releases
 * the others. 0 or -1. */
int xrc_pvars_snapshot(xrc_pvars_t *p, unsigned long long *values);
/* Collective over MPI_COMM_WORLD: runs fn(arg) on one rank after the other, each while no message of the job goes
 * to or from it (to see that nothing moves without traffic). */
void xrc_pvars_in_turn(void (*fn)(void *), void *arg);
/* The index of NAME (without the prefix), -1 if there is none. */
int xrc_pvars_index(const xrc_pvars_t *p, const char *name);
/* One line per variable: "pvar RANK NAME VALUE". */
void xrc_pvars_print(FILE *out, const xrc_pvars_t *p, const unsigned long long *values, int rank);
void xrc_pvars_close(xrc_pvars_t *p);

#endif
