#!/usr/bin/env bash
# GPU 노드 점검: 모든 실습(python -m labs list)을 --json으로 실행하고, 이어서 통신 벤치마크를 돌린 뒤
# 실습마다 통과/실패를 요약한다. 하나라도 실패하면 종료 코드가 0이 아니다. 8분 안에 끝나도록 시간을 나눠 쓴다.
#
#   bash labs/gpu_check.sh                    # 저장소 루트에서 (가상환경 .venv가 있으면 그것을 쓴다)
#   GPU_CHECK_TORCHRUN=1 bash labs/gpu_check.sh  # 실습을 torchrun으로 띄운다 (GPU 2개 이상일 때)
#
# GPU 2개 이상: 모든 실습을 NCCL로 N = min(GPU 수, 8)개 랭크에서 실행한다.
# GPU 1개: NCCL은 랭크마다 GPU가 하나 필요하므로 실습을 N=1로 NCCL에서 한 번, 기본 N으로 gloo/CPU에서 한 번 실행한다
#          (gloo로 CUDA 텐서를 주고받는 실행은 이 실습들이 지원하지 않는다).
# GPU 없음: 모든 실습을 기본 N으로 gloo/CPU에서 실행한다 (이 스크립트 자체를 점검할 때).
#
# 환경 변수: PYTHON (파이썬 경로), GPU_CHECK_BUDGET (전체 제한 시간, 초, 기본 450),
#            GPU_CHECK_LAB_TIMEOUT (실습 하나의 제한 시간, 초, 기본 120), GPU_CHECK_OUT (JSON을 남길 폴더)

set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
PYTHON="${PYTHON:-}"
if [[ -z "$PYTHON" ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
BUDGET="${GPU_CHECK_BUDGET:-450}"
LAB_TIMEOUT="${GPU_CHECK_LAB_TIMEOUT:-120}"
OUT="${GPU_CHECK_OUT:-$(mktemp -d -t gpu-check-XXXXXX)}"
mkdir -p "$OUT"
START=$SECONDS

if ! GPUS=$("$PYTHON" -c 'import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)' 2>/dev/null); then
  echo "오류: $PYTHON 로 torch를 불러오지 못했습니다. 가상환경을 만들었는지 확인하세요 (make venv)." >&2
  exit 2
fi
if ! LABS=$("$PYTHON" -m labs list | awk 'NF {print $1}'); then
  echo "오류: python -m labs list 가 실패했습니다." >&2
  exit 2
fi
NPROC=$(( GPUS < 8 ? GPUS : 8 ))

declare -a NAMES=() MODES=() RESULTS=() TIMES=()
FAILED=0

remaining() { echo $(( BUDGET - (SECONDS - START) )); }

# run_one NAME MODE -- COMMAND...: 남은 시간 안에서 명령을 실행하고 결과를 기록한다.
run_one() {
  local name="$1" mode="$2" left limit began rc status log
  shift 3
  left=$(remaining)
  log="$OUT/${name}-${mode//[^A-Za-z0-9]/_}.json"
  if (( left < 10 )); then
    status="건너뜀(시간 부족)"
    FAILED=1
    NAMES+=("$name"); MODES+=("$mode"); RESULTS+=("$status"); TIMES+=("0")
    printf '%-13s %-22s %s\n' "$name" "$mode" "$status"
    return
  fi
  limit=$(( left < LAB_TIMEOUT ? left : LAB_TIMEOUT ))
  began=$SECONDS
  timeout --kill-after=10 "$limit" "$@" >"$log" 2>"$log.stderr"
  rc=$?
  case $rc in
    0) status="통과" ;;
    1) status="실패(확인 항목)"; FAILED=1 ;;
    124 | 137) status="실패(제한 시간 ${limit}초)"; FAILED=1 ;;
    *) status="실패(종료 코드 $rc)"; FAILED=1 ;;
  esac
  NAMES+=("$name"); MODES+=("$mode"); RESULTS+=("$status"); TIMES+=("$(( SECONDS - began ))")
  printf '%-13s %-22s %-24s %3d초\n' "$name" "$mode" "$status" "$(( SECONDS - began ))"
  if (( rc != 0 )); then
    tail -n 5 "$log.stderr" | sed 's/^/    /'
  fi
}

run_lab() {  # run_lab NAME N BACKEND
  local name="$1" n="$2" backend="$3"
  if [[ "${GPU_CHECK_TORCHRUN:-0}" == 1 && "$backend" == nccl && "$n" -ge 2 ]]; then
    run_one "$name" "torchrun N=$n $backend" -- "$PYTHON" -m torch.distributed.run --standalone \
      --nproc_per_node="$n" -m labs run "$name" --backend "$backend" --json --timeout "$LAB_TIMEOUT"
  else
    run_one "$name" "N=$n $backend" -- "$PYTHON" -m labs run "$name" --nproc "$n" --backend "$backend" \
      --json --timeout "$LAB_TIMEOUT"
  fi
}

default_nproc() {  # 실습의 기본 N
  "$PYTHON" -c 'import sys, labs; print(labs.get_lab(sys.argv[1]).default_nproc)' "$1"
}

if (( GPUS >= 2 )); then
  echo "# GPU ${GPUS}개: 모든 실습을 NCCL로 N=${NPROC}에서 실행합니다. 결과 JSON: $OUT"
elif (( GPUS == 1 )); then
  echo "# GPU 1개: NCCL은 랭크마다 GPU가 하나 필요하므로, 실습마다 N=1을 NCCL로, 기본 N을 gloo/CPU로 실행합니다."
  echo "#          (gloo로 CUDA 텐서를 주고받는 실행은 이 실습들이 지원하지 않습니다.) 결과 JSON: $OUT"
else
  echo "# GPU 없음: 모든 실습을 기본 N으로 gloo/CPU에서 실행합니다(스크립트 점검용). 결과 JSON: $OUT"
fi

for lab in $LABS; do
  if (( GPUS >= 2 )); then
    run_lab "$lab" "$NPROC" nccl
  elif (( GPUS == 1 )); then
    run_lab "$lab" 1 nccl
    run_lab "$lab" "$(default_nproc "$lab")" gloo
  else
    run_lab "$lab" "$(default_nproc "$lab")" gloo
  fi
done

# 9·13장 채점기: 참조 구현 셋(DDP, ZeRO-1, FSDP)을 python -m labs grade로 (torchrun 아래에서는 랭크마다 그대로 실행)
for reference in "labs/ddp/miniddp.py" "labs/ddp/zero.py --class ShardedOptimizer" "labs/ddp/fsdp.py --class FullyShardedDP"; do
  read -r -a graded <<< "$reference"
  name="grade-$(basename "${graded[0]}" .py)"
  if (( GPUS >= 2 )); then
    if [[ "${GPU_CHECK_TORCHRUN:-0}" == 1 ]]; then
      run_one "$name" "torchrun N=$NPROC nccl" -- "$PYTHON" -m torch.distributed.run --standalone \
        --nproc_per_node="$NPROC" -m labs grade "${graded[@]}" --backend nccl --timeout "$LAB_TIMEOUT"
    else
      run_one "$name" "N=$NPROC nccl" -- "$PYTHON" -m labs grade "${graded[@]}" --nproc "$NPROC" --backend nccl \
        --timeout "$LAB_TIMEOUT"
    fi
  elif (( GPUS == 1 )); then
    run_one "$name" "N=1 nccl" -- "$PYTHON" -m labs grade "${graded[@]}" --nproc 1 --backend nccl --timeout "$LAB_TIMEOUT"
  else
    run_one "$name" "N=2 gloo" -- "$PYTHON" -m labs grade "${graded[@]}" --nproc 2 --backend gloo --timeout "$LAB_TIMEOUT"
  fi
done

# 10장의 함정: 버그(멈춤·예외·프로세스 종료를 확인)와 고친 코드를 모두. 랭크가 2개 이상이어야 함정이 생긴다.
run_one traps-all "N=$(( NPROC >= 2 ? NPROC : 2 )) bug+fix" -- "$PYTHON" -m labs.lessons.traps --nproc "$(( NPROC >= 2 ? NPROC : 2 ))"

# 통신 벤치마크: GPU가 여럿이면 전체 크기(4 KB–64 MB), 아니면 --quick
if (( GPUS >= 2 )); then
  run_one bench-suite "N=$NPROC nccl" -- "$PYTHON" -m labs bench --nproc "$NPROC" --backend nccl --json
elif (( GPUS == 1 )); then
  run_one bench-suite "N=1 nccl, quick" -- "$PYTHON" -m labs bench --quick --nproc 1 --backend nccl --json
  run_one bench-suite "N=2 gloo, quick" -- "$PYTHON" -m labs bench --quick --nproc 2 --backend gloo --json
else
  run_one bench-suite "N=2 gloo, quick" -- "$PYTHON" -m labs bench --quick --nproc 2 --backend gloo --json
fi

echo
echo "# 요약 ($(( SECONDS - START ))초, 결과 JSON: $OUT)"
echo "실습          실행                   결과                   시간"  # 한글은 두 칸: 아래 열에 맞춘 간격
for i in "${!NAMES[@]}"; do
  printf '%-13s %-22s %-24s %3d초\n' "${NAMES[$i]}" "${MODES[$i]}" "${RESULTS[$i]}" "${TIMES[$i]}"
done
if (( FAILED )); then
  echo "# 실패한 실행이 있습니다. 위의 stderr 끝부분과 $OUT 의 JSON을 확인하세요."
  exit 1
fi
echo "# 모든 실행이 통과했습니다."
exit 0
