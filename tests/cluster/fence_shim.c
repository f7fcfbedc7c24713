// SPDX-License-Identifier: BSD-3-Clause
/* fence-shim.so: a launcher whose fences release early, for testing that nothing relies on them. Preloaded into
 * the MPI processes (mpirun -x LD_PRELOAD=.../fence-shim.so), it wraps PMIx_Fence and PMIx_Fence_nb, the calls
 * behind Open MPI's barriers in MPI_Init and MPI_Finalize:
 *   a fence that collects no data (a pure barrier) returns at once, without waiting for anyone, as Slurm 22.05's
 *   tree fence does with its default TreeWidth;
 *   a fence that collects data (the modex) is the real one, but on the host named by $FENCE_SHIM_LATE_HOST it
 *   returns $FENCE_SHIM_DELAY_MS (default 2000) ms late, so that host's ranks reach their wire-up after the
 *   others have left MPI_Init and started sending.
 * Each process says on stderr what it did: "fence-shim: HOST released N barrier(s) early, data fence late by MS". */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pmix.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef pmix_status_t (*fence_fn)(const pmix_proc_t[], size_t, const pmix_info_t[], size_t);
typedef pmix_status_t (*fence_nb_fn)(const pmix_proc_t[], size_t, const pmix_info_t[], size_t, pmix_op_cbfunc_t,
                                     void *);

static int barriers;

static int collects_data(const pmix_info_t info[], size_t ninfo)
{
    for (size_t i = 0; info != NULL && i < ninfo; ++i)
        if (PMIX_CHECK_KEY(&info[i], PMIX_COLLECT_DATA)) return PMIX_INFO_TRUE(&info[i]);
    return 0;
}

static unsigned late_ms(void)
{
    const char *late = getenv("FENCE_SHIM_LATE_HOST");
    char host[256] = "";
    if (late == NULL || gethostname(host, sizeof host) != 0 || strcmp(late, host) != 0) return 0;
    const char *ms = getenv("FENCE_SHIM_DELAY_MS");
    return ms != NULL ? (unsigned)atoi(ms) : 2000u;
}

static void say(unsigned delay)
{
    char host[256] = "?";
    gethostname(host, sizeof host);
    fprintf(stderr, "fence-shim: %s released %d barrier(s) early, data fence late by %u ms\n", host, barriers, delay);
}

struct release {
    pmix_op_cbfunc_t cb;
    void *cbdata;
    pmix_status_t status;
    unsigned delay_ms;
};

static void *release_later(void *arg)
{
    struct release *r = arg;
    if (r->delay_ms > 0) usleep(r->delay_ms * 1000u);
    r->cb(r->status, r->cbdata);
    free(r);
    return NULL;
}

/* Calls the fence's callback from a thread of its own, as PMIx's progress thread would. */
static void release(pmix_op_cbfunc_t cb, void *cbdata, pmix_status_t status, unsigned delay_ms)
{
    struct release *r = malloc(sizeof *r);
    pthread_t t;
    if (r == NULL) {
        cb(status, cbdata);
        return;
    }
    *r = (struct release){cb, cbdata, status, delay_ms};
    if (pthread_create(&t, NULL, release_later, r) != 0) {
        free(r);
        cb(status, cbdata);
        return;
    }
    pthread_detach(t);
}

struct data_fence {
    pmix_op_cbfunc_t cb;
    void *cbdata;
};

static void data_fence_done(pmix_status_t status, void *cbdata)
{
    struct data_fence *f = cbdata;
    const unsigned delay = late_ms();
    say(delay);
    release(f->cb, f->cbdata, status, delay);
    free(f);
}

pmix_status_t PMIx_Fence_nb(const pmix_proc_t procs[], size_t nprocs, const pmix_info_t info[], size_t ninfo,
                            pmix_op_cbfunc_t cbfunc, void *cbdata)
{
    static fence_nb_fn real;
    if (real == NULL && (real = (fence_nb_fn)dlsym(RTLD_NEXT, "PMIx_Fence_nb")) == NULL) return PMIX_ERR_NOT_SUPPORTED;
    if (!collects_data(info, ninfo)) {
        ++barriers;
        if (cbfunc != NULL) release(cbfunc, cbdata, PMIX_SUCCESS, 0);
        return PMIX_SUCCESS;
    }
    struct data_fence *f = malloc(sizeof *f);
    if (f == NULL || cbfunc == NULL) {
        free(f);
        return real(procs, nprocs, info, ninfo, cbfunc, cbdata);
    }
    f->cb = cbfunc;
    f->cbdata = cbdata;
    const pmix_status_t rc = real(procs, nprocs, info, ninfo, data_fence_done, f);
    if (rc != PMIX_SUCCESS) free(f);
    return rc;
}

pmix_status_t PMIx_Fence(const pmix_proc_t procs[], size_t nprocs, const pmix_info_t info[], size_t ninfo)
{
    static fence_fn real;
    if (real == NULL && (real = (fence_fn)dlsym(RTLD_NEXT, "PMIx_Fence")) == NULL) return PMIX_ERR_NOT_SUPPORTED;
    if (!collects_data(info, ninfo)) {
        ++barriers;
        return PMIX_SUCCESS;
    }
    const pmix_status_t rc = real(procs, nprocs, info, ninfo);
    const unsigned delay = late_ms();
    say(delay);
    if (delay > 0) usleep(delay * 1000u);
    return rc;
}
