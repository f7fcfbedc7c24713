// SPDX-License-Identifier: BSD-3-Clause
/* modex-probe.so: measures what each BTL (or pml ucx) publishes in the PMIx modex, the same way for every
 * transport. Preloaded into the MPI processes (mpirun -x LD_PRELOAD=.../modex-probe.so), it wraps PMIx_Put, the
 * call behind Open MPI's OPAL_MODEX_SEND, and prints one line per BTL or PML key to stderr:
 *     modex-probe: rank=R key=btl.xrc.4.1 bytes=N
 * (keys name the component: "btl.openib.4.1", "btl.tcp.4.1", "pml.ucx.4.1" (UCX's worker address), ...). Only
 * byte objects are counted: that is how a component publishes its addresses. The harness (run-bench
 * --resources) sums the bytes per process and transport. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pmix.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef pmix_status_t (*put_fn)(pmix_scope_t, const char[], pmix_value_t *);

pmix_status_t PMIx_Put(pmix_scope_t scope, const char key[], pmix_value_t *val)
{
    static put_fn real;
    if (real == NULL) {
        real = (put_fn)dlsym(RTLD_NEXT, "PMIx_Put");
        if (real == NULL) return PMIX_ERR_NOT_SUPPORTED;
    }
    if (key != NULL && val != NULL && (strncmp(key, "btl.", 4) == 0 || strncmp(key, "pml.", 4) == 0) &&
        val->type == PMIX_BYTE_OBJECT) {
        const char *rank = getenv("OMPI_COMM_WORLD_RANK");
        fprintf(stderr, "modex-probe: rank=%s key=%s bytes=%zu\n", rank != NULL ? rank : "?", key,
                val->data.bo.size);
    }
    return real(scope, key, val);
}
