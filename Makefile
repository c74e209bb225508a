# DDP 코스: `make book` (가상환경 + 사이트 빌드, 실습 실제 실행), `make test` (전체 테스트)
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
JB_FLAGS := -W -n --keep-going
# 책을 빌드할 때 실행한 실습을 기록하고(labs/replay.py), make test는 같은 코드·같은 인자의 실습을 다시 띄우지 않고 그 기록을 쓴다
LAB_RUNS := $(CURDIR)/_build/lab-runs
# 테스트는 작업자(worker) 세 개가 파일 단위로 나눠 돌린다: 기다리는 시간(브라우저, Slurm, 제한 시간)이 겹쳐 두 코어가
# 쉬지 않는다. 파일 하나는 한 작업자에서, 시간을 재는 테스트(@pytest.mark.alone)는 혼자 돈다 (tests/parallel.py)
TEST_WORKERS := -n 3 --dist loadfile

.PHONY: book test lint venv browser slurm serve clean lab-list

$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --disable-pip-version-check -q -r requirements.txt
	$(BIN)/python -m pip install --disable-pip-version-check -q --no-deps --no-build-isolation -e .
	touch $@

venv: $(STAMP)

book: $(STAMP)
	LABS_RECORD_DIR=$(LAB_RUNS) $(BIN)/jupyter-book build . $(JB_FLAGS)

# 린트와 형 검사: ruff(pycodestyle, pyflakes, import 순서, 비공개 이름 import)와 mypy, 찾은 것이 하나라도 있으면 실패.
# 설정은 pyproject.toml; mypy는 .mypy_cache/에 캐시한다 (다시 돌리면 몇 초)
lint: $(STAMP)
	$(BIN)/ruff check labs tests book/_ext
	$(BIN)/mypy

# 브라우저 테스트용: Debian의 chromium과 한글 글꼴 (없을 때만 설치)
browser:
	@if ! command -v chromium >/dev/null 2>&1 || ! fc-list 2>/dev/null | grep -qi "noto sans cjk"; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-noto-cjk >/dev/null; \
	  else echo "chromium/fonts-noto-cjk가 없습니다: sudo apt-get install chromium fonts-noto-cjk 로 설치하세요." >&2; fi; \
	fi

# Slurm·munge 테스트용 (tests/test_engine_cluster_commands.py가 임시 폴더에 단일 노드 클러스터를 띄운다; 없을 때만 설치)
slurm:
	@if ! PATH="$$PATH:/usr/sbin" command -v slurmctld >/dev/null 2>&1 || ! PATH="$$PATH:/usr/sbin" command -v munged >/dev/null 2>&1 || ! command -v sbatch >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurmd slurmctld slurm-client munge >/dev/null; \
	  else echo "Slurm이 없습니다: sudo apt-get install slurmd slurmctld slurm-client munge 로 설치하세요 (없으면 Slurm 테스트는 건너뜁니다)." >&2; fi; \
	fi

test: lint book browser slurm
	LABS_RECORD_DIR=$(LAB_RUNS) LABS_REPLAY_DIR=$(LAB_RUNS) \
	  $(BIN)/python -m pytest tests --nbval-lax --nbval-current-env book/ -p no:cacheprovider --durations=30 $(TEST_WORKERS)

serve: book
	$(BIN)/python -m http.server --directory _build/html 8000

lab-list: $(STAMP)
	$(BIN)/python -m labs list

clean:
	rm -rf _build
