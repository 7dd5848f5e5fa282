#!/bin/sh
# Ingest new training logs; refit and register only when files were added; leave a marker
# when the new version took the alias (the unit then restarts the forecast server).
#   deploy/refresh.sh [LOG_FOLDER]     (default /srv/jobcast/incoming)
# Uses JOBCAST_STORE and MLFLOW_TRACKING_URI from the environment (jobcast.env).
set -eu
venv=${JOBCAST_VENV:-/opt/jobcast/.venv}
drop=${1:-/srv/jobcast/incoming}
marker=${JOBCAST_PROMOTED_MARKER:-/srv/jobcast/promoted}
report=$(mktemp)
trap 'rm -f "$report"' EXIT

count() { "$venv/bin/python" -c 'import json,sys; print(len(json.load(open(sys.argv[1]))[sys.argv[2]]))' "$report" "$1"; }

# exit 1: some files were rejected; they are recorded with their reason (jobcast report)
"$venv/bin/jobcast" ingest "$drop" --json > "$report" || [ $? -eq 1 ]
echo "ingest: $(count added) added, $(count duplicates) already stored, $(count rejected) rejected"
[ "$(count added)" -gt 0 ] || exit 0
"$venv/bin/jobcast" fit > /dev/null
"$venv/bin/jobcast" register --json > "$report"
if "$venv/bin/python" -c 'import json,sys; sys.exit(not json.load(open(sys.argv[1]))["promoted"])' "$report"; then
    echo "register: the new version took the alias"
    touch "$marker"
else
    echo "register: the alias stays on the previous version"
fi
