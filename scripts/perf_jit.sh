#!/usr/bin/env bash
# Where a running Python process spends its time, per function -- numba's JIT-compiled
# kernels included (perf cannot name them: they live in anonymous memory; gdb can).
#
#   scripts/perf_jit.sh PID [SECONDS] [EVENT]
#
# PID: a process that loops over the query (e.g. a script calling cogra.evaluate in a
# loop, or the `pyspark.daemon` worker of a local[1] session looping over a DataFrame
# action).  SECONDS: how long to sample (default 6).  EVENT: a perf event (default
# cpu-clock; `page-faults` shows which functions first touch fresh memory).
# Needs perf and gdb; prints the 30 largest shares (TOP=n for more).
set -euo pipefail
pid=${1:?usage: scripts/perf_jit.sh PID [SECONDS] [EVENT]}
secs=${2:-6}
event=${3:-cpu-clock}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
extra=()
[[ $event == page-faults ]] && extra=(-c 1)
perf record -e "$event" "${extra[@]}" -p "$pid" -o "$tmp/perf.data" -- sleep "$secs" >/dev/null 2>&1
perf script -i "$tmp/perf.data" -F ip,sym 2>/dev/null | awk '{ip=$1; $1=""; s=$0;
  if (s ~ /unknown/ || s ~ /^ *$/) print "JIT " ip; else print "SYM" s}' > "$tmp/samples"
grep '^JIT' "$tmp/samples" | awk '{print $2}' | sort -u > "$tmp/addresses" || true
sed 's/^/info symbol 0x/' "$tmp/addresses" > "$tmp/gdb"
gdb -p "$pid" -batch -x "$tmp/gdb" 2>/dev/null | grep -E 'in section|No symbol' > "$tmp/names" || true
python3 - "$tmp" "${TOP:-30}" <<'PY'
import collections, sys
tmp, top = sys.argv[1], int(sys.argv[2])
addresses = open(f"{tmp}/addresses").read().split()
names = open(f"{tmp}/names").read().splitlines()
# "cogra::runtime::fast::mixed_one_pass::_tree_query[abi:...](Array<...>...) + 42 in section ..."
name = {a: ("(JIT, unresolved)" if "No symbol" in r else r.split("(")[0].split("[abi")[0].split(" + ")[0])
        for a, r in zip(addresses, names)}
counts, total = collections.Counter(), 0
for line in open(f"{tmp}/samples"):
    total += 1
    kind, rest = line[:3], line[3:].strip()
    counts[name.get(rest, "(JIT, unresolved)") if kind == "JIT" else rest[:100]] += 1
print(f"{total} samples")
for key, n in counts.most_common(top):
    print(f"{100 * n / max(total, 1):6.2f}%  {key}")
PY
