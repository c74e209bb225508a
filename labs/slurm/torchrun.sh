# ddp_lab.sbatch와 train.sbatch가 source로 불러 쓰는 공통 부분 (직접 실행하지 않는다).
# 정하는 것: 저장소의 가상환경, 노드당 랭크 수, 백엔드, 랑데부 주소. 그리고 run_torchrun이 노드마다 torchrun 하나를 띄운다.

# 가상환경: 저장소의 .venv (make venv). 없으면 PATH의 torchrun (클러스터에 CUDA용 PyTorch가 이미 있을 때)
if [[ -f "$DDP_COURSE_DIR/.venv/bin/activate" ]]; then
  source "$DDP_COURSE_DIR/.venv/bin/activate"
fi
if ! command -v torchrun >/dev/null; then
  echo "오류: torchrun을 찾지 못했습니다. 저장소($DDP_COURSE_DIR)에서 make venv를 실행하거나 DDP_COURSE_DIR로 저장소 위치를 알려 주세요." >&2
  exit 2
fi

# 노드당 랭크 수: 작업에 GPU가 있으면 GPU 수 (랭크마다 GPU 하나, NCCL), 없으면 NPROC_PER_NODE (기본 2, gloo)
if [[ "${SLURM_GPUS_ON_NODE:-0}" -gt 0 ]]; then
  NPROC_PER_NODE="$SLURM_GPUS_ON_NODE"
  BACKEND=nccl
else
  NPROC_PER_NODE="${NPROC_PER_NODE:-2}"
  BACKEND=gloo
fi
# 첫 번째 노드가 랑데부 주소가 되고, 포트는 작업 번호로 정한다 (같은 노드의 다른 작업과 겹치지 않게)
HEAD_NODE=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
PORT=$((20000 + SLURM_JOB_ID % 20000))

echo "작업 $SLURM_JOB_ID: 노드 ${SLURM_JOB_NUM_NODES}대 × 랭크 ${NPROC_PER_NODE}개, 백엔드 $BACKEND, 랑데부 $HEAD_NODE:$PORT"
echo "저장소: $DDP_COURSE_DIR · 파이썬: $(command -v python)"
echo "출력 파일: $(scontrol show job "$SLURM_JOB_ID" | sed -n 's/^ *StdOut=//p')"
echo "오류 출력: $(scontrol show job "$SLURM_JOB_ID" | sed -n 's/^ *StdErr=//p') (경고, 진행 막대, 실패한 랭크의 traceback)"

# 노드마다 torchrun 하나 (srun), torchrun이 랭크 NPROC_PER_NODE개를 띄운다. 인자는 torchrun 뒤에 붙는 프로그램
run_torchrun() {
  srun --kill-on-bad-exit=1 torchrun \
    --nnodes="$SLURM_JOB_NUM_NODES" \
    --nproc_per_node="$NPROC_PER_NODE" \
    --rdzv-id="$SLURM_JOB_ID" \
    --rdzv-backend=c10d \
    --rdzv-endpoint="$HEAD_NODE:$PORT" \
    "$@"
}
