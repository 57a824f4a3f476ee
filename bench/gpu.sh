#!/usr/bin/env bash
# The GPU checklist: run the whole course and its benchmarks on this machine's GPU, write one report.
#
#   bench/gpu.sh [OPTIONS] [OUT]                  OUT defaults to results/gpu/ in the checkout
#
# Steps, each timed and logged; a failing step is recorded and the next one still runs:
#   doctor             course doctor (GPU, SDPA backends, bf16 matmul TFLOP/s vs the card's peak)
#   lessons            course run --profile full --device cuda, every lesson (per-lesson times, metrics)
#   attention_scaling  bench/attention_scaling.py --device cuda --json OUT/attention_scaling.json
#   gpt, bert, vit     bench/{gpt,bert,vit}.py --device cuda --json OUT/<name>.json (vs transformers)
# then bench/report.py writes OUT/report.md and OUT/report.json (and prints the markdown).
#
# Options:
#   --allow-cpu        run without a GPU (device cpu): to test this script itself, not to measure
#   --quick            smoke profile; benchmarks get --quick if they take it, else their smallest
#                      settings (--max-t 1024, --repeat/--rounds 1, --steps 2...), and COURSE_BENCH_QUICK=1
#   --profile P        the lessons' profile (default: full; smoke with --quick)
#   --lessons "A B"    only these lessons (ids or prefixes; default: all)
#   --steps "S T"      only these steps (default: doctor lessons attention_scaling gpt bert vit)
#   --step-timeout S   seconds one step may take (default 1800, the lessons step 4x; 0: no limit)
#
# Exit status: 0 every step passed; 1 a step failed (see the report); 2 no GPU (without --allow-cpu)
# or bad usage. Runs from any folder; OUT may be relative to the folder you run it from.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BENCH_DIR="${GPU_SH_BENCH_DIR:-$ROOT/bench}"          # overridable for the script's own tests
ALLOW_CPU=0
QUICK=0
PROFILE=""
LESSONS=""
STEPS="doctor lessons attention_scaling gpt bert vit"
STEP_TIMEOUT=1800
OUT=""

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --allow-cpu) ALLOW_CPU=1 ;;
    --quick) QUICK=1 ;;
    --profile) PROFILE="${2:?--profile needs a value}"; shift ;;
    --lessons) LESSONS="${2:?--lessons needs a value}"; shift ;;
    --steps) STEPS="${2:?--steps needs a value}"; shift ;;
    --step-timeout) STEP_TIMEOUT="${2:?--step-timeout needs a value}"; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "bench/gpu.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) [ -z "$OUT" ] || { echo "bench/gpu.sh: one output folder only (got $OUT and $1)" >&2; exit 2; }; OUT="$1" ;;
  esac
  shift
done

# Tools: the checkout's venv when there is one (make setup), else what is on PATH.
if [ -x "$ROOT/.venv/bin/python" ]; then PY="$ROOT/.venv/bin/python"; else PY="$(command -v python3 || command -v python)"; fi
[ -n "$PY" ] || { echo "bench/gpu.sh: no Python found: run 'make setup' in $ROOT first" >&2; exit 2; }
COURSE=("$PY" -m course.commands.cli)

# OUT: absolute, relative paths taken from the folder the script was started in.
OUT="${OUT:-$ROOT/results/gpu}"
case "$OUT" in /*) ;; *) OUT="$PWD/$OUT" ;; esac

GPU_NAME="$(cd "$ROOT" && "$PY" -c 'import torch; print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")' 2>/dev/null)"
if [ -n "$GPU_NAME" ]; then
  DEVICE=cuda
elif [ "$ALLOW_CPU" = 1 ]; then
  DEVICE=cpu
  echo "bench/gpu.sh: no GPU here; --allow-cpu: running on the CPU to test the script (numbers are not GPU numbers)"
else
  cat >&2 <<EOF
bench/gpu.sh: no CUDA GPU is visible to PyTorch on this machine, so there is nothing to measure.
  Run this checklist on a machine with an NVIDIA GPU and a CUDA build of PyTorch
  ('$PY -c "import torch; print(torch.cuda.is_available())"' must print True there).
  To test the script itself on a CPU: bench/gpu.sh --allow-cpu --quick
EOF
  exit 2
fi
mkdir -p "$OUT/logs" || { echo "bench/gpu.sh: cannot create $OUT" >&2; exit 2; }
OUT="$(cd "$OUT" && pwd)"
[ -n "$PROFILE" ] || { if [ "$QUICK" = 1 ]; then PROFILE=smoke; else PROFILE=full; fi; }
export MPLBACKEND=Agg HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
[ "$QUICK" = 1 ] && export COURSE_BENCH_QUICK=1

STEPS_FILE="$OUT/steps.jsonl"
: > "$STEPS_FILE"
FAILED=0

# run_step NAME COMMAND...: time it, log its output, record {name, status, rc, seconds, log, command}.
run_step() {
  local name="$1"; shift
  local log="$OUT/logs/$name.log" status rc start end limit="$STEP_TIMEOUT"
  # every lesson in one step (course run writes its report at the end): four steps' worth of time
  [ "$name" = lessons ] && limit=$((STEP_TIMEOUT * 4))
  echo "== $name: $*"
  start=$(date +%s.%N)
  if [ "$limit" != 0 ] && command -v timeout >/dev/null; then
    (cd "$ROOT" && timeout --kill-after=30 "$limit" "$@") > "$log" 2>&1; rc=$?
  else
    (cd "$ROOT" && "$@") > "$log" 2>&1; rc=$?
  fi
  end=$(date +%s.%N)
  case "$rc" in
    0) status=passed ;;
    124|137) status=timeout ;;
    *) status=failed ;;
  esac
  # course doctor exits 1 when it lists problems (e.g. no bubblewrap for grading): not a GPU failure.
  if [ "$name" = doctor ] && [ "$rc" = 1 ] && [ -s "$OUT/doctor.json" ]; then status=problems; fi
  [ "$status" = passed ] || [ "$status" = problems ] || FAILED=1
  record "$name" "$status" "$rc" "$start" "$end" "$log" "$*"
  echo "   $status (exit $rc) in $(awk "BEGIN {printf \"%.1f\", $end - $start}") s; log: $log"
  case "$status" in passed|problems) ;; *) tail -n 5 "$log" | sed "s/^/   | /" ;; esac
}

record() {   # name status rc start end log command
  "$PY" - "$@" >> "$STEPS_FILE" <<'EOF'
import json, sys
name, status, rc, start, end, log, command = sys.argv[1:8]
print(json.dumps({"name": name, "status": status, "rc": int(rc), "seconds": round(float(end) - float(start), 1),
                  "log": log, "command": command}))
EOF
}

want() { case " $STEPS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

echo "GPU checklist: device=$DEVICE${GPU_NAME:+ ($GPU_NAME)} profile=$PROFILE quick=$QUICK out=$OUT"
T0=$(date +%s.%N)
want doctor && run_step doctor "$PY" -m course.commands.doctor --json "$OUT/doctor.json"
# shellcheck disable=SC2086 # LESSONS is a list of ids
want lessons && run_step lessons "${COURSE[@]}" run $LESSONS --profile "$PROFILE" --device "$DEVICE" --out "$OUT/lessons"
for bench in attention_scaling gpt bert vit; do
  want "$bench" || continue
  script="$BENCH_DIR/$bench.py"
  if [ -f "$script" ]; then
    rm -f "$OUT/$bench.json"
    quick_args=()
    if [ "$QUICK" = 1 ]; then     # the smallest run each script offers (it may also read COURSE_BENCH_QUICK)
      if grep -q -- '"--quick"' "$script"; then quick_args=(--quick)
      else
        for opt in "--max-t 1024" "--repeat 1" "--steps 2" "--rounds 1" "--warmup 1"; do
          grep -q -- "\"${opt% *}\"" "$script" && quick_args+=($opt)
        done
      fi
    fi
    run_step "$bench" "$PY" "$script" --device "$DEVICE" --json "$OUT/$bench.json" "${quick_args[@]}"
  else
    echo "== $bench: $script does not exist yet: recorded as missing"
    now=$(date +%s.%N)
    record "$bench" missing 127 "$now" "$now" "" "$PY $script --device $DEVICE --json $OUT/$bench.json"
    FAILED=1
  fi
done
T1=$(date +%s.%N)

(cd "$ROOT" && "$PY" "$ROOT/bench/report.py" "$OUT" --device "$DEVICE" --profile "$PROFILE" --quick "$QUICK" \
   --seconds "$(awk "BEGIN {print $T1 - $T0}")") || { echo "bench/gpu.sh: writing the report failed" >&2; exit 1; }
echo "Report: $OUT/report.md and $OUT/report.json"
exit "$FAILED"
