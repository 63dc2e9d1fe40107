#!/bin/bash
# Third call: Hope compiled by piece with the CMS's chunks compiled too, graphed; GDN and SMT the same way.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
exec > >(tee $OUT/all.log) 2>&1
T0=$(date +%s)
el() { echo "=== [$(( $(date +%s) - T0 )) s] $*"; }
el "hope, gdn, smt: eager, graphed, compiled, compiled + graphed"
timeout 215 python3 -m regmem bench gpu --tables layers --mixers gated_deltanet,hope,self_modifying_titans --graph-mixers gated_deltanet,hope,self_modifying_titans --compile-mixers hope,gated_deltanet,self_modifying_titans --budget 205 --out-dir $OUT/compile
el done
