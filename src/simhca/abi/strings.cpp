// SPDX-License-Identifier: BSD-3-Clause
// Enum-to-text and rate conversions of libibverbs (no device state).
//
// The texts and tables are behaviour that programs show to people and act on (ibv_rc_pingpong prints
// ibv_wc_status_str on a failed completion, perftest converts rates), so they match rdma-core 44 value for
// value, including the quirks: out-of-range values give "unknown" / -1 / IBV_RATE_MAX, and
// ibv_rate_to_mult has no entry for the 14/56/112/168/25/100/200/300 Gb/s rates (they are not multiples of
// 2.5 Gb/s) while 28 Gb/s maps to 11x and 50 Gb/s to 20x. tests/simhca/abi/abi-strings.sh diffs every value
// against the system library.
// Exported whatever -fvisibility the library is built with: the version script alone decides what is
// local (abi/libibverbs.map).
#pragma GCC visibility push(default)

#include <infiniband/verbs.h>

#include <array>
#include <cstddef>
#include <optional>

namespace {

template <std::size_t N>
const char *lookup(const std::array<const char *, N> &names, long index)
{
    if (index < 0 || static_cast<std::size_t>(index) >= N || !names[index])
        return "unknown";
    return names[index];
}

constexpr std::array<const char *, 8> node_type_names = {
    nullptr, // IBV_NODE_UNKNOWN (-1) is out of the table; 0 is unused
    "InfiniBand channel adapter", "InfiniBand switch", "InfiniBand router", "iWARP NIC", "usNIC",
    "usNIC UDP", "unspecified",
};

constexpr std::array<const char *, 6> port_state_names = {
    "no state change (NOP)", "down", "init", "armed", "active", "active defer",
};

constexpr std::array<const char *, 20> event_type_names = {
    "CQ error",
    "local work queue catastrophic error",
    "invalid request local work queue error",
    "local access violation work queue error",
    "communication established",
    "send queue drained",
    "path migrated",
    "path migration request error",
    "local catastrophic error",
    "port active",
    "port error",
    "LID change",
    "P_Key change",
    "SM change",
    "SRQ catastrophic error",
    "SRQ limit reached",
    "last WQE reached",
    "client reregistration",
    "GID table change",
    "WQ fatal",
};

constexpr std::array<const char *, 24> wc_status_names = {
    "success",
    "local length error",
    "local QP operation error",
    "local EE context operation error",
    "local protection error",
    "Work Request Flushed Error",
    "memory management operation error",
    "bad response error",
    "local access error",
    "remote invalid request error",
    "remote access error",
    "remote operation error",
    "transport retry counter exceeded",
    "RNR retry counter exceeded",
    "local RDD violation error",
    "remote invalid RD request",
    "aborted error",
    "invalid EE context number",
    "invalid EE context state",
    "fatal error",
    "response timeout error",
    "general error",
    "TM error",
    "TM software rendezvous",
};

// One row per enum ibv_rate value: its speed as a multiple of 2.5 Gb/s (nullopt where rdma-core has none)
// and in Mb/s.
struct rate_row {
    ibv_rate rate;
    std::optional<int> mult;
    int mbps;
};

constexpr std::array<rate_row, 23> rate_table = {{
    {IBV_RATE_2_5_GBPS, 1, 2500},      {IBV_RATE_5_GBPS, 2, 5000},
    {IBV_RATE_10_GBPS, 4, 10000},      {IBV_RATE_20_GBPS, 8, 20000},
    {IBV_RATE_30_GBPS, 12, 30000},     {IBV_RATE_40_GBPS, 16, 40000},
    {IBV_RATE_60_GBPS, 24, 60000},     {IBV_RATE_80_GBPS, 32, 80000},
    {IBV_RATE_120_GBPS, 48, 120000},   {IBV_RATE_14_GBPS, std::nullopt, 14062},
    {IBV_RATE_56_GBPS, std::nullopt, 56250},   {IBV_RATE_112_GBPS, std::nullopt, 112500},
    {IBV_RATE_168_GBPS, std::nullopt, 168750}, {IBV_RATE_25_GBPS, std::nullopt, 25781},
    {IBV_RATE_100_GBPS, std::nullopt, 103125}, {IBV_RATE_200_GBPS, std::nullopt, 206250},
    {IBV_RATE_300_GBPS, std::nullopt, 309375}, {IBV_RATE_28_GBPS, 11, 28125},
    {IBV_RATE_50_GBPS, 20, 53125},     {IBV_RATE_400_GBPS, 160, 425000},
    {IBV_RATE_600_GBPS, 240, 637500},  {IBV_RATE_800_GBPS, 320, 850000},
    {IBV_RATE_1200_GBPS, 480, 1275000},
}};

const rate_row *find_rate(ibv_rate rate)
{
    for (const auto &row : rate_table)
        if (row.rate == rate)
            return &row;
    return nullptr;
}

} // namespace

const char *ibv_node_type_str(enum ibv_node_type node_type)
{
    return lookup(node_type_names, node_type);
}

const char *ibv_port_state_str(enum ibv_port_state port_state)
{
    return lookup(port_state_names, port_state);
}

const char *ibv_event_type_str(enum ibv_event_type event)
{
    return lookup(event_type_names, event);
}

const char *ibv_wc_status_str(enum ibv_wc_status status)
{
    return lookup(wc_status_names, status);
}

// rdma-core 56 added this one (exported from IBVERBS_PRIVATE_34 although verbs.h declares it; the map lists it
// only when built against 56 or later). Its table has holes at 12 and 13, where rdma-core returns NULL.
constexpr std::array<const char *, 16> wr_opcode_names = {
    "rdma-write", "rdma-write-with-imm", "send", "send-with-imm", "rdma-read", "atomic-cmp-and-swp",
    "atomic-fetch-and-add", "local-inv", "bind-mw", "send-with-inv", "tso", "driver1", nullptr, nullptr,
    "flush", "atomic-write",
};

extern "C" const char *ibv_wr_opcode_str(enum ibv_wr_opcode opcode)
{
    const long index = opcode;
    if (index < 0 || static_cast<std::size_t>(index) >= wr_opcode_names.size())
        return "unknown";
    return wr_opcode_names[index];
}

int ibv_rate_to_mult(enum ibv_rate rate)
{
    const rate_row *row = find_rate(rate);
    return row && row->mult ? *row->mult : -1;
}

enum ibv_rate mult_to_ibv_rate(int mult)
{
    for (const auto &row : rate_table)
        if (row.mult && *row.mult == mult)
            return row.rate;
    return IBV_RATE_MAX;
}

int ibv_rate_to_mbps(enum ibv_rate rate)
{
    const rate_row *row = find_rate(rate);
    return row ? row->mbps : -1;
}

enum ibv_rate mbps_to_ibv_rate(int mbps)
{
    for (const auto &row : rate_table)
        if (row.mbps == mbps)
            return row.rate;
    return IBV_RATE_MAX;
}
