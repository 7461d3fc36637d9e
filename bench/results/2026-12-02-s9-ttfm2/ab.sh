#!/bin/bash
S=/work/wt-ttfm2/bench/results/2026-12-02-s9-ttfm2/ttfm_stages.py
O=/tmp/ttfm2/final
pair() {  # label round command...
  label=$1; r=$2; shift 2
  if [ $((r % 2)) -eq 1 ]; then order="base new"; else order="new base"; fi
  for w in $order; do
    if [ $w = base ]; then d=/work/wt-ttfm2-base; else d=/work/wt-ttfm2; fi
    (cd $d && echo "# $w $(git rev-parse --short HEAD) $(date +%T) load $(cut -d' ' -f1 /proc/loadavg)" && NUMBA_NUM_THREADS=1 "$@") > $O/$label-$w-$r.txt 2>&1
  done
}
for r in 1 2 3; do pair hot $r .venv/bin/python $S --rounds 21; done
for r in 1 2 3; do pair engines $r .venv/bin/python bench/engines.py --engines corral,llguidance --skip sample --skip coverage --results /tmp/ttfm2/final/store --plot /tmp/ttfm2/final/plot.png; done
for r in 1 2 3; do pair worker $r .venv/bin/python /work/wt-ttfm2/bench/results/2026-12-01-s8/worker_first_mask.py; done
for r in 1 2; do pair idle $r .venv/bin/python $S --rounds 7 --idle 0.3; done
for r in 1 2 3; do pair sample $r .venv/bin/python $S --rounds 1 --sample 200; done
echo done $(date +%T)
