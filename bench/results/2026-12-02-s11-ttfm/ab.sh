#!/bin/bash
O=/tmp/ttfm-ab/final  # its .txt outputs are in ab/ here; engines.py's stores and plots stayed in /tmp
mkdir -p $O
run() {  # label round worker command...
  label=$1; r=$2; w=$3; shift 3
  if [ $w = base ]; then d=/work/wt-ttfm-base; else d=/work/wt-ttfm; fi
  (cd $d && echo "# $w $(git rev-parse --short HEAD) $(date +%T) load $(cut -d' ' -f1 /proc/loadavg)" && NUMBA_NUM_THREADS=1 "$@") > $O/$label-$w-$r.txt 2>&1
}
for r in 1 2 3; do
  if [ $((r % 2)) -eq 1 ]; then order="base new"; else order="new base"; fi
  for w in $order; do
    run engines $r $w .venv/bin/python bench/engines.py --engines corral,llguidance --skip coverage --sample 50 --results $O/store-$w-$r --plot $O/plot-$w-$r.png
  done
done
for r in 1 2 3; do
  if [ $((r % 2)) -eq 1 ]; then order="base new"; else order="new base"; fi
  for w in $order; do run hot $r $w .venv/bin/python bench/results/2026-12-02-s9-ttfm2/ttfm_stages.py --rounds 21; done
done
for r in 1 2 3; do
  if [ $((r % 2)) -eq 1 ]; then order="base new"; else order="new base"; fi
  for w in $order; do run worker $r $w .venv/bin/python /work/wt-ttfm/bench/results/2026-12-02-s11-ttfm/ttfm_worker_cold.py --pause 0.05 --sample 50; done
done
echo done $(date +%T)
