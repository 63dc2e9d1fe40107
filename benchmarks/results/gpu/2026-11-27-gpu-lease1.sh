#!/bin/bash
# One lease: the key target first, then tests, then the rest; each step bounded.
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
exec > >(tee $OUT/all.log) 2>&1
T0=$(date +%s)
el() { echo "=== [$(( $(date +%s) - T0 )) s] $*"; }
el env
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
el "layers: eager + CUDA graphs"
timeout 110 python3 -m regmem bench gpu --tables layers --mixers gated_deltanet,hope,self_modifying_titans,titans_mlp,ttt_mlp,attn,mesa,deltaformer --graph-mixers gated_deltanet,hope,self_modifying_titans,titans_mlp,ttt_mlp,attn --no-compile --budget 100 --out-dir $OUT/layers
el "mqar quick, hope, lr 0.03, graphed then eager"
time timeout 45 python3 -m regmem train mqar --mixer hope --preset quick --lr 0.03 --device cuda --cuda-graphs --no-progress 2>&1 | tail -2
time timeout 45 python3 -m regmem train mqar --mixer hope --preset quick --lr 0.03 --device cuda --no-progress 2>&1 | tail -2
el "tests on CUDA"
timeout 120 python3 -m pytest -q -p no:cacheprovider -n 4 tests/train/test_cuda_graphs.py tests/ops/test_triton_kernels.py tests/ops/test_triton_least_squares.py 2>&1 | tail -25
el "ops: regmem's Triton kernels"
timeout 80 python3 -m regmem bench gpu --tables ops --ops deltaformer,least_squares_cg,local_linear_attn,least_squares --no-fla --budget 70 --out-dir $OUT/ops
el "hope compiled by piece"
timeout 60 python3 -m regmem bench gpu --tables layers --mixers gated_deltanet,hope --graph-mixers hope --compile-mixers hope --budget 55 --out-dir $OUT/compile
el done
