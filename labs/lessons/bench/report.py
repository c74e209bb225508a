"""What ``python -m labs bench`` runs and prints: the full sweep, the world sizes, the plain-text report
(nccl-tests' layout) and its JSON."""

from __future__ import annotations

import json
import os

import torch

from ...result import LabResult
from .measure import ACCUM, size_label
from .summary import GATE_FROM

SIZES_FULL = tuple(k << 10 for k in (4, 16, 64, 256, 1024, 4096, 16384, 65536))
# --quick 없이 재는 값들 (--quick이면 실습의 기본값 QUICK)
FULL = {"sizes": SIZES_FULL, "repeats": 50, "warmup": 5, "memcpy_mb": 256, "ddp_steps": 20}

TABLE_COLUMNS = ("size", "count", "type", "time(us)", "algbw(GB/s)", "busbw(GB/s)",
                 "ring busbw", "ring/lib", "pipe busbw", "pipe/lib", "pipe/lib range")
_WIDTHS = (12, 10, 7, 11, 13, 13, 12, 10, 12, 10, 16)
_VARIANT_LABELS = {"compute": "통신 없음(기준)", "manual": "수동: 파라미터마다 all_reduce", ACCUM: "DDP + no_sync 누적"}


def variant_label(name: str) -> str:
    return _VARIANT_LABELS.get(name) or f"DDP bucket_cap_mb={name[4:]}"


def _ratio(ratio: dict | None) -> str:
    return "-" if ratio is None else f"{ratio['median']:.2f}"


def allreduce_table(result: LabResult) -> str:
    """The All-Reduce rows in nccl-tests' layout; on the right both rings' busbw and their paired
    ratio to the library (median of the pairs, and for the pipelined ring its range)."""
    head = "".join(f"{c:>{w}}" for c, w in zip(TABLE_COLUMNS, _WIDTHS))
    lines = ["#" + head[1:]]
    for r in result.data["rows"]:
        lib, ring, pipe = r["library"], r["ring"], r["pipelined"]
        spread = "-" if r["pipelined_ratio"] is None else \
            f"{r['pipelined_ratio']['min']:.2f}–{r['pipelined_ratio']['max']:.2f}"
        cells = (r["size"], r["count"], r["type"], f"{lib['time_us']:.1f}", f"{lib['algbw']:.3f}",
                 f"{lib['busbw']:.3f}", f"{ring['busbw']:.3f}", _ratio(r["ring_ratio"]), f"{pipe['busbw']:.3f}",
                 _ratio(r["pipelined_ratio"]), spread)
        lines.append("".join(f"{c:>{w}}" for c, w in zip(cells, _WIDTHS)))
    return "\n".join(lines)


def ddp_table(result: LabResult) -> str:
    lines = [f"{'방식':<32}{'K':>3}{'step(ms)':>10}{'all_reduce':>12}{'÷수동':>8}{'효율':>8}"]
    for row in result.data["ddp"]["rows"]:
        ratio = "-" if row["vs_manual"] is None else f"{row['vs_manual']:.2f}"
        lines.append(f"{variant_label(row['variant']):<32}{row['micro_steps']:>3}{row['step_ms']:>10.2f}"
                     f"{str(row['all_reduce']):>12}{ratio:>8}{row['efficiency']:>8.2f}")
    return "\n".join(lines)


def report(result: LabResult) -> str:
    """The Korean plain-text report of one run: header, ceiling, tables, fit, checks."""
    d, n = result.data, result.world_size
    lines = [f"# All-Reduce 벤치마크 · N={n} · 백엔드 {result.backend} · 장치 {d['device']} · "
             f"busbw = algbw × 2(N-1)/N = algbw × {d['bus_factor']:.3f}"]
    if d["oversubscribed"]:
        lines.append(f"# 주의: 랭크 {n}개가 CPU 코어 {d['cpu_count']}개를 나눠 쓴다(과다 구독, oversubscribed). "
                     "시간에는 코어를 기다린 시간이 들어 있고, 링과 라이브러리의 경주(pipelined_vs_library)는 확인하지 않는다.")
    m = d["memcpy"]
    lines.append(f"# 메모리 복사 copy_ {m['bytes'] >> 20} MiB: 랭크 0 혼자 {m['alone_gbs']:.2f} GB/s, "
                 f"모든 랭크가 동시에 하면 랭크당 {m['together_gbs']:.2f} GB/s (읽기+쓰기 트래픽은 그 2배)")
    lines.append(allreduce_table(result))
    if d["pipelined_vs_library"] is not None:
        lines.append(f"# {size_label(GATE_FROM)} 이상에서 파이프라인 링 busbw ÷ 라이브러리 busbw (쌍별 비율의 중앙값, "
                     f"크기들의 중앙값) = {d['pipelined_vs_library']:.2f} (빌드 확인 ≥ {d['pipeline_gate']}, "
                     f"세그먼트 {size_label(d['segment_bytes'])})")
    for label, t in d["target"].items():
        lines.append(f"# 목표 {d['pipeline_target']}: {label}에서 파이프라인 링 ÷ 라이브러리 = {t['ratio']:.2f} "
                     + ("달성" if t["met"] else "미달") + (" (과다 구독: 참고만)" if d["oversubscribed"] else ""))
    if d["fit"]:
        f = d["fit"]
        lines.append(f"# 비용 모델 맞춤(라이브러리): α = {f['alpha_s'] * 1e6:.1f} us, BW = {f['bandwidth'] / 1e9:.3f} GB/s, "
                     f"log t의 R² = {f['r2_log']:.3f}")
    dd = d["ddp"]
    lines.append(f"# DDP 한 스텝: 파라미터 {dd['n_params']:,}개({dd['model_bytes'] / 2**20:.1f} MiB, 텐서 "
                 f"{dd['n_tensors']}개), 같은 크기의 All-Reduce 한 번은 {dd['comm_alone_ms']:.2f} ms")
    lines.append(ddp_table(result))
    lines.append(result.report())
    return "\n".join(lines)


def to_dict(result: LabResult) -> dict:
    """One run as JSON data: the checks and every summary table (not the per-rank raw samples)."""
    return {**result.to_dict(), **result.data}


def to_json(results: list[LabResult]) -> str:
    return json.dumps({"runs": [to_dict(r) for r in results], "ok": all(r.ok for r in results)},
                      ensure_ascii=False, indent=2)


def default_world_sizes(gpus: int | None = None, cpus: int | None = None) -> list[int]:
    """N = 2 and 4, then doubling while the GPUs (without GPUs: the cores) allow, then all GPUs."""
    gpus = torch.cuda.device_count() if gpus is None else gpus
    cpus = (os.cpu_count() or 1) if cpus is None else cpus
    limit = gpus if gpus >= 2 else cpus
    sizes = [2, 4]
    while sizes[-1] * 2 <= limit:
        sizes.append(sizes[-1] * 2)
    if gpus > 4 and gpus not in sizes:
        sizes.append(gpus)
    return sizes
