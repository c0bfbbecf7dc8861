#!/usr/bin/env python3
"""Groups the samples of a folded profile (inferno-collapse-perf output) by
what the agent was doing, by the first matching frame from the root, and
lists the hottest leaf frames.

    perf/profile-summary.py perf/out/folded.txt
"""
import collections
import sys

# (label, substring of a frame); the first rule whose frame appears in a stack wins.
RULES = [
    ("Segment::tail_mut → madvise(MADV_POPULATE_WRITE) (page-cache populate)", "__x64_sys_madvise"),
    ("Segment::tail_mut → fallocate", "__x64_sys_fallocate"),
    ("recv from the socket (tcp_recvmsg)", "tcp_recvmsg"),
    ("user page faults (writes into the mapping)", "asm_exc_page_fault"),
    ("validate_batches (CRC32C)", "validate_batches"),
    ("PartitionLog::commit_tail (indexes)", "commit_tail"),
    ("PartitionLog::append (copy into the mapping)", "PartitionLog::append"),
    ("send (Fetch requests)", "tcp_sendmsg"),
    ("io_uring_enter (glommio reactor)", "io_uring_enter"),
    ("other syscalls", "entry_SYSCALL_64"),
]


def main(path):
    total = 0
    groups = collections.Counter()
    leaves = collections.Counter()
    for line in open(path):
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = stack.split(";")
        leaves[frames[-1]] += n
        for label, key in RULES:
            if any(key in f for f in frames):
                groups[label] += n
                break
        else:
            groups["other (user space: " + frames[0] + ")"] += n
    if total == 0:
        print("no samples")
        return
    print(f"total weight {total} (cpu-clock ns)")
    for label, n in groups.most_common():
        print(f"{100 * n / total:6.1f}%  {label}")
    print("hottest leaf frames:")
    for frame, n in leaves.most_common(12):
        print(f"{100 * n / total:6.1f}%  {frame[:110]}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "perf/out/folded.txt")
