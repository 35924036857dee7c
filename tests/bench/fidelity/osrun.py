"""osrun.py OUT.json -- CMD...: runs CMD and writes what the OS saw during it to
OUT.json: the wall seconds; the run's own CPU seconds and context switches
(getrusage of its children: voluntary = it slept, e.g. an OpenMP thread that
stopped spinning; involuntary = it was preempted); the machine's per-CPU time
from /proc/stat (user, nice, system, idle, iowait, irq, softirq, steal: steal is
the time the hypervisor ran something else on a vCPU that wanted to run); the
CPU seconds the rest of the machine used (busy less the run's own) and the
processes alive at the end that used the most of it; /proc/loadavg before and
after; the seconds a fixed piece of work took on each CPU before and after
(canary()).  Exits with CMD's status.  A slow round of tests/bench/fidelity/run.sh
then says whether it was descheduled (steal, others' CPU) or spent its own CPU
differently (its own CPU and sleeps)."""
import json
import os
import resource
import subprocess
import sys
import time

HZ = os.sysconf("SC_CLK_TCK")
FIELDS = ["user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"]


def cpu_ticks():
    return {l.split()[0]: [int(x) for x in l.split()[1:9]] for l in open("/proc/stat") if l.startswith("cpu")}


def proc_ticks():
    """pid -> (name, user + system ticks) of every process now alive."""
    out = {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                s = open("/proc/%s/stat" % p).read()
            except OSError:
                continue
            f = s[s.rindex(")") + 2:].split()
            out[int(p)] = (s[s.index("(") + 1:s.rindex(")")], int(f[11]) + int(f[12]))
    return out


def canary():
    """Seconds a fixed piece of single-thread work takes on each CPU, pinned: the
    speed the machine gives now.  Under a hypervisor a vCPU can run slower
    without a tick of steal (another guest on its core's sibling, the host's
    memory traffic); nothing else in /proc says so."""
    mine, out = os.sched_getaffinity(0), []
    for c in sorted(mine):
        os.sched_setaffinity(0, {c})
        t = time.perf_counter()
        sum(range(2000000))                 # integer work, no memory
        bytes(bytearray(16 << 20))          # 16 MB written and copied: the cache and memory
        out.append(time.perf_counter() - t)
    os.sched_setaffinity(0, mine)
    return out


def main():
    out, cmd = sys.argv[1], sys.argv[sys.argv.index("--") + 1:]
    before = canary()
    c0, p0, l0 = cpu_ticks(), proc_ticks(), open("/proc/loadavg").read().split()[:3]
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    rc = subprocess.call(cmd)
    wall = time.monotonic() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    c1, p1, l1 = cpu_ticks(), proc_ticks(), open("/proc/loadavg").read().split()[:3]
    after = canary()
    cpu = {k: {n: (c1[k][i] - c0[k][i]) / HZ for i, n in enumerate(FIELDS)} for k in c0}
    own = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    busy = sum(cpu["cpu"][n] for n in ("user", "nice", "system", "irq", "softirq"))
    me = os.getpid()
    used = sorted((((t - p0[pid][1]) if pid in p0 else t) / HZ, "%s[%d]" % (name, pid))
                  for pid, (name, t) in p1.items() if pid != me)
    json.dump(dict(cmd=cmd, rc=rc, wall_s=wall, own_cpu_s=own, own_voluntary_switches=r1.ru_nvcsw - r0.ru_nvcsw,
                   own_involuntary_switches=r1.ru_nivcsw - r0.ru_nivcsw, others_cpu_s=max(0.0, busy - own),
                   steal_s=cpu["cpu"]["steal"], idle_s=cpu["cpu"]["idle"], cpus=cpu, load_before=l0, load_after=l1,
                   top_others=[[n, s] for s, n in reversed(used[-3:]) if s > 0], canary_before_s=before,
                   canary_after_s=after), open(out, "w"))
    return rc


if __name__ == "__main__":
    sys.exit(main())
