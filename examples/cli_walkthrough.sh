#!/usr/bin/env bash
# The `ooc` command line, start to finish, on a small generated data set (a few seconds).
#
#   bash examples/cli_walkthrough.sh            # from the repository root, with ooc installed
#   KEEP=1 bash examples/cli_walkthrough.sh     # keep the files (the directory is printed)
#
# Everything is written under a new temporary directory, removed at the end unless KEEP=1.
set -euo pipefail

OOC=${OOC:-ooc}
PYTHON=${PYTHON:-python3}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ooc-walkthrough-XXXXXX")
if [ "${KEEP:-0}" = 1 ]; then
  trap 'echo "files kept in $TMP"' EXIT
else
  trap 'rm -rf "$TMP"' EXIT
fi
step() { printf '\n== %s\n' "$*"; }

step "1. a text-like svmlight file (labels +-1, Zipf-popular features), split into train and test"
"$PYTHON" -c "
from ooc.synth import SynthSource, write_svmlight
write_svmlight(SynthSource(12000, 5000, 20, seed=0), '$TMP/all.svm')
"
head -n 10000 "$TMP/all.svm" | gzip > "$TMP/train.svm.gz"
tail -n 2000 "$TMP/all.svm" > "$TMP/test.svm"
head -c 120 "$TMP/test.svm"; echo " ..."

step "2. ooc convert: svmlight (.gz) -> store (rows and columns, chunked, checksummed)"
$OOC convert "$TMP/train.svm.gz" "$TMP/train.zarr" --memory 256MiB

step "3. ooc info: shape, labels, norms, C_P vs C_D"
$OOC info "$TMP/train.zarr"

step "4. ooc train --json: logistic regression to a certified relative duality gap of 1e-6"
# stop early on purpose after 2 epochs, then resume: a resumed run ends exactly where an
# uninterrupted one would (it also survives a kill -9 between checkpoints)
$OOC train "$TMP/train.zarr" --out "$TMP/run" --loss logistic --l2 1e-4 --tol 1e-6 --max-epochs 2 > /dev/null
echo "stopped after 2 epochs: $(wc -l < "$TMP/run/history.jsonl") history lines"
$OOC resume "$TMP/run" --max-epochs 100 --json | tee "$TMP/train.json"
"$PYTHON" -c "
import json; r = json.load(open('$TMP/train.json'))
print(f\"converged={r['converged']} epochs={r['epochs']} primal={r['primal']:.8f} gap={r['gap']:.2e}\")
"

step "5. ooc evaluate: accuracy, logloss, ROC AUC, F1, confusion matrix, primal objective on held-out rows"
$OOC evaluate "$TMP/run" "$TMP/test.svm"

step "6. ooc predict: one label per line (the file's own label values)"
$OOC predict "$TMP/run" "$TMP/test.svm" --out "$TMP/pred.txt"
echo "$(wc -l < "$TMP/pred.txt") predictions, first ones: $(head -n 5 "$TMP/pred.txt" | tr '\n' ' ')"

step "7. ooc info RUN: the objective, its certificate, the largest weights (feature ids as in the file)"
$OOC info "$TMP/run" --top 5

step "8. ooc export: LIBLINEAR's model file (its predict reads it) and 'feature weight' text"
$OOC export "$TMP/run" --format liblinear --out "$TMP/model.liblinear"
$OOC export "$TMP/run" --format text --out "$TMP/weights.txt"
head -n 6 "$TMP/model.liblinear"
echo "$(grep -vc '^#' "$TMP/weights.txt") weight lines in weights.txt"

echo
echo "walkthrough done"
