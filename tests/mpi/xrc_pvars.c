// SPDX-License-Identifier: BSD-3-Clause
/* btl xrc's MPI_T performance variables by name (see xrc_pvars.h). */
#include "xrc_pvars.h"

#include <stdlib.h>
#include <string.h>

int xrc_pvars_open(xrc_pvars_t *p) {
    memset(p, 0, sizeof(*p));
    p->session = MPI_T_PVAR_SESSION_NULL;
    int num = 0;
    if (MPI_T_pvar_get_num(&num) != MPI_SUCCESS) return -1;
    p->names = calloc((size_t)num + 1, sizeof(*p->names));
    p->classes = calloc((size_t)num + 1, sizeof(*p->classes));
    p->handles = calloc((size_t)num + 1, sizeof(*p->handles));
    if (p->names == NULL || p->classes == NULL || p->handles == NULL) return -1;
    if (MPI_T_pvar_session_create(&p->session) != MPI_SUCCESS) {
        fprintf(stderr, "xrc_pvars: MPI_T_pvar_session_create failed\n");
        return -1;
    }
    for (int i = 0; i < num; ++i) {
        char name[256], desc[1024];
        int name_len = sizeof(name), desc_len = sizeof(desc), verbosity, var_class, bind, readonly, continuous,
            atomic;
        MPI_Datatype type;
        MPI_T_enum enumtype;
        if (MPI_T_pvar_get_info(i, name, &name_len, &verbosity, &var_class, &type, &enumtype, desc, &desc_len,
                                &bind, &readonly, &continuous, &atomic) != MPI_SUCCESS)
            continue; /* invalid (a closed component's) */
        if (strncmp(name, XRC_PVARS_PREFIX, strlen(XRC_PVARS_PREFIX)) != 0) continue;
        const char *shortname = name + strlen(XRC_PVARS_PREFIX);
        if (type != MPI_UNSIGNED_LONG_LONG || bind != MPI_T_BIND_NO_OBJECT || !continuous || !readonly ||
            desc_len <= 1 || strlen(shortname) >= sizeof(p->names[0])) {
            fprintf(stderr, "xrc_pvars: %s is not a described, read-only, continuous unsigned long long bound to "
                            "nothing\n", name);
            return -1;
        }
        int count = 0;
        if (MPI_T_pvar_handle_alloc(p->session, i, NULL, &p->handles[p->count], &count) != MPI_SUCCESS ||
            count != 1) {
            fprintf(stderr, "xrc_pvars: cannot allocate a handle for %s (count %d)\n", name, count);
            return -1;
        }
        strcpy(p->names[p->count], shortname);
        p->classes[p->count] = var_class;
        ++p->count;
    }
    return 0;
}

int xrc_pvars_read(xrc_pvars_t *p, unsigned long long *values) {
    for (int i = 0; i < p->count; ++i)
        if (MPI_T_pvar_read(p->session, p->handles[i], &values[i]) != MPI_SUCCESS) {
            fprintf(stderr, "xrc_pvars: reading %s%s failed\n", XRC_PVARS_PREFIX, p->names[i]);
            return -1;
        }
    return 0;
}

/* The sequencing messages of snapshot and in_turn (a tag the test programs do not use). */
#define XRC_PVARS_TAG 31337

static void pass_token(int to) { MPI_Send(NULL, 0, MPI_BYTE, to, XRC_PVARS_TAG, MPI_COMM_WORLD); }
static void wait_token(int from) { MPI_Recv(NULL, 0, MPI_BYTE, from, XRC_PVARS_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE); }
static void release_all(int size) {
    for (int q = 1; q < size; ++q) pass_token(q);
}

int xrc_pvars_snapshot(xrc_pvars_t *p, unsigned long long *values) {
    int rank, size, rc;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size == 1) return xrc_pvars_read(p, values);
    /* Every token is posted and received before the reads at both of its ends: posted with MPI_Isend right
     * before the read (no progress in between, so nothing can arrive), completed after it. Nothing is sent after
     * a read until every rank has read: the release comes from rank 0, which reads last. */
    MPI_Request token;
    if (rank == 0) {
        MPI_Isend(NULL, 0, MPI_BYTE, 1, XRC_PVARS_TAG, MPI_COMM_WORLD, &token);
        wait_token(size - 1);
        rc = xrc_pvars_read(p, values);
        MPI_Wait(&token, MPI_STATUS_IGNORE);
        release_all(size);
    } else {
        wait_token(rank - 1);
        MPI_Isend(NULL, 0, MPI_BYTE, (rank + 1) % size, XRC_PVARS_TAG, MPI_COMM_WORLD, &token);
        rc = xrc_pvars_read(p, values);
        MPI_Wait(&token, MPI_STATUS_IGNORE);
        wait_token(0);
    }
    return rc;
}

void xrc_pvars_in_turn(void (*fn)(void *), void *arg) {
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size == 1) {
        fn(arg);
        return;
    }
    /* While rank r runs fn: the ranks before it wait for the release (rank 0 for the last token), the ranks after
     * it for their token; r itself got its token before and passes it on after. */
    if (rank == 0) {
        fn(arg);
        pass_token(1);
        wait_token(size - 1);
        release_all(size);
    } else {
        wait_token(rank - 1);
        fn(arg);
        pass_token((rank + 1) % size);
        wait_token(0);
    }
}

int xrc_pvars_index(const xrc_pvars_t *p, const char *name) {
    for (int i = 0; i < p->count; ++i)
        if (strcmp(p->names[i], name) == 0) return i;
    return -1;
}

void xrc_pvars_print(FILE *out, const xrc_pvars_t *p, const unsigned long long *values, int rank) {
    for (int i = 0; i < p->count; ++i) fprintf(out, "pvar %d %s %llu\n", rank, p->names[i], values[i]);
    fflush(out);
}

void xrc_pvars_close(xrc_pvars_t *p) {
    for (int i = 0; i < p->count; ++i) MPI_T_pvar_handle_free(p->session, &p->handles[i]);
    if (p->session != MPI_T_PVAR_SESSION_NULL) MPI_T_pvar_session_free(&p->session);
    free(p->names);
    free(p->classes);
    free(p->handles);
    memset(p, 0, sizeof(*p));
    p->session = MPI_T_PVAR_SESSION_NULL;
}
