#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""Compares what xrc-status lists for a node (its --json output: the btl xrc processes' own records) with what the
node's software HCA holds (simhca-ctl list --json). Every QP of the HCA must be in the listing and the other way
round, with the same type, state, process and remote QP; every TGT QP with the same processes holding it (its
creator and every handle); the same SRQs (process, size, limit) and XRC domain (inode, device, processes). The SRQs'
posted counts are not compared: the HCA consumes buffers before their owner polls the completions.

usage: status_vs_hca.py STATUS.json HCA.json [--expect-jobs N] [--ignore-dead]
--ignore-dead: the records of processes that are not alive (killed: they could not remove them) are left out, with
every object they list, and the HCA must hold none of those (it released a dead process's objects).
Prints one line per difference and exits 1, or prints a summary and exits 0.
"""
import json
import sys


def listing(status, ignore_dead=False):
    """The objects the records describe, keyed as the HCA lists them; and the dead processes left out."""
    qps, srqs, xrcds, problems, dead = {}, {}, {}, [], set()
    for p in status.get("problems", []):
        problems.append("xrc-status problem: %s: %s" % (p["path"], p["error"]))
    for job in status["jobs"]:
        for proc in job["processes"]:
            if proc["record"] != "alive":
                if ignore_dead:
                    dead.add(proc["pid"])
                else:
                    problems.append("rank %d (pid %d): record %s" % (proc["rank"], proc["pid"], proc["record_note"]))
        for d in job["domains"]:
            for q in d["tgt_qps"]:
                holders = sorted(set(q["holder_pids"]) - dead)
                if holders:
                    qps[q["qpn"]] = ("XRC_TGT", q.get("state", "?"), None, holders, q["sender_ini_qpn"])
            for q in d["ini_qps"]:
                if q["pid"] not in dead:
                    qps[q["qpn"]] = ("XRC_INI", q["qp_state"], q["pid"], [q["pid"]], q["tgt_qpn"])
            for c in d["cm_qps"]:
                if c["pid"] not in dead:
                    qps[c["qpn"]] = ("UD", "RTS", c["pid"], [c["pid"]], 0)
            for s in d["srqs"]:
                if s["pid"] not in dead:
                    srqs[s["srqn"]] = (s["pid"], s["count"], s["limit"])
            xrcds[d["xrcd_ino"]] = (d["xrcd_dev"], sorted({c["pid"] for c in d["cm_qps"]} - dead))
    return qps, srqs, xrcds, problems, dead


def held(hca):
    """What the HCA holds. An XRC TGT QP belongs to its domain, not to a process: no pid."""
    qps = {}
    for q in hca.get("qp_list", []):
        pid = None if q["type"] == "XRC_TGT" else q["pid"]
        qps[q["qpn"]] = (q["type"], q["state"], pid, sorted(q["handle_pids"]), q["dest_qpn"])
    srqs = {s["srqn"]: (s["pid"], s["max_wr"], s["limit"]) for s in hca.get("srq_list", [])}
    xrcds = {x["inode"]: (x["dev"], sorted(x["opened_by"])) for x in hca.get("xrcd_list", [])}
    return qps, srqs, xrcds


def differences(kind, ours, theirs, fields):
    out = []
    for key in sorted(set(ours) | set(theirs)):
        if key not in theirs:
            out.append("%s 0x%x is listed by xrc-status %s but the HCA has none" % (kind, key, ours[key]))
        elif key not in ours:
            out.append("%s 0x%x is in the HCA %s but xrc-status does not list it" % (kind, key, theirs[key]))
        elif ours[key] != theirs[key]:
            out.append("%s 0x%x: xrc-status says %s, the HCA %s (%s)" % (kind, key, ours[key], theirs[key], fields))
    return out


def main():
    status = json.load(open(sys.argv[1]))
    hca = json.load(open(sys.argv[2]))
    args = sys.argv[3:]
    expect_jobs = int(args[args.index("--expect-jobs") + 1]) if "--expect-jobs" in args else None
    qps, srqs, xrcds, problems, dead = listing(status, "--ignore-dead" in args)
    hqps, hsrqs, hxrcds = held(hca)
    # A TGT QP whose creator died lives on through the handles of the node's live ranks (XRC's contract); only its
    # creator's record says its state, so the HCA's is taken.
    orphans = 0
    if dead:
        for qpn, q in list(qps.items()):
            if q[0] == "XRC_TGT" and q[1] == "?" and qpn in hqps:
                qps[qpn] = (q[0], hqps[qpn][1]) + q[2:]
                orphans += 1
    if expect_jobs is not None and len(status["jobs"]) != expect_jobs:
        problems.append("xrc-status lists %d jobs, expected %d" % (len(status["jobs"]), expect_jobs))
    problems += differences("QP", qps, hqps, "type, state, pid, holder pids, remote QPN")
    problems += differences("SRQ", srqs, hsrqs, "pid, buffers, limit")
    problems += differences("XRCD inode", xrcds, hxrcds, "device, processes")
    if problems:
        print("\n".join(problems))
        return 1
    kinds = [q[0] for q in qps.values()]
    tgt_holders = sorted({len(q[3]) for q in qps.values() if q[0] == "XRC_TGT"})
    print("same as the HCA: %d INI, %d TGT (holders per TGT QP: %s), %d UD QPs, %d SRQs, %d XRC domain(s)%s" % (
        kinds.count("XRC_INI"), kinds.count("XRC_TGT"), ",".join(map(str, tgt_holders)) or "-", kinds.count("UD"),
        len(srqs), len(xrcds),
        "; %d dead process(es) left out, %d TGT QP(s) outliving a dead creator" % (len(dead), orphans) if dead else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
