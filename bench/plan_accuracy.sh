#!/usr/bin/env bash
# `plimsoll plan`'s accuracy (docs/plan.md): records a few training steps at batch 8, 16, 32, 64 and 128 of two
# models, the `plimsoll train` CNN (libtorch, Fashion-MNIST) and ResNet-18 built in C++ (resnet18.hpp, through
# plimsoll_plan_resnet18_record), predicts 32, 64 and 128 from 8 and 16 alone, and compares every prediction with the
# recorded run's own peaks under each allocator. Then --fit on a device the size of the batch-64 run's own peak
# reserved, checked against runs recorded at the batch it names and the two above (made as needed). Prints tables.
#
#   bench/plan_accuracy.sh [BUILD_DIR] [RECORDINGS_DIR]
#
# Needs plimsoll_cli and plimsoll_plan_resnet18_record built (libtorch installed, scripts/install-deps.sh).
set -euo pipefail
build="${1:-build}"
out="${2:-$(mktemp -d -t plimsoll-plan-XXXXXX)}"
mkdir -p "$out"
cli="$build/src/cli/plimsoll"
resnet="$build/bench/plimsoll_plan_resnet18_record"
for tool in "$cli" "$resnet"; do
  [[ -x "$tool" ]] || { echo "error: $tool is not built (cmake --build $build --target plimsoll_cli plimsoll_plan_resnet18_record)" >&2; exit 1; }
done
for batch in 8 16 32 64 128; do
  [[ -s "$out/cnn-b$batch.plimsoll" ]] ||
    "$cli" train --epochs 1 --limit-batches 4 --batch-size "$batch" --record "$out/cnn-b$batch.plimsoll" --quiet >/dev/null
  [[ -s "$out/resnet18-b$batch.plimsoll" ]] ||
    "$resnet" --batch "$batch" --steps 4 --record "$out/resnet18-b$batch.plimsoll" >/dev/null 2>&1
done
echo "recordings: $out" >&2
/usr/bin/python3 "$(dirname "$0")/plan_accuracy_table.py" --cli "$cli" --resnet "$resnet" --dir "$out"
