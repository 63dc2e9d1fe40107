#!/bin/bash
# Second call of the lease: Hope compiled by piece (eager launches, then replayed from CUDA graphs); the eager MQAR run.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
exec > >(tee $OUT/all.log) 2>&1
T0=$(date +%s)
el() { echo "=== [$(( $(date +%s) - T0 )) s] $*"; }
el "hope compiled by piece, graphed"
timeout 290 python3 -m regmem bench gpu --tables layers --mixers gated_deltanet,hope --graph-mixers gated_deltanet,hope --compile-mixers hope --budget 280 --out-dir $OUT/compile
el "mqar quick, hope, lr 0.03, eager"
time timeout 100 python3 -m regmem train mqar --mixer hope --preset quick --lr 0.03 --device cuda --no-progress 2>&1 | tail -1
el done
