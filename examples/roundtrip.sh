#!/usr/bin/env bash
# The event plumbing alone (`make roundtrip`): start the local broker, create the topics,
# produce a small cluster story as JSON, and read every event back from its topic as Avro.
set -euo pipefail
cd "$(dirname "$0")/.."
JL=${JOBLEDGER:-.venv/bin/jobledger}
export JOBLEDGER_HOME=${JOBLEDGER_HOME:-$(mktemp -d)}
unset JOBLEDGER_BOOTSTRAP
trap '"$JL" broker --stop >/dev/null' EXIT

"$JL" broker --detach
"$JL" topics create --partitions 4
"$JL" produce examples/cluster.jsonl

produced=$(grep -c . examples/cluster.jsonl)
read_back=0
for topic in resourcemanager job taskexecutor; do
    echo "== jobledger.$topic"
    out=$("$JL" tail "$topic" -o beginning -e --timers)
    [ -n "$out" ] && echo "$out" && read_back=$((read_back + $(echo "$out" | wc -l)))
done
echo "produced $produced events, read back $read_back"
[ "$produced" -eq "$read_back" ]
