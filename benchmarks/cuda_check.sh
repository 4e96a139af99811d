#!/usr/bin/env bash
# The CUDA checks and rows of issue 41 in one run, for a session that is lent a GPU (such a loan is short: plan on
# about 12 minutes of it). Nothing here has run on a GPU yet; every step has its own time limit and the next step
# runs whatever the last one did, so one failure costs one step. Run from anywhere:
#
#     bash benchmarks/cuda_check.sh                 # log and JSON results under $OUT (default /tmp/otlp-cuda)
#     STEPS="1 2 8" bash benchmarks/cuda_check.sh   # only these of the numbered steps below (their limits add up to
#                                                   # about 26 minutes, more than a loan: pick what is being checked)
#
# 1. the GPU, torch and Triton; the C kernels built in place (the CPU reference the rates compare against);
# 2. the 37 tests that skip without CUDA (the device routes against the CPU route, CUDA graphs, the fused Triton
#    kernels run compiled, the decode loop's device path, optimal_wor's device route eager and graphed against its
#    host route, its plan's Triton kernel compiled), with the rest of their 10 files (about a minute);
# 3. benchmarks/verifiers.py at B = 64, V = 128k, n = 2, 4, 8, the three drafts: eager (optimal's Triton route,
#    `optimal triton` beside the sorted torch route `optimal_torch` with the outputs that differ, the fused rrs and
#    sps kernels beside their torch routes, bytes moved / read floor), then every rule captured in a CUDA graph;
# 4. benchmarks/device_buckets_rates.py --passes route: get("optimal")'s CUDA route, fallback kernel included,
#    against the CPU route on 4 x 64 rows per point in three dtypes (exit status 1 if a row differs);
# 5. benchmarks/decode_verifier_share.py on the GPU (the decode loop's verifier share, optimal against rrs);
# 6. issue 45's rows: optimal_wor against rrs_wor on CUDA tensors, drafts filtered to their top 10 and drawn
#    without replacement: eager (optimal_wor's device route with top_k, its plan's Newton steps in the Triton kernel,
#    beside the same route with them as torch operations `optimal_wor_torch` and its host route `optimal_wor_host`,
#    which synchronises), then captured in a CUDA graph (the device routes' capture; the host route cannot be);
# 7. targets filtered to their top 50 (what an engine passes): optimal's Triton route against rrs in a CUDA graph,
#    where the histogram kernel sums a block's p = 0 tokens before its atomics (never timed on a GPU yet);
# 8. optimal's Triton route with compile=True (its ~2,600 eager torch ops a call compiled by inductor, the Triton
#    launches between the graphs) against rrs in a CUDA graph, and the outputs unlike the eager route's (never run
#    on a GPU: the CPU checks trace it with inductor off).
#
# Then publish what it measured here: `python benchmarks/verifiers.py --from-json $OUT/verifiers_cuda_graph.json`
# (and the eager file) for docs/COST.md's CUDA tables, and the decode table with `--from-json` as its --help says.
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/otlp-cuda}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
PY=${PYTHON:-python3}

STEPS=${STEPS:-1 2 3 4 5 6 7 8}

step() {  # step NUMBER LIMIT_SECONDS COMMAND...: where NUMBER is in $STEPS, run it under its limit, print its exit
    local number=$1 limit=$2  # status, go on either way
    shift 2
    case " $STEPS " in *" $number "*) ;; *) return 0 ;; esac
    echo "== $* (limit ${limit} s)"
    local start=$SECONDS
    timeout "$limit" "$@"
    echo "== exit $? after $((SECONDS - start)) s"
}

{
    step 1 20 nvidia-smi -L
    step 1 60 "$PY" -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, \
torch.cuda.get_device_name() if torch.cuda.is_available() else 'NO CUDA DEVICE')"
    step 1 120 "$PY" setup.py build_ext --inplace -q
    step 2 240 "$PY" -m pytest -q -rs -p no:cacheprovider tests/optimal/test_sampler_device.py \
        tests/verifiers/test_triton_kernels.py tests/backend/test_cuda_graphs.py tests/engines/test_parity.py \
        tests/verifiers/test_torch_samplers.py tests/decode/test_hf_tree.py tests/optimal/test_chains.py \
        tests/benchmarks/test_verifiers_publish.py tests/verifiers/test_optimal_wor.py tests/optimal/test_wor_triton.py
    step 3 150 "$PY" benchmarks/verifiers.py --device cuda --rules sps rrs optimal --V 128000 --B 64 --n 2 4 8 \
        --reps 10 --bytes --out "$OUT/verifiers_cuda_eager.json"
    step 3 120 "$PY" benchmarks/verifiers.py --device cuda --graph --rules sps rrs rrs_wor kseq optimal --V 128000 \
        --B 64 --n 2 4 8 --reps 10 --out "$OUT/verifiers_cuda_graph.json"
    step 4 150 "$PY" benchmarks/device_buckets_rates.py --device cuda --passes route --B 64 --batches 4 \
        --dtype float32 bfloat16 float64
    step 5 150 "$PY" benchmarks/decode_verifier_share.py --device cuda --verifiers rrs,optimal --n 4 --L 4 --batch 8 \
        --tokens 32 --context 64 --repeats 3 --out "$OUT/decode_verifier_share_cuda.json"
    step 6 90 "$PY" benchmarks/verifiers.py --device cuda --draft-top-k 10 --rules rrs_wor optimal_wor --drafts 1 \
        --V 128000 --B 1 64 --n 2 4 --reps 5 --out "$OUT/verifiers_cuda_wor.json"
    step 6 90 "$PY" benchmarks/verifiers.py --device cuda --graph --draft-top-k 10 --rules rrs_wor optimal_wor \
        --drafts 1 --V 128000 --B 1 64 --n 2 4 --reps 5 --out "$OUT/verifiers_cuda_wor_graph.json"
    step 7 90 "$PY" benchmarks/verifiers.py --device cuda --graph --top-k 50 --rules rrs optimal --drafts 1 0.5 \
        --V 128000 --B 64 --n 2 4 --reps 10 --out "$OUT/verifiers_cuda_topk.json"
    step 8 300 "$PY" benchmarks/verifiers.py --device cuda --graph --compile --rules rrs optimal --drafts 0.5 \
        --V 128000 --B 64 --n 4 --reps 10 --out "$OUT/verifiers_cuda_graph_compiled.json"
} 2>&1 | tee "$OUT/cuda_check.log"
