#!/usr/bin/env bash
# Kiln's checks on a GPU machine, step by step; each step's log and JSON land in $OUT (default
# ./gpu-out), with one line per step (name, exit code, seconds) in $OUT/steps.tsv, and all of it in
# $OUT/results.tgz at the end. A step that fails does not stop the others. On the lent device
# machine:
#   source .dev/setup.sh && bash tools/gpu_session.sh build gpu_tests bench_learner
# Steps: build (kiln only) | build_tests (kiln + gpu tests) | codegen_tests | gpu_tests |
#        executor_tests |
#        bench_learner |
#        validate | baselines | baselines_only | eval | eval_dirs | run | bench_pool | sources |
#        import_tests | import_cuda | import_module | kb_baselines | modelnew | modelnew_baselines | modelnew_examples | kernelbench_timing |
#        seccomp_probe
# KILN_STEP_TIMEOUT (seconds, default 540) bounds each step; KILN_RUN_CONFIG is the run step's
# config (default configs/cuda.toml); KILN_BASELINES names a baselines file
# for eval and run (default: the one the baselines step wrote).
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-$PWD/gpu-out}"
mkdir -p "$out"
bin=build-gpu/kiln
gpu_suites=(data/suites/level1/gpu data/suites/level2/gpu data/suites/level3/gpu)
limit="${KILN_STEP_TIMEOUT:-540}"

configure() {
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_CUDA=ON -DKILN_TESTS=ON
}

step_build() { configure && cmake --build build-gpu --target kiln; }
step_build_tests() {
  configure && cmake --build build-gpu --target kiln kiln-kernel-host kiln-kernel-host-cuda kiln_cuda_executor_test \
    kiln_reference_cuda_test kiln_learner_cuda_test
}
# The cuda generator alone: every expert program of the suites and random programs through NVRTC.
step_codegen_tests() {
  configure && cmake --build build-gpu --target kiln_codegen_cuda_tests &&
    build-gpu/tests/kiln_codegen_cuda_tests
}
step_gpu_tests() { (cd build-gpu && ctest -L gpu --output-on-failure --timeout 400); }
# The cuda executor's tests alone, every MESSAGE (figures) printed, kernel hosts' stderr kept.
step_executor_tests() {
  KILN_KERNEL_HOST_STDERR=1 build-gpu/tests/kiln_cuda_executor_test -s \
    > "$out/executor_tests.full.log" 2>&1
  local rc=$?
  grep -E "MESSAGE|ERROR|FATAL|TEST CASE|test cases|kiln|logged" "$out/executor_tests.full.log" |
    tail -n 300
  return $rc
}
step_bench_learner() {
  "$bin" bench learner --device cuda --updates 10 --json > "$out/bench_learner_cuda.json" &&
    "$bin" bench learner --device cuda --d-model 512 --layers 6 --heads 8 --updates 0 --json \
      > "$out/bench_learner_cuda_512x6.json" &&
    "$bin" --threads 8 bench learner --device cpu --updates 6 --json > "$out/bench_learner_cpu8.json"
}
step_validate() {
  "$bin" tasks validate "${gpu_suites[@]}" --device cuda --digest 256 \
    --json "$out/validate_gpu_digest.jsonl"
}
step_baselines() {
  local v=()
  [ -s "$out/validate_gpu_digest.jsonl" ] && v=(--validated "$out/validate_gpu_digest.jsonl")
  python3 tools/torch_baselines.py --device cuda --kiln "$bin" "${v[@]}" \
    $(printf -- '--suite %s ' "${gpu_suites[@]}") --jobs "${KILN_BASELINE_JOBS:-6}" \
    --time-cap-ms "${KILN_BASELINE_CAP_MS:-1000}" \
    --out "$out/baselines_h200.json" --report "$out/baselines_h200.report.json"
}
# Tasks named in KILN_BASELINE_ONLY, one at a time (e.g. those a parallel run lost to CUDA OOM),
# merged with the file KILN_BASELINES names into $out/baselines_h200.json.
step_baselines_only() {
  python3 tools/torch_baselines.py --device cuda --kiln "$bin" --jobs 1 \
    $(printf -- '--suite %s ' "${gpu_suites[@]}") $(printf -- '--only %s ' $KILN_BASELINE_ONLY) \
    --time-cap-ms "${KILN_BASELINE_CAP_MS:-1000}" --out "$out/baselines_only.json" \
    --report "$out/baselines_only.report.json"
  python3 -c '
import json, sys
base, extra, out = (json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3])
base["tasks"].update(extra["tasks"])
json.dump(base, open(out, "w"), indent=1)
print(len(base["tasks"]), "tasks in", out)' "$KILN_BASELINES" "$out/baselines_only.json" "$out/baselines_h200.json"
}
# Made by the baselines step, or given; absolute, since run configs resolve paths from their folder.
baselines="$(realpath -m "${KILN_BASELINES:-$out/baselines_h200.json}")"
step_eval() {
  local b=()
  [ -s "$out/baselines_h200.json" ] && baselines="$out/baselines_h200.json"
  [ -s "$baselines" ] && b=(--baselines "$baselines")
  "$bin" eval --backend cuda --policy expert $(printf -- '--suite %s ' "${gpu_suites[@]}") \
    --parallel 3 --compile-workers 12 "${b[@]}" --json "$out/eval_cuda_expert_h200.json"
}
# The expert on cuda over the task folders in KILN_EVAL_SUITES (e.g. imported KernelBench tasks),
# against the baselines of the kb_baselines step or KILN_BASELINES where there are some.
step_eval_dirs() {
  local b=()
  [ -s "$out/baselines_kb.json" ] && baselines="$out/baselines_kb.json"
  [ -s "$baselines" ] && b=(--baselines "$baselines")
  "$bin" eval --backend cuda --policy expert $(printf -- '--suite %s ' ${KILN_EVAL_SUITES:?}) \
    --parallel 3 --compile-workers 12 "${b[@]}" --json "$out/eval_cuda_expert_dirs.json"
}
# torch.compile baselines for the task folders in KILN_EVAL_SUITES.
step_kb_baselines() {
  python3 tools/torch_baselines.py --device cuda --kiln "$bin" \
    $(printf -- '--suite %s ' ${KILN_EVAL_SUITES:?}) --jobs "${KILN_BASELINE_JOBS:-8}" \
    --time-cap-ms "${KILN_BASELINE_CAP_MS:-1000}" --out "$out/baselines_kb.json" \
    --report "$out/baselines_kb.report.json"
}
step_run() {
  local b=()
  [ -s "$out/baselines_h200.json" ] && baselines="$out/baselines_h200.json"
  [ -s "$baselines" ] && b=(--set "pool.baselines=\"$baselines\"")
  "$bin" run "${KILN_RUN_CONFIG:-configs/cuda.toml}" --set "run.out_dir=\"$out/runs\"" "${b[@]}" \
    ${KILN_RUN_SET:-}
}
# Free-form nvcc source beside the expert's program on the same task, vs the stored H200 baselines.
step_sources() {
  "$bin" eval --backend cuda --policy sources:docs/examples/sources/cuda --policy expert \
    --suite data/suites/level1/gpu/relu.toml --baselines "$PWD/docs/results/baselines_h200.json" \
    --json "$out/eval_sources_cuda.json"
}
# The KernelBench importer's tests with this machine's PyTorch (the GPU machine's is newer than
# Debian's: torch.fx and nn.Module internals move between versions).
step_import_tests() {
  python3 -c 'import torch; print("torch", torch.__version__)' &&
    KILN="$PWD/$bin" python3 tests/tools/test_kernelbench_import.py -v
}
# KernelBench's levels 1-3 at their own sizes, checked on this device (KILN_KB: the checkout of
# ScalingIntelligence/KernelBench's KernelBench/ folder, not part of Kiln; default .kb/KernelBench;
# KILN_IMPORT_LEVELS: which levels, default "1 2 3").
# KILN_IMPORT_PATHS (problem files or folders) in place of KILN_IMPORT_LEVELS when set.
step_import_cuda() {
  local kb="${KILN_KB:-.kb/KernelBench}" d="$out/kb_cuda" levels=()
  for l in ${KILN_IMPORT_LEVELS:-1 2 3}; do levels+=("$kb/level$l"); done
  [ -n "${KILN_IMPORT_PATHS:-}" ] && read -ra levels <<< "$KILN_IMPORT_PATHS"
  rm -rf "$d" && mkdir -p "$d"
  "$bin" tasks import "${levels[@]}" --device cuda --out "$d/tasks" \
    --jobs "${KILN_IMPORT_JOBS:-8}" --timeout 240 --report "$d/import.json" > "$d/import.log" 2>&1
  local rc=$?
  tail -n 30 "$d/import.log"
  return $rc
}
# The problems spec v1 cannot say, at KernelBench's sizes on the device: level 3 imported (each
# such problem as its own Model, op pytorch_module), those tasks' torch.compile baselines, and the
# problem's Model submitted as ModelNew against the module reference through the pool.
step_import_module() {
  local kb="${KILN_KB:-.kb/KernelBench}" d="$out/kb_module"
  rm -rf "$d" && mkdir -p "$d/module_tasks"
  "$bin" tasks import "$kb"/level3 --device cuda --out "$d/tasks" --jobs "${KILN_IMPORT_JOBS:-8}" \
    --timeout 240 --report "$d/import.json" > "$d/import.log" 2>&1
  tail -n 12 "$d/import.log"
  grep -l 'op = "pytorch_module"' "$d"/tasks/level3/*.toml | xargs -r cp -t "$d/module_tasks"
  ls "$d/module_tasks"
  python3 tools/torch_baselines.py --device cuda --kiln "$bin" --suite "$d/module_tasks" --jobs 4 \
    --time-cap-ms 1000 --out "$d/baselines.json" --report "$d/baselines.report.json" \
    > "$d/baselines.log" 2>&1
  tail -n 8 "$d/baselines.log"
  python3 tools/modelnew_from_model.py "$d/module_tasks" --out "$d/subs" &&
    "$bin" eval --backend cuda --policy "sources:$d/subs" --suite "$d/module_tasks" \
      --compile-workers 12 --baselines "$d/baselines.json" --json "$d/eval.json" \
      > "$d/eval.log" 2>&1
  local rc=$?
  tail -n 25 "$d/eval.log"
  return $rc
}
# KernelBench's way in on cuda: the hand-written problems imported on this machine, each problem's
# own Model submitted as ModelNew (tools/modelnew_from_model.py: its kernel / eager ratio is the
# ModelNew path's overhead), the expert beside it.
step_modelnew() {
  local d="$out/modelnew"
  rm -rf "$d" && mkdir -p "$d"
  "$bin" tasks import tests/data/kernelbench/level{1,2,3} --out "$d/tasks" --jobs 12 \
    --report "$d/import.json" \
    > "$d/import.log" 2>&1
  tail -n 3 "$d/import.log"
  python3 tools/modelnew_from_model.py "$d/tasks" --out "$d/subs" &&
    "$bin" eval --backend cuda --policy "sources:$d/subs" --policy expert --suite "$d/tasks" \
      --compile-workers 12 --json "$out/eval_modelnew_cuda.json"
}
# ModelNew solutions written for imported KernelBench problems (KILN_MODELNEW_TASKS: the imported
# task folder; KILN_MODELNEW_SUBS: the solutions, default docs/examples/modelnew/cuda): torch.compile
# baselines, then Kiln's eval of the solutions beside the expert, then KernelBench's own timing
# method on the same solutions (tools/kernelbench_timing.py).
step_modelnew_baselines() {
  python3 tools/torch_baselines.py --device cuda --kiln "$bin" --suite "${KILN_MODELNEW_TASKS:?}" \
    --jobs 8 --time-cap-ms 1000 --out "$out/baselines_modelnew.json" \
    --report "$out/baselines_modelnew.report.json"
}
step_modelnew_examples() {
  local b=()
  [ -s "$out/baselines_modelnew.json" ] && b=(--baselines "$out/baselines_modelnew.json")
  "$bin" eval --backend cuda --policy "sources:${KILN_MODELNEW_SUBS:-docs/examples/modelnew/cuda}" \
    --policy expert --suite "${KILN_MODELNEW_TASKS:?}" --compile-workers 12 "${b[@]}" \
    --json "$out/eval_modelnew_examples.json"
}
step_kernelbench_timing() {
  python3 tools/kernelbench_timing.py --tasks "${KILN_MODELNEW_TASKS:?}" \
    --subs "${KILN_MODELNEW_SUBS:-docs/examples/modelnew/cuda}" --jobs 12 \
    --out "$out/kernelbench_timing.json"
}
# torch's forward with and without a seccomp filter (and its SPEC_ALLOW flag) on this machine.
step_seccomp_probe() { python3 tools/probe_seccomp_speed.py; }
step_bench_pool() {
  "$bin" bench pool --backend cuda --suite data/suites/level1/gpu --compile-workers 12 --json \
    > "$out/bench_pool_cuda.json"
}

nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,power.limit \
  --format=csv > "$out/gpu.csv" 2>&1 || true
for s in "$@"; do
  if ! declare -F "step_$s" > /dev/null; then
    echo "gpu_session: unknown step '$s'" | tee -a "$out/steps.tsv"
    continue
  fi
  t0=$(date +%s)
  timeout "$limit" bash -c "$(declare -f configure "step_$s"); $(declare -p bin out gpu_suites baselines); step_$s" \
    > "$out/$s.log" 2>&1
  rc=$?
  printf '%s\t%d\t%d\n' "$s" "$rc" "$(($(date +%s) - t0))" | tee -a "$out/steps.tsv"
  tail -n 5 "$out/$s.log"
done
# The device tool brings back a handful of files per call: one archive holds them all.
tar czf "/tmp/kiln-gpu-results.tgz" --exclude='*.pt' -C "$out" . &&
  mv /tmp/kiln-gpu-results.tgz "$out/results.tgz" && echo "gpu_session: $out/results.tgz"
