#!/usr/bin/env bash
# The GPU checklist: run the whole course and its benchmarks on this machine's GPU, write one report.
#
#   bench/gpu.sh [OPTIONS] [OUT]                  OUT defaults to results/gpu/ in the checkout
#
# Steps, each timed and logged; a failing step is recorded and the next one still runs:
#   doctor             course doctor (GPU, SDPA backends, bf16 matmul TFLOP/s vs the card's peak)
#   lessons            course run --profile full --device cuda, one lesson at a time (a step each, named
#                      lesson:<id>, never two sharing the GPU); lessons/report.json gathers them as they end
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
#   --step-timeout S   seconds one step may take (default 1800; 0: no limit)
#   --budget S         seconds for the whole run (default: none): a step starts only with time left, and
#                      gets at most what is left; the others are recorded as skipped. For a lent GPU with a
#                      few minutes: e.g. --budget 540 --lessons "06 08" --steps lessons
#
# Stopped (Ctrl-C, SIGTERM, a time limit outside), it ends the running step and still writes the report.
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
BUDGET=0
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
    --budget) BUDGET="${2:?--budget needs a value}"; shift ;;
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
# Runs in the background so that a signal reaches the trap below at once.
CHILD=""
CURRENT=""
run_step() {
  local name="$1"; shift
  local log="$OUT/logs/${name//:/-}.log" status rc start end limit="$STEP_TIMEOUT" left
  if [ "$BUDGET" != 0 ]; then
    left=$(awk "BEGIN {printf \"%d\", $BUDGET - ($(date +%s.%N) - $T0)}")
    if [ "$left" -le 10 ]; then
      echo "== $name: skipped (the --budget of $BUDGET s is spent)"
      now=$(date +%s.%N); record "$name" skipped 0 "$now" "$now" "" "$*"
      return
    fi
    if [ "$limit" = 0 ] || [ "$left" -lt "$limit" ]; then limit=$left; fi
  fi
  echo "== $name: $*"
  CURRENT="$name"; STEP_START=$(date +%s.%N); STEP_LOG="$log"; STEP_CMD="$*"
  start=$STEP_START
  if [ "$limit" != 0 ] && command -v timeout >/dev/null; then
    (cd "$ROOT" && exec timeout --kill-after=30 "$limit" "$@") > "$log" 2>&1 &
  else
    (cd "$ROOT" && exec "$@") > "$log" 2>&1 &
  fi
  CHILD=$!
  wait "$CHILD"; rc=$?
  CHILD=""; CURRENT=""
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

# lessons/report.json: every lesson's own course run report so far, gathered (the report reads this one).
gather_lessons() {
  "$PY" - "$OUT/lessons" <<'EOF' || true
import json, sys
from pathlib import Path
root = Path(sys.argv[1])
reports = [json.loads(p.read_text()) for p in sorted(root.glob("*/report.json"))]
if reports:
    merged = dict(reports[0])
    merged["lessons"] = [l for r in reports for l in r.get("lessons", [])]
    merged["all_passed"] = all(r.get("all_passed") for r in reports)
    merged["total_seconds"] = round(sum(r.get("total_seconds", 0) for r in reports), 1)
    (root / "report.json").write_text(json.dumps(merged, indent=2) + "\n")
EOF
}

write_report() {
  local t1
  t1=$(date +%s.%N)
  (cd "$ROOT" && "$PY" "$ROOT/bench/report.py" "$OUT" --device "$DEVICE" --profile "$PROFILE" --quick "$QUICK" \
     --seconds "$(awk "BEGIN {print $t1 - $T0}")") || { echo "bench/gpu.sh: writing the report failed" >&2; return 1; }
  echo "Report: $OUT/report.md and $OUT/report.json"
}

stopped() {
  trap - INT TERM
  echo "bench/gpu.sh: stopped; ending ${CURRENT:-nothing} and writing the report"
  if [ -n "$CHILD" ]; then
    pkill -TERM -P "$CHILD" 2>/dev/null; kill -TERM "$CHILD" 2>/dev/null; sleep 2; pkill -KILL -P "$CHILD" 2>/dev/null
    wait "$CHILD" 2>/dev/null
    record "$CURRENT" stopped 130 "$STEP_START" "$(date +%s.%N)" "$STEP_LOG" "$STEP_CMD"
  fi
  gather_lessons
  write_report
  exit 3
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
trap stopped INT TERM
want doctor && run_step doctor "$PY" -m course.commands.doctor --json "$OUT/doctor.json"
if want lessons; then
  # shellcheck disable=SC2086 # LESSONS is a list of ids
  for id in $(cd "$ROOT" && "$PY" -c 'import sys; from course.commands.lessons import resolve; print(" ".join(l.id for l in resolve(sys.argv[1:] or None)))' $LESSONS); do
    run_step "lesson:$id" "${COURSE[@]}" run "$id" --profile "$PROFILE" --device "$DEVICE" --out "$OUT/lessons/$id"
    gather_lessons
  done
fi
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
trap - INT TERM
write_report || exit 1
exit "$FAILED"
