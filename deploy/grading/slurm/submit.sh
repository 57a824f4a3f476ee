#!/bin/bash
# Grade a class on Slurm: N shards as a job array, then the merge once all of them have ended.
#   SUBMISSIONS=/shared/submitted GRADES=/shared/grades deploy/grading/slurm/submit.sh 8
# afterany, not afterok: the merge itself refuses a shard that did not finish (no results.json).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
shards="${1:-8}"
: "${SUBMISSIONS:?}" "${GRADES:?}"
mkdir -p "$GRADES"
array=$(sbatch --parsable --array="0-$((shards - 1))" --export=ALL "$here/grade-shards.sbatch")
merge=$(sbatch --parsable --dependency="afterany:${array%%;*}" --export=ALL "$here/merge.sbatch")
echo "shards: job $array (0-$((shards - 1))); merge: job $merge -> $GRADES/merged/grades.csv"
