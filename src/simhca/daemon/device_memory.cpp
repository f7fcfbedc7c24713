// SPDX-License-Identifier: BSD-3-Clause
// Device memory (ibv_alloc_dm): a memfd the daemon and the owning library
// both map. The library copies in and out (memcpy_to/from_dm); MRs over it
// are zero-based and the daemon reads and writes them in its own mapping.
#include <cerrno>

#include "../common/limits.hpp"
#include "device.hpp"

namespace simhca {

using namespace proto;

int Device::do_alloc_dm(Client &c, const AllocDmReq &q, Response &r, std::vector<int> &fds) {
    if (q.length == 0 || q.length > limits::kMaxDm || q.log_align > 12) return EINVAL;
    if (objs_.dm_bytes + q.length > limits::kMaxDm) return ENOMEM;  // the device's memory is finite
    auto d = std::make_unique<Dm>();
    d->id = objs_.new_id();
    d->owner = &c;
    d->length = q.length;
    if (int e = d->shm.create("simhca-dm", q.length)) return e;
    objs_.dm_bytes += q.length;
    r.h.handle = d->id;
    fds = {d->shm.fd()};
    objs_.dms[d->id] = std::move(d);
    return 0;
}

int Device::do_free_dm(Client &c, uint32_t h) {
    Dm *d = objs_.owned(objs_.dms, c, h);
    if (!d) return EINVAL;
    if (d->users) return EBUSY;
    objs_.dm_bytes -= d->length;
    objs_.dms.erase(h);
    return 0;
}

int Device::do_reg_dm_mr(Client &c, const RegDmMrReq &q, Response &r) {
    Pd *pd = objs_.owned(objs_.pds, c, q.pd);
    Dm *d = objs_.owned(objs_.dms, c, q.dm);
    if (!pd || !d) return EINVAL;
    // Device memory is only addressable zero-based, and never on demand.
    if (!(q.access & IBV_ACCESS_ZERO_BASED) || (q.access & IBV_ACCESS_ON_DEMAND)) return EINVAL;
    constexpr int kKnown = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                           IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_ZERO_BASED;
    if (q.access & ~kKnown) return EINVAL;
    if ((q.access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(q.access & IBV_ACCESS_LOCAL_WRITE))
        return EINVAL;
    // (A zero-length device MR is accepted, as mlx5 does.)
    if (q.offset + q.length > d->length || q.offset + q.length < q.offset) return EINVAL;
    auto mr = std::make_unique<Mr>();
    mr->id = objs_.new_id();
    mr->owner = &c;
    mr->pd = q.pd;
    mr->addr = reinterpret_cast<uint64_t>(d->shm.data()) + q.offset;
    mr->length = q.length;
    mr->iova = 0;
    mr->access = q.access;
    mr->local = true;
    mr->dm = d->id;
    mr->key = objs_.new_key();
    r.reg_mr = {mr->id, mr->key, mr->key};
    objs_.key_to_mr[mr->key] = mr->id;
    pd->users++;
    d->users++;
    objs_.mrs[mr->id] = std::move(mr);
    return 0;
}

}  // namespace simhca
